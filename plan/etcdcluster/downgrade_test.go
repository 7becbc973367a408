package etcdcluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

// downgradeCluster is upgradeCluster with what etcd 3.6 and later report
// of a downgrade: every member's storage version (its release line unless
// storage says otherwise) and the downgrade enabled ("" for none).
func downgradeCluster(target, enabled string, versions ...string) *Observed {
	o := upgradeCluster(target, versions...)
	for i := range o.Membership.Members {
		m := &o.Membership.Members[i]
		m.StorageVersion = lineOf(m.Version) + ".0"
		if enabled != "" {
			m.DowngradeTarget = enabled + ".0"
		}
	}
	return o
}

// lowered sets every member's storage version to line, as etcd does once
// the downgrade is enabled.
func lowered(o *Observed, line string) *Observed {
	for i := range o.Membership.Members {
		o.Membership.Members[i].StorageVersion = line + ".0"
	}
	return o
}

type downgradeSummary struct {
	Action      string
	Reimaged    map[string]string
	Upgrading   string
	Progressing string
	Degraded    string
}

func summarizeDowngrade(o *Observed, d Decision) downgradeSummary {
	up := summarizeUpgrade(o, d)
	s := downgradeSummary{Action: up.Action, Reimaged: up.Reimaged, Upgrading: up.Upgrading + "/" + up.Reason}
	if d.Action != nil && d.Action.Version != "" {
		s.Action += " " + d.Action.Version
	}
	s.Action = strings.Join(strings.Fields(s.Action), " ")
	pr := conditionOf(d.Status, v1beta2.ConditionProgressing)
	s.Progressing = string(pr.Status) + "/" + pr.Reason
	dg := conditionOf(d.Status, v1beta2.ConditionDegraded)
	s.Degraded = string(dg.Status) + "/" + dg.Reason
	return s
}

func TestPlanDowngrade(t *testing.T) {
	const from, to = "3.7.3", "3.6.16"
	image := "quay.io/coreos/etcd:v" + to
	none := map[string]string{}
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   downgradeSummary
		// wantMessage is part of the Upgrading condition's message.
		wantMessage string
	}{{
		name:   "the downgrade is enabled first",
		reason: "no binary changes before etcd has validated and enabled the downgrade to 3.6",
		in:     downgradeCluster(to, "", from, from, from),
		want: downgradeSummary{Action: "downgrade-enable 3.6", Reimaged: none,
			Upgrading: "True/RollingUpgrade", Progressing: "True/Downgrading", Degraded: "False/AsExpected"},
		wantMessage: "validating and enabling etcd's downgrade to 3.6",
	}, {
		name:   "a member that is not ready holds the enable",
		reason: "health first, as for an upgrade: nothing is enabled and no binary changes",
		in: with(downgradeCluster(to, "", from, from, from), func(o *Observed) {
			o.Pods[name(2)] = onVersion(memberPod(name(2), corev1.PodRunning, false), from)
		}),
		want: downgradeSummary{Reimaged: none,
			Upgrading: "True/RollingUpgrade", Progressing: "True/Downgrading", Degraded: "True/MembersUnready"},
		wantMessage: "waiting for members to become ready first: " + name(2),
	}, {
		name:   "the storage version is not lowered yet",
		reason: "on 3.6, a member whose data is still at 3.7 refuses to start: wait for etcd",
		in: with(lowered(downgradeCluster(to, "3.6", from, from, from), "3.6"), func(o *Observed) {
			o.Membership.Members[1].StorageVersion = "3.7.0"
		}),
		want: downgradeSummary{Reimaged: none,
			Upgrading: "True/RollingUpgrade", Progressing: "True/Downgrading", Degraded: "False/AsExpected"},
		wantMessage: "waiting for etcd to lower the storage version of " + name(1) + " to 3.6",
	}, {
		name:   "first follower once every member is lowered",
		reason: "then the binaries change one at a time, as in an upgrade, never the leader first",
		in:     lowered(downgradeCluster(to, "3.6", from, from, from), "3.6"),
		want: downgradeSummary{Reimaged: map[string]string{name(1): image},
			Upgrading: "True/RollingUpgrade", Progressing: "True/RollingUpgrade", Degraded: "False/AsExpected"},
		wantMessage: "downgrading member " + name(1),
	}, {
		name:   "next follower once the first runs the target",
		reason: "the downgraded member is ready, reports 3.6.16 and has caught up",
		in:     lowered(downgradeCluster(to, "3.6", from, to, from), "3.6"),
		want: downgradeSummary{Reimaged: map[string]string{name(2): image},
			Upgrading: "True/RollingUpgrade", Progressing: "True/RollingUpgrade", Degraded: "False/AsExpected"},
	}, {
		name:   "leader last, after leadership moves",
		reason: "only the leader is left on 3.7",
		in:     lowered(downgradeCluster(to, "3.6", from, to, to), "3.6"),
		want: downgradeSummary{Action: "move-leader " + name(1), Reimaged: none,
			Upgrading: "True/RollingUpgrade", Progressing: "True/MovingLeader", Degraded: "False/AsExpected"},
	}, {
		name:   "etcd ends the downgrade by itself",
		reason: "every member runs 3.6.16 and the downgrade is still enabled: the leader cancels it within seconds",
		in:     lowered(downgradeCluster(to, "3.6", to, to, to), "3.6"),
		want: downgradeSummary{Reimaged: none,
			Upgrading: "True/Downgrading", Progressing: "True/Downgrading", Degraded: "False/AsExpected"},
		wantMessage: "etcd is ending its downgrade to 3.6",
	}, {
		name:   "done",
		reason: "etcd ended the downgrade: nothing is left to do",
		in:     downgradeCluster(to, "", to, to, to),
		want: downgradeSummary{Reimaged: none,
			Upgrading: "False/UpToDate", Progressing: "False/Converged", Degraded: "False/AsExpected"},
	}, {
		name:   "a member down on 3.7 is not moved to 3.6 before etcd allows it",
		reason: "unlike a broken upgrade, a member on 3.7 data cannot be rescued by the lower release",
		in: with(downgradeCluster(to, "", from, from, from), func(o *Observed) {
			o.Pods[name(1)] = onVersion(memberPod(name(1), corev1.PodRunning, false), from)
			o.Membership.Members[1].Reachable = false
		}),
		want: downgradeSummary{Reimaged: none,
			Upgrading: "True/RollingUpgrade", Progressing: "True/WaitingForMember", Degraded: "True/MembersUnready"},
	}, {
		name:   "a member down on 3.7 during the roll gets 3.6 at once",
		reason: "a member answers on 3.6, so the cluster version and every member's data are at 3.6: the member serves nothing as it is",
		in: with(lowered(downgradeCluster(to, "3.6", from, to, from), "3.6"), func(o *Observed) {
			o.Pods[name(2)] = onVersion(memberPod(name(2), corev1.PodRunning, false), from)
			o.Membership.Members[2].Reachable = false
		}),
		want: downgradeSummary{Reimaged: map[string]string{name(2): image},
			Upgrading: "True/RollingUpgrade", Progressing: "True/RollingUpgrade", Degraded: "True/MembersUnready"},
	}, {
		name:   "a broken upgrade to 3.7 is set back",
		reason: "the other members still answer on 3.6, so the cluster version never left 3.6: the member on 3.7 is rescued at once, as before downgrades existed",
		in: with(downgradeCluster(to, "", from, to, to), func(o *Observed) {
			o.Pods[name(0)] = onVersion(memberPod(name(0), corev1.PodRunning, false), from)
			o.Membership.Members[0].Reachable = false
		}),
		want: downgradeSummary{Reimaged: map[string]string{name(0): image},
			Upgrading: "True/RollingUpgrade", Progressing: "True/RollingUpgrade", Degraded: "True/MembersUnready"},
	}, {
		name:   "set back before any binary changed: cancelled in etcd",
		reason: "left enabled, etcd would hold the cluster version at 3.6",
		in:     lowered(downgradeCluster(from, "3.6", from, from, from), "3.6"),
		want: downgradeSummary{Action: "downgrade-cancel", Reimaged: none,
			Upgrading: "True/Downgrading", Progressing: "True/Downgrading", Degraded: "False/AsExpected"},
	}, {
		name:   "set back halfway: cancelled before any member goes back up",
		reason: "the cancel comes first; the members on 3.6 are upgraded on later syncs",
		in:     lowered(downgradeCluster(from, "3.6", from, to, from), "3.6"),
		want: downgradeSummary{Action: "downgrade-cancel", Reimaged: none,
			Upgrading: "True/Downgrading", Progressing: "True/Downgrading", Degraded: "False/AsExpected"},
	}, {
		name:   "after the cancel, the members on 3.6 go back to 3.7",
		reason: "an ordinary upgrade by one minor version",
		in:     lowered(downgradeCluster(from, "", from, to, from), "3.6"),
		want: downgradeSummary{Reimaged: map[string]string{name(1): "quay.io/coreos/etcd:v" + from},
			Upgrading: "True/RollingUpgrade", Progressing: "True/RollingUpgrade", Degraded: "False/AsExpected"},
	}, {
		name:   "3.6 to 3.5 goes through the protocol too",
		reason: "etcd 3.6 is the first release that downgrades online",
		in:     downgradeCluster("3.5.35", "", "3.6.16", "3.6.16", "3.6.16"),
		want: downgradeSummary{Action: "downgrade-enable 3.5", Reimaged: none,
			Upgrading: "True/RollingUpgrade", Progressing: "True/Downgrading", Degraded: "False/AsExpected"},
	}, {
		name:   "two minor versions down is refused",
		reason: "3.7 to 3.5: etcd downgrades one minor version at a time; nothing changes",
		in:     downgradeCluster("3.5.35", "", from, from, from),
		want: downgradeSummary{Reimaged: none,
			Upgrading: "False/VersionSkewRefused", Progressing: "False/VersionSkewRefused", Degraded: "True/VersionSkewRefused"},
	}, {
		name:   "3.5 to 3.4 is refused",
		reason: "before 3.6 there is no downgrade protocol",
		in:     upgradeCluster("3.4.23", "3.5.35", "3.5.35", "3.5.35"),
		want: downgradeSummary{Reimaged: none,
			Upgrading: "False/VersionSkewRefused", Progressing: "False/VersionSkewRefused", Degraded: "True/VersionSkewRefused"},
	}, {
		name:   "etcd's refusal is a condition naming its reason",
		reason: "a failed validation changes nothing and says why, in etcd's words",
		in: with(downgradeCluster(to, "", from, from, from), func(o *Observed) {
			o.Acted = &Outcome{
				Action: membership.Action{Type: membership.ActionEnableDowngrade, Version: "3.6"},
				Err:    errors.New("downgrade validate 3.6: etcdserver: invalid downgrade target version"),
			}
		}),
		want: downgradeSummary{Reimaged: none,
			Upgrading: "True/RollingUpgrade", Progressing: "False/DowngradeRefused", Degraded: "True/DowngradeRefused"},
	}, {
		name:   "no rescue across a minor downgrade without a membership",
		reason: "the only member is down on 3.7 and no etcd answers: nobody can see the storage version",
		in: with(unreadable(to, from), func(o *Observed) {
			o.Cluster.Status.CurrentVersion = from
		}),
		want: downgradeSummary{Reimaged: none,
			Upgrading: "True/RollingUpgrade", Progressing: "False/Converged", Degraded: "True/QuorumLost"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Plan(tt.in)
			got := summarizeDowngrade(tt.in, d)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s\nPlan() mismatch (-want +got):\n%s", tt.reason, diff)
			}
			if msg := conditionOf(d.Status, v1beta2.ConditionUpgrading).Message; !strings.Contains(msg, tt.wantMessage) {
				t.Errorf("%s\nUpgrading message %q does not contain %q", tt.reason, msg, tt.wantMessage)
			}
		})
	}
}

func TestDowngradeRefusalNamesEtcdsReason(t *testing.T) {
	o := downgradeCluster("3.6.16", "", "3.7.3", "3.7.3", "3.7.3")
	o.Acted = &Outcome{Action: membership.Action{Type: membership.ActionEnableDowngrade, Version: "3.6"}, Err: errors.New("downgrade validate 3.6: etcdserver: cluster has a downgrade job in progress")}
	d := Plan(o)
	msg := conditionOf(d.Status, v1beta2.ConditionDegraded).Message
	if want := "etcdserver: cluster has a downgrade job in progress"; !strings.Contains(msg, want) {
		t.Errorf("Degraded message %q does not name etcd's reason %q", msg, want)
	}
	// Not Stalled: etcd refuses a downgrade for a passing reason too (the
	// cluster version still catching up after an upgrade), and the hook
	// asks again on every sync; Flux fails a health check at the first
	// Stalled=True.
	if st, rc := conditionOf(d.Status, v1beta2.ConditionStalled), conditionOf(d.Status, v1beta2.ConditionReconciling); st.Status != "False" || rc.Status != "True" {
		t.Errorf("Stalled %s/%s, Reconciling %s/%s: want a refusal the hook retries (Stalled False, Reconciling True)", st.Status, st.Reason, rc.Status, rc.Reason)
	}
	if got := summarizeUpgrade(o, d).Reimaged; len(got) > 0 {
		t.Errorf("Pods given another image after a refusal: %v", got)
	}
}

// downgradeScenario turns fuzz bytes into a cluster somewhere in a change
// between 3.6 and 3.7 (or a refused one to 3.5): each member's release,
// storage version, reachability and readiness, the downgrade etcd has
// enabled, and the leader.
func downgradeScenario(data []byte) *Observed {
	next := fuzzBytes(data)
	releases := []string{"3.6.16", "3.7.3"}
	target := []string{"3.6.16", "3.7.3", "3.5.35", "3.6.15"}[next()%4]
	enabled := []string{"", "3.6", "3.5"}[next()%3]
	n := int(next()%5) + 1
	versions := make([]string, n)
	for i := range versions {
		versions[i] = releases[next()%2]
	}
	o := downgradeCluster(target, enabled, versions...)
	o.Membership.LeaderID = uint64(next()%byte(n)) + 1
	for i := range o.Membership.Members {
		bits := next()
		m := &o.Membership.Members[i]
		m.StorageVersion = []string{"3.6.0", "3.7.0"}[bits&1]
		if bits&2 != 0 {
			m.Reachable = false
			m.Version, m.StorageVersion, m.DowngradeTarget = "", "", ""
		}
		if bits&4 != 0 {
			o.Pods[name(i)] = onVersion(memberPod(name(i), corev1.PodRunning, false), versions[i])
		}
	}
	return o
}

// FuzzDowngrade: whatever the members report, no member gets the 3.6 image
// from 3.7 unless a member answers on 3.6, or etcd's downgrade to 3.6 is
// enabled and the member itself answered with its storage version lowered; etcd's downgrade is enabled
// only when every member answers, is ready and runs the line just above
// the target, 3.6 or later; and at most one
// ready member changes image per answer.
func FuzzDowngrade(f *testing.F) {
	f.Add([]byte{0, 0, 3, 1, 1, 1, 0, 0, 0, 0})
	f.Add([]byte{0, 1, 3, 1, 1, 1, 0, 0, 0, 0})
	f.Add([]byte{0, 1, 3, 1, 0, 1, 2, 0, 0, 3})
	f.Add([]byte{1, 1, 2, 0, 1, 1, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		o := downgradeScenario(data)
		members := map[string]membership.Member{}
		for _, m := range o.Membership.Members {
			members[membership.MemberName(m, o.Cluster.Name)] = m
		}
		// etcd's downgrade is the cluster's: any member that answers knows it.
		enabled, lowerRuns := "", false
		for _, m := range o.Membership.Members {
			if m.Reachable {
				enabled = lineOf(m.DowngradeTarget)
				lowerRuns = lowerRuns || lineOf(m.Version) == "3.6"
			}
		}
		d := Plan(o)
		lower := "quay.io/coreos/etcd:v" + o.Cluster.Spec.Version
		readyChanged := 0
		for pod, img := range summarizeUpgrade(o, d).Reimaged {
			was := containerImage(o.Pods[pod])
			if podReady(o.Pods[pod]) {
				readyChanged++
			}
			if img != lower || !strings.Contains(was, "v3.7.") || !strings.HasPrefix(o.Cluster.Spec.Version, "3.6.") {
				continue
			}
			m := members[pod]
			// A member answering on 3.6 holds the cluster version, and so
			// every member's data, at 3.6.
			if !lowerRuns && (!m.Reachable || lineOf(m.StorageVersion) != "3.6" || enabled != "3.6") {
				t.Fatalf("%s moved from %s to %s with member %+v, downgrade enabled %q: etcd has not lowered it", pod, was, img, m, enabled)
			}
		}
		if readyChanged > 1 {
			t.Fatalf("%d ready members changed image in one answer", readyChanged)
		}
		if a := d.Action; a != nil && a.Type == membership.ActionEnableDowngrade {
			for _, m := range o.Membership.Members {
				pod := o.Pods[membership.MemberName(m, o.Cluster.Name)]
				if !m.Reachable || !podReady(pod) || !needsDowngradeProtocol(m.Version, a.Version+".0") {
					t.Fatalf("downgrade enabled with member %+v (Pod ready %v)", m, podReady(pod))
				}
			}
		}
	})
}
