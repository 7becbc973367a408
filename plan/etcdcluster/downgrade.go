package etcdcluster

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/etcdhook/etcd-hook/membership"
	corev1 "k8s.io/api/core/v1"
)

// Reasons of a downgrade through etcd's own protocol.
const (
	// ReasonDowngrading: the hook is enabling etcd's downgrade, waiting for
	// etcd to lower the members' storage version, or waiting for etcd to
	// end the downgrade once every member runs the lower release.
	ReasonDowngrading = "Downgrading"
	// ReasonDowngradeRefused: etcd refused to validate or enable the
	// downgrade; its reason is in the message, and nothing changed.
	ReasonDowngradeRefused = "DowngradeRefused"
)

// etcd downgrades online from 3.6 on, one minor version at a time:
// "downgrade validate" and "enable" lower the cluster version, every member
// then rewrites its storage version, and only then may a member run the
// lower release (it refuses to start while the cluster version is above
// its own). Once every member runs it, the leader ends the downgrade by
// itself. Before 3.6 there is no such protocol.
var firstDowngradable = semver{3, 6, 0}

// downgradeState is where etcd's downgrade protocol stands, as the
// members report it in this sync.
type downgradeState struct {
	// target is the release line the spec asks for: "3.6".
	target string
	// needed: every member answers and runs the minor release just above
	// the target, 3.6 or later. Its binaries may change only through the
	// protocol.
	needed bool
	// enabled is the line etcd's downgrade is enabled for, as the leader
	// (or else any member) reports it: "3.6", or "" when none is.
	enabled string
	// unlowered names the members whose storage version is not the
	// target's yet.
	unlowered []string
	// finishing: every member runs the target line and etcd's downgrade
	// to it is still enabled: the leader ends it within seconds.
	finishing bool
	// above: some member that answers runs a line the target is a
	// protocol downgrade from, so the cluster version may be above the
	// target.
	above bool
	// targetRuns: some member answers on the target line or below, so the
	// cluster version, the lowest of the members' releases, is at most the
	// target's.
	targetRuns bool
}

// lineOf is "3.6" for "3.6.16", "v3.6.0" or "3.6"; "" when unparseable.
func lineOf(version string) string {
	v, ok := parseVersion(version)
	if !ok {
		v, ok = parseVersion(strings.TrimPrefix(version, "v") + ".0")
	}
	if !ok {
		return ""
	}
	return strconv.Itoa(v.major) + "." + strconv.Itoa(v.minor)
}

// needsDowngradeProtocol: a change from running to target is a downgrade
// by one minor version from 3.6 or later, which only etcd's downgrade
// protocol may carry out.
func needsDowngradeProtocol(running, target string) bool {
	from, okFrom := parseVersion(running)
	to, okTo := parseVersion(target)
	return okFrom && okTo && from.major == to.major && to.minor+1 == from.minor && !from.less(firstDowngradable)
}

func (p *planner) downgradeState(views []memberView, leader memberView) downgradeState {
	st := downgradeState{target: lineOf(p.spec.Version)}
	// lineOf("") is "": no downgrade enabled.
	if leader.Reachable {
		st.enabled = lineOf(leader.DowngradeTarget)
	} else {
		for _, v := range views {
			if v.Reachable && v.DowngradeTarget != "" {
				st.enabled = lineOf(v.DowngradeTarget)
				break
			}
		}
	}
	allAnswer, allOnTarget, allAbove := len(views) > 0, true, true
	for _, v := range views {
		if !v.Reachable {
			allAnswer = false
			continue
		}
		line := lineOf(v.Version)
		if line != st.target {
			allOnTarget = false
		}
		if from, ok := parseVersion(v.Version); ok {
			if to, ok := parseVersion(p.spec.Version); ok && from.major == to.major && from.minor <= to.minor {
				st.targetRuns = true
			}
		}
		if needsDowngradeProtocol(v.Version, p.spec.Version) {
			st.above = true
		} else {
			allAbove = false
		}
		if lineOf(v.StorageVersion) != st.target {
			st.unlowered = append(st.unlowered, v.name)
		}
	}
	st.needed = allAnswer && allAbove
	st.finishing = allAnswer && allOnTarget && st.enabled == st.target
	return st
}

// downgradeStep is the rung of etcd's downgrade protocol: it cancels a
// downgrade the spec no longer asks for, enables the one it asks for, and
// holds every binary until etcd has lowered each member's storage
// version. ok is false when the protocol has nothing to do in this sync:
// then the rolling change of image goes on as for an upgrade, leader last.
func (p *planner) downgradeStep(views []memberView, st downgradeState) (stepResult, bool) {
	switch {
	case st.enabled != "" && st.enabled != st.target:
		// Set back (or enabled by hand for another line): left enabled,
		// etcd would hold the cluster version at the lower line for good.
		return acting(membership.Action{
			Type:   membership.ActionCancelDowngrade,
			Reason: fmt.Sprintf("cancelling etcd's downgrade to %s: spec.version is %s", st.enabled, p.spec.Version),
		}, ReasonDowngrading), true
	case st.finishing:
		return waiting(ReasonDowngrading, fmt.Sprintf("every member runs %s; waiting for etcd to end its downgrade to %s", p.spec.Version, st.target)), true
	case !st.needed:
		return stepResult{}, false
	}
	var unready []string
	for _, v := range views {
		if !v.ready {
			unready = append(unready, v.name)
		}
	}
	switch {
	case len(unready) > 0 && (st.enabled == "" || len(st.unlowered) > 0):
		// Health first: a member that is not ready keeps its release, and
		// the downgrade waits, as an upgrade would.
		return waiting(ReasonDowngrading, fmt.Sprintf("downgrading to %s: waiting for members to become ready first: %s", st.target, strings.Join(unready, ", "))), true
	case st.enabled == "":
		return acting(membership.Action{
			Type:    membership.ActionEnableDowngrade,
			Version: st.target,
			Reason:  fmt.Sprintf("downgrading to %s: validating and enabling etcd's downgrade to %s", p.spec.Version, st.target),
		}, ReasonDowngrading), true
	case len(st.unlowered) > 0:
		return waiting(ReasonDowngrading, fmt.Sprintf("downgrading to %s: waiting for etcd to lower the storage version of %s to %s", p.spec.Version, strings.Join(st.unlowered, ", "), st.target)), true
	}
	return stepResult{}, false
}

// mayGetTarget: the member may be given the target image now. Across a
// protocol downgrade that is only once etcd's downgrade to the target is
// enabled and the member itself reports its storage version lowered: on
// the lower release it would otherwise refuse to start, however unwell it
// was before. A member that does not answer keeps its release until it
// does, and one whose release is unknown is held while any member runs
// the line above. The exception is a member that answers on the target
// line: the cluster version is then at most the target's, and so is every
// member's data. That is how setting the previous version back rescues a
// member that an upgrade broke.
func (p *planner) mayGetTarget(v memberView, st downgradeState) bool {
	from := v.Version
	if !v.Reachable {
		from = imageRelease(v.pod)
	}
	if _, known := parseVersion(from); known && !needsDowngradeProtocol(from, p.spec.Version) {
		return true
	} else if !known && !st.above {
		return true
	}
	if st.targetRuns {
		return true
	}
	return st.enabled == st.target && v.Reachable && lineOf(v.StorageVersion) == st.target
}

// imageRelease is the release the tag of a member Pod's etcd image names
// ("3.7.3" for quay.io/coreos/etcd:v3.7.3), or "".
func imageRelease(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	image := containerImage(pod)
	i := strings.LastIndexByte(image, ':')
	if i < 0 || strings.Contains(image[i:], "/") {
		return ""
	}
	return strings.TrimPrefix(image[i+1:], "v")
}
