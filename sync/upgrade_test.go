package sync

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

func onVersion(p *corev1.Pod, version string) *corev1.Pod {
	p.Spec.Containers[0].Image = "quay.io/coreos/etcd:v" + version
	return p
}

func memberOn(id uint64, n, version string) Member {
	m := member(id, n)
	m.Version = version
	return m
}

// upgradeCluster is three ready members, member 1 (m0) the leader, with
// the given versions on their Pods and reported by etcd.
func upgradeCluster(target string, versions ...string) *Observed {
	c := newCluster(3, target)
	c.Status.Phase = v1beta2.PhaseRunning
	o := observed(c)
	o.Membership = membership(1)
	for i, v := range versions {
		o.Pods[name(i)] = onVersion(readyPod(name(i)), v)
		o.Membership.Members = append(o.Membership.Members, memberOn(uint64(i+1), name(i), v))
	}
	return o
}

type upgradeSummary struct {
	Action    string
	Reimaged  map[string]string // Pod name → image, for Pods whose image the answer changes
	Upgrading string
	Reason    string
}

func summarizeUpgrade(o *Observed, d Decision) upgradeSummary {
	s := upgradeSummary{Reimaged: map[string]string{}}
	for _, c := range d.Children {
		if pod, ok := c.Object.(*corev1.Pod); ok && o.Pods[c.Name] != nil {
			if img := containerImage(pod); img != containerImage(o.Pods[c.Name]) {
				s.Reimaged[c.Name] = img
			}
		}
	}
	if d.Action != nil {
		s.Action = string(d.Action.Type) + " " + d.Action.Name
	}
	up := conditionOf(d.Status, v1beta2.ConditionUpgrading)
	s.Upgrading, s.Reason = string(up.Status), up.Reason
	return s
}

func TestPlanUpgrade(t *testing.T) {
	const old, next = "3.5.35", "3.6.16"
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   upgradeSummary
	}{{
		name:   "first follower",
		reason: "one member at a time, in place, and never the leader first",
		in:     upgradeCluster(next, old, old, old),
		want: upgradeSummary{Reimaged: map[string]string{name(1): "quay.io/coreos/etcd:v" + next},
			Upgrading: "True", Reason: ReasonRollingUpgrade},
	}, {
		name:   "next follower once the first runs the target",
		reason: "the upgraded member is ready, reports the new version and has caught up",
		in:     upgradeCluster(next, old, next, old),
		want: upgradeSummary{Reimaged: map[string]string{name(2): "quay.io/coreos/etcd:v" + next},
			Upgrading: "True", Reason: ReasonRollingUpgrade},
	}, {
		name:   "leader last, after leadership moves",
		reason: "only the leader is left: leadership moves to an upgraded member first",
		in:     upgradeCluster(next, old, next, next),
		want:   upgradeSummary{Action: "move-leader " + name(1), Reimaged: map[string]string{}, Upgrading: "True", Reason: ReasonRollingUpgrade},
	}, {
		name:   "wait for the upgraded member to report the new version",
		reason: "its Pod has the new image but etcd still reports the old binary: the container has not restarted yet",
		in: with(upgradeCluster(next, old, old, old), func(o *Observed) {
			onVersion(o.Pods[name(1)], next)
		}),
		want: upgradeSummary{Reimaged: map[string]string{}, Upgrading: "True", Reason: ReasonUpgradeHalted},
	}, {
		name:   "halted on a member that cannot run the new image",
		reason: "the rollout stops and names the member and the kubelet's reason",
		in: with(upgradeCluster(next, old, next, old), func(o *Observed) {
			broken := onVersion(memberPod(name(1), corev1.PodPending, false), next)
			broken.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "not found"},
			}}}
			o.Pods[name(1)] = broken
			o.Membership.Members[1] = down(o.Membership.Members[1])
		}),
		want: upgradeSummary{Reimaged: map[string]string{}, Upgrading: "True", Reason: ReasonUpgradeHalted},
	}, {
		name:   "setting the previous version back rescues the broken member",
		reason: "a member down on an image other than the target is changed at once",
		in: with(upgradeCluster(old, old, next, old), func(o *Observed) {
			o.Pods[name(1)] = onVersion(memberPod(name(1), corev1.PodPending, false), next)
			o.Membership.Members[1] = down(o.Membership.Members[1])
		}),
		want: upgradeSummary{Reimaged: map[string]string{name(1): "quay.io/coreos/etcd:v" + old},
			Upgrading: "True", Reason: ReasonRollingUpgrade},
	}, {
		name:   "skipping a minor version is refused",
		reason: "3.4 to 3.6: nothing changes and the rule is named",
		in:     upgradeCluster(next, "3.4.23", "3.4.23", "3.4.23"),
		want:   upgradeSummary{Reimaged: map[string]string{}, Upgrading: "False", Reason: ReasonVersionSkew},
	}, {
		name:   "a minor downgrade is refused",
		reason: "3.6 to 3.5 is not a rolling change etcd supports",
		in:     upgradeCluster(old, next, next, next),
		want:   upgradeSummary{Reimaged: map[string]string{}, Upgrading: "False", Reason: ReasonVersionSkew},
	}, {
		name:   "a patch downgrade is allowed",
		reason: "patch versions change freely",
		in:     upgradeCluster("3.6.15", next, next, next),
		want: upgradeSummary{Reimaged: map[string]string{name(1): "quay.io/coreos/etcd:v3.6.15"},
			Upgrading: "True", Reason: ReasonRollingUpgrade},
	}, {
		name:   "up to date",
		reason: "",
		in:     upgradeCluster(next, next, next, next),
		want:   upgradeSummary{Reimaged: map[string]string{}, Upgrading: "False", Reason: ReasonUpToDate},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarizeUpgrade(tt.in, Plan(tt.in))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s\nPlan() mismatch (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}

func TestRefusedVersionKeepsEveryChild(t *testing.T) {
	o := upgradeCluster("3.6.16", "3.4.23", "3.4.23", "3.4.23")
	d := Plan(o)
	for name, pod := range o.Pods {
		if !keptAsApplied(d.Children, name, pod) {
			t.Errorf("Pod %s is not kept as last applied", name)
		}
	}
	msg := conditionOf(d.Status, v1beta2.ConditionDegraded).Message
	if want := "skips a minor version"; !strings.Contains(msg, want) {
		t.Errorf("Degraded message %q does not name the rule %q", msg, want)
	}
	if d.Status.CurrentVersion != "3.4.23" || d.Status.TargetVersion != "3.6.16" {
		t.Errorf("versions: current %q target %q", d.Status.CurrentVersion, d.Status.TargetVersion)
	}
}
