package etcdcluster

import (
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

var etcdImage = regexp.MustCompile(`quay\.io/coreos/etcd:v[0-9.]+`)

// onVersion is a Pod whose container was created on version, and runs it:
// its spec, and the configuration the hook last applied, name the image.
func onVersion(p *corev1.Pod, version string) *corev1.Pod {
	p.Spec.Containers[0].Image = "quay.io/coreos/etcd:v" + version
	p.Annotations[plan.LastAppliedAnnotation] = etcdImage.ReplaceAllString(p.Annotations[plan.LastAppliedAnnotation], p.Spec.Containers[0].Image)
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Image = p.Spec.Containers[0].Image
	}
	return p
}

func memberOn(id uint64, n, version string) membership.Member {
	m := member(id, n)
	m.Version = version
	return m
}

// upgradeCluster is one ready member per version, member 1 (m0) the
// leader, with the versions on their Pods and reported by etcd.
func upgradeCluster(target string, versions ...string) *Observed {
	c := newCluster(len(versions), target)
	c.Status.Phase = v1beta2.PhaseRunning
	o := observed(c)
	o.Membership = memberList(1)
	for i, v := range versions {
		o.Pods[name(i)] = onVersion(readyPod(name(i)), v)
		o.Membership.Members = append(o.Membership.Members, memberOn(uint64(i+1), name(i), v))
	}
	return o
}

// restarting is a Pod whose etcd container the kubelet stopped for a new
// image (SIGTERM, exit 143) and starts again.
func restarting(p *corev1.Pod) *corev1.Pod {
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "etcd", RestartCount: 1,
		State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error"}},
	}}
	return p
}

// unreadable is a single-member cluster whose only Pod cannot pull its
// image (on version), so that no etcd answers and there is no membership.
func unreadable(target, version string) *Observed {
	c := newCluster(1, target)
	c.Status.Phase = v1beta2.PhaseRunning
	pod := onVersion(memberPod(name(0), corev1.PodRunning, false), version)
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", RestartCount: 1, State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "not found"},
	}}}
	return observed(c, pod)
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
		// wantMessage is part of the Upgrading condition's message.
		wantMessage string
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
		reason: "its Pod has the new image but etcd still reports the old binary: the container has not restarted yet, which is progress, not a halt",
		in: with(upgradeCluster(next, old, old, old), func(o *Observed) {
			onVersion(o.Pods[name(1)], next)
		}),
		want:        upgradeSummary{Reimaged: map[string]string{}, Upgrading: "True", Reason: ReasonRollingUpgrade},
		wantMessage: "upgrading member demo-m1, which still runs 3.5.35",
	}, {
		name: "a Pod status from before the restart is no evidence",
		reason: "the new etcd already answers on the new version, but the Pod's readiness still speaks for the old container: " +
			"the next member must wait until the kubelet reports the new one ready, or two would be down at once",
		in: with(upgradeCluster(next, old, next, old), func(o *Observed) {
			o.Pods[name(1)].Status.ContainerStatuses[0].Image = "quay.io/coreos/etcd:v" + old
		}),
		want:        upgradeSummary{Reimaged: map[string]string{}, Upgrading: "True", Reason: ReasonRollingUpgrade},
		wantMessage: "upgrading member demo-m1, which is restarting on " + next,
	}, {
		name: "a member restarting on the new image is in progress",
		reason: "the kubelet stopped the old container (exit 143) and starts the new one: every member goes through this, " +
			"and the condition names it instead of calling the rollout halted",
		in: with(upgradeCluster(next, old, old, old), func(o *Observed) {
			o.Pods[name(1)] = restarting(onVersion(memberPod(name(1), corev1.PodRunning, false), next))
			o.Membership.Members[1] = down(o.Membership.Members[1])
		}),
		want:        upgradeSummary{Reimaged: map[string]string{}, Upgrading: "True", Reason: ReasonRollingUpgrade},
		wantMessage: "upgrading member demo-m1, which is restarting on 3.6.16",
	}, {
		name:   "the last member's restart keeps the rollout open",
		reason: "every Pod has the new image, but the former leader does not run it yet: the rollout is not done",
		in: with(upgradeCluster(next, next, next, next), func(o *Observed) {
			o.Cluster.Status.TargetVersion = next
			o.Cluster.Status.Conditions = []v1beta2.ClusterCondition{{Type: v1beta2.ConditionUpgrading, Status: "True", Reason: ReasonRollingUpgrade}}
			o.Membership.LeaderID = 2
			o.Pods[name(0)] = restarting(onVersion(memberPod(name(0), corev1.PodRunning, false), next))
			o.Membership.Members[0] = down(o.Membership.Members[0])
		}),
		want:        upgradeSummary{Reimaged: map[string]string{}, Upgrading: "True", Reason: ReasonRollingUpgrade},
		wantMessage: "upgrading member demo-m0, which is restarting on 3.6.16",
	}, {
		name:   "the last member failing halts the rollout",
		reason: "a crash loop on the new version is reported even when no member is left to upgrade",
		in: with(upgradeCluster(next, next, next, next), func(o *Observed) {
			o.Cluster.Status.TargetVersion = next
			o.Cluster.Status.Conditions = []v1beta2.ClusterCondition{{Type: v1beta2.ConditionUpgrading, Status: "True", Reason: ReasonRollingUpgrade}}
			o.Membership.LeaderID = 2
			broken := onVersion(memberPod(name(0), corev1.PodRunning, false), next)
			broken.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", RestartCount: 3, State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container"},
			}}}
			o.Pods[name(0)] = broken
			o.Membership.Members[0] = down(o.Membership.Members[0])
		}),
		want:        upgradeSummary{Reimaged: map[string]string{}, Upgrading: "True", Reason: ReasonUpgradeHalted},
		wantMessage: "member demo-m0 on quay.io/coreos/etcd:v3.6.16 is not healthy: CrashLoopBackOff",
	}, {
		name:   "a member restarting in a cluster at rest is no upgrade",
		reason: "a kill -9 restarts a member on the image it had; no rollout was under way",
		in: with(upgradeCluster(next, next, next, next), func(o *Observed) {
			o.Pods[name(1)] = restarting(onVersion(memberPod(name(1), corev1.PodRunning, false), next))
			o.Membership.Members[1] = down(o.Membership.Members[1])
		}),
		want: upgradeSummary{Reimaged: map[string]string{}, Upgrading: "False", Reason: ReasonUpToDate},
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
		want:        upgradeSummary{Reimaged: map[string]string{}, Upgrading: "True", Reason: ReasonUpgradeHalted},
		wantMessage: "member demo-m1 on quay.io/coreos/etcd:v3.6.16 is not healthy: ImagePullBackOff: not found",
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
		name:   "a single member is upgraded in place",
		reason: "it has nobody to hand leadership to; waiting for one would never end",
		in:     upgradeCluster(next, old),
		want: upgradeSummary{Reimaged: map[string]string{name(0): "quay.io/coreos/etcd:v" + next},
			Upgrading: "True", Reason: ReasonRollingUpgrade},
		wantMessage: "upgrading member demo-m0",
	}, {
		name: "a single member broken by an upgrade is rescued without a membership",
		reason: "its Pod cannot pull the new image, so no etcd answers; setting the previous version back " +
			"must change its image all the same",
		in: with(unreadable(old, next), func(o *Observed) {
			o.Cluster.Status.CurrentVersion = old
		}),
		want: upgradeSummary{Reimaged: map[string]string{name(0): "quay.io/coreos/etcd:v" + old},
			Upgrading: "True", Reason: ReasonRollingUpgrade},
	}, {
		name:   "a single member broken by an upgrade is reported halted",
		reason: "the rollout was under way and the only member cannot run the new image",
		in: with(unreadable(next, next), func(o *Observed) {
			o.Cluster.Status.CurrentVersion = old
			o.Cluster.Status.TargetVersion = next
			o.Cluster.Status.Conditions = []v1beta2.ClusterCondition{{Type: v1beta2.ConditionUpgrading, Status: "True", Reason: ReasonRollingUpgrade}}
		}),
		want:        upgradeSummary{Reimaged: map[string]string{}, Upgrading: "True", Reason: ReasonUpgradeHalted},
		wantMessage: "member demo-m0 on quay.io/coreos/etcd:v3.6.16 is not healthy: ImagePullBackOff",
	}, {
		name: "a single member restarting for its upgrade keeps the rollout open",
		reason: "while its old etcd stops, no etcd answers, its Pod may still read Ready and the kubelet names no failure: " +
			"nothing shows it runs the new version yet",
		in: with(unreadable(next, next), func(o *Observed) {
			o.Pods[name(0)] = restarting(onVersion(readyPod(name(0)), next))
			o.Cluster.Status.TargetVersion = next
			o.Cluster.Status.Conditions = []v1beta2.ClusterCondition{{Type: v1beta2.ConditionUpgrading, Status: "True", Reason: ReasonRollingUpgrade}}
		}),
		want:        upgradeSummary{Reimaged: map[string]string{}, Upgrading: "True", Reason: ReasonRollingUpgrade},
		wantMessage: "upgrading to 3.6.16: etcd does not answer",
	}, {
		name:   "the skew rule holds without a membership",
		reason: "etcd last reported 3.4: a Pod stuck on another image is not moved on to 3.6",
		in: with(unreadable(next, "3.5.99"), func(o *Observed) {
			o.Cluster.Status.CurrentVersion = "3.4.23"
		}),
		want: upgradeSummary{Reimaged: map[string]string{}, Upgrading: "True", Reason: ReasonRollingUpgrade},
	}, {
		name:   "skipping a minor version is refused",
		reason: "3.4 to 3.6: nothing changes and the rule is named",
		in:     upgradeCluster(next, "3.4.23", "3.4.23", "3.4.23"),
		want:   upgradeSummary{Reimaged: map[string]string{}, Upgrading: "False", Reason: ReasonVersionSkew},
	}, {
		name:   "a minor downgrade before 3.6 is refused",
		reason: "3.5 to 3.4 is not a rolling change etcd supports: its downgrade protocol starts with 3.6",
		in:     upgradeCluster("3.4.23", old, old, old),
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
			d := Plan(tt.in)
			got := summarizeUpgrade(tt.in, d)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s\nPlan() mismatch (-want +got):\n%s", tt.reason, diff)
			}
			if msg := conditionOf(d.Status, v1beta2.ConditionUpgrading).Message; !strings.Contains(msg, tt.wantMessage) {
				t.Errorf("%s\nUpgrading message %q does not contain %q", tt.reason, msg, tt.wantMessage)
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

// TestUpgradeStatusIgnoresRaftIndex: while an upgraded member catches up,
// its raft index moves on every sync. A status that named it would change
// on every sync, and Metacontroller syncs again on every change of status.
func TestUpgradeStatusIgnoresRaftIndex(t *testing.T) {
	at := func(index uint64) v1beta2.ClusterStatus {
		o := upgradeCluster("3.6.16", "3.5.35", "3.6.16", "3.5.35")
		o.Membership.Members[1].RaftIndex = index
		return Plan(o).Status
	}
	first := at(10)
	if up := conditionOf(first, v1beta2.ConditionUpgrading); up.Reason != ReasonRollingUpgrade {
		t.Fatalf("Upgrading = %+v, want %s while demo-m1 catches up", up, ReasonRollingUpgrade)
	}
	if diff := cmp.Diff(first, at(50)); diff != "" {
		t.Errorf("status changed with the catching-up member's raft index (-at 10 +at 50):\n%s", diff)
	}
}

func TestSameImage(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"quay.io/coreos/etcd:v3.6.16", "quay.io/coreos/etcd:v3.6.16", true},
		{"etcd:v3.6.16", "docker.io/library/etcd:v3.6.16", true},
		{"bitnami/etcd:3.6.16", "docker.io/bitnami/etcd:3.6.16", true},
		{"localhost:5000/etcd:v3.6.16", "localhost:5000/etcd:v3.6.16", true},
		{"quay.io/coreos/etcd:v3.5.35", "quay.io/coreos/etcd:v3.6.16", false},
		{"registry.local/etcd:v3.6.16", "docker.io/etcd:v3.6.16", false},
	}
	for _, tt := range tests {
		if got := sameImage(tt.a, tt.b); got != tt.want {
			t.Errorf("sameImage(%q, %q) = %v, want %v: a runtime reports references normalized", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestCurrentVersionCountsSilentMembers: status.currentVersion is the
// lowest version a member runs. A member that does not answer a sync's
// status read counts with the lowest version seen before, so one missed
// read of the last member still on the old release does not report the
// upgrade done (CI caught the soak waiting on exactly that).
func TestCurrentVersionCountsSilentMembers(t *testing.T) {
	for _, tc := range []struct {
		reason   string
		lastSeen string
		silent   int // the member whose status read failed, or -1
		want     string
	}{
		{"every member answers: the lowest reported", "3.6.16", -1, "3.6.16"},
		{"the member on the old release is silent: the version last seen holds", "3.6.16", 0, "3.6.16"},
		{"a member on the new release is silent: nothing changes", "3.6.16", 1, "3.6.16"},
		{"nothing seen before (a new cluster): only the answers count", "", 0, "3.7.3"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			o := upgradeCluster("3.7.3", "3.6.16", "3.7.3", "3.7.3")
			o.Cluster.Status.CurrentVersion = tc.lastSeen
			if tc.silent >= 0 {
				o.Membership.Members[tc.silent].Reachable = false
				o.Membership.Members[tc.silent].Version = ""
			}
			if got := Plan(o).Status.CurrentVersion; got != tc.want {
				t.Errorf("status.currentVersion %q, want %q", got, tc.want)
			}
		})
	}
}
