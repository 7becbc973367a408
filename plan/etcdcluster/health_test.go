package etcdcluster

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/gitopstest"
)

// health is what the GitOps tools make of a status, and the three
// conditions they read.
type health struct {
	Tools       gitopstest.Verdict
	Ready       string // "True/Converged"
	Reconciling string
	Stalled     string
}

// What kstatus, Flux's healthCheckExprs and Argo CD's check say together.
var (
	healthy     = gitopstest.Verdict{KStatus: "Current", Flux: "Current", ArgoCD: "Healthy"}
	progressing = gitopstest.Verdict{KStatus: "InProgress", Flux: "InProgress", ArgoCD: "Progressing"}
	degraded    = gitopstest.Verdict{KStatus: "Failed", Flux: "Failed", ArgoCD: "Degraded"}
	// A paused cluster that serves; one that does not is InProgress to
	// kstatus and Flux.
	suspended           = gitopstest.Verdict{KStatus: "Current", Flux: "Current", ArgoCD: "Suspended"}
	suspendedNotServing = gitopstest.Verdict{KStatus: "InProgress", Flux: "InProgress", ArgoCD: "Suspended"}
)

func healthOf(t *testing.T, c *v1beta2.EtcdCluster, st v1beta2.ClusterStatus) health {
	t.Helper()
	obj := *c
	obj.Status = st
	v, err := gitopstest.Judge(obj)
	if err != nil {
		t.Fatal(err)
	}
	h := health{Tools: v}
	for _, f := range []struct {
		t   v1beta2.ConditionType
		out *string
	}{{v1beta2.ConditionReady, &h.Ready}, {v1beta2.ConditionReconciling, &h.Reconciling}, {v1beta2.ConditionStalled, &h.Stalled}} {
		c := conditionOf(st, f.t)
		*f.out = string(c.Status) + "/" + c.Reason
	}
	return h
}

// quorumLostFor is a running cluster of three of which only m0 answers,
// whose previous status already said QuorumLost, since ago.
func quorumLostFor(ago time.Duration) *Observed {
	o := upgradeCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16")
	for i := 1; i < 3; i++ {
		o.Pods[name(i)].Status.Conditions[0].Status = corev1.ConditionFalse
		o.Membership.Members[i] = down(o.Membership.Members[i])
	}
	o.Membership.Stale, o.Membership.LeaderID = true, 0
	o.Cluster.Status = v1beta2.ClusterStatus{Phase: v1beta2.PhaseFailed, Size: 3, TargetVersion: "3.6.16", Conditions: []v1beta2.ClusterCondition{{
		Type: v1beta2.ConditionAvailable, Status: metav1.ConditionFalse, Reason: ReasonQuorumLost,
		LastTransitionTime: metav1.NewTime(testNow.Add(-ago)),
	}}}
	return o
}

func TestHealthConditions(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   health
	}{{
		name:   "converged",
		reason: "three ready voters on the target, a leader: the cluster matches its spec",
		in:     upgradeCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16"),
		want:   health{healthy, "True/Converged", "False/Converged", "False/AsExpected"},
	}, {
		name:   "converged with fields not honoured",
		reason: "a field kept for the CoreOS manifests' sake is reported in Degraded, and is no reason to hold a GitOps rollout",
		in: with(upgradeCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16"), func(o *Observed) {
			o.Cluster.Spec.Pod = &v1beta2.PodPolicy{BusyboxImage: "busybox:1.36"}
		}),
		want: health{healthy, "True/Converged", "False/Converged", "False/AsExpected"},
	}, {
		name:   "bootstrapping",
		reason: "a new cluster starts its seed",
		in:     observed(newCluster(3, "3.6.16")),
		want:   health{progressing, "False/Bootstrapping", "True/Bootstrapping", "False/AsExpected"},
	}, {
		name:   "scaling",
		reason: "size 5 with three members: a learner is being added",
		in: with(upgradeCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16"), func(o *Observed) {
			o.Cluster.Spec.Size = 5
		}),
		want: health{progressing, "False/ScalingUp", "True/ScalingUp", "False/AsExpected"},
	}, {
		name:   "upgrading",
		reason: "two members still on 3.5: one is being upgraded",
		in:     upgradeCluster("3.6.16", "3.6.16", "3.5.35", "3.5.35"),
		want:   health{progressing, "False/RollingUpgrade", "True/RollingUpgrade", "False/AsExpected"},
	}, {
		name:   "rolling out a Pod spec change",
		reason: "the members' Pods were rendered from an earlier spec: one is replaced",
		in:     rolloutCluster(true, false, false, false),
		want:   health{progressing, "False/RollingChange", "True/RollingChange", "False/AsExpected"},
	}, {
		name:   "invalid spec",
		reason: "the hook leaves the cluster as it is until a person fixes the spec",
		in: with(upgradeCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16"), func(o *Observed) {
			o.SpecErrors = field.ErrorList{field.Invalid(field.NewPath("spec", "size"), 0, "must be at least 1")}
		}),
		want: health{degraded, "False/InvalidSpec", "False/InvalidSpec", "True/InvalidSpec"},
	}, {
		name:   "version skew refused",
		reason: "3.4 to 3.6 skips a minor version: refused until the spec is set back",
		in:     upgradeCluster("3.6.16", "3.4.23", "3.4.23", "3.4.23"),
		want:   health{degraded, "False/VersionSkewRefused", "False/VersionSkewRefused", "True/VersionSkewRefused"},
	}, {
		name:   "quorum lost, first reported",
		reason: "a loss seen by one sync may be an election or a restart: Ready is False, nothing is Stalled yet",
		in: with(quorumLostFor(0), func(o *Observed) {
			o.Cluster.Status.Conditions[0] = v1beta2.ClusterCondition{Type: v1beta2.ConditionAvailable, Status: metav1.ConditionTrue, Reason: ReasonQuorumHealthy,
				LastTransitionTime: metav1.NewTime(testNow.Add(-time.Hour))}
		}),
		want: health{progressing, "False/QuorumLost", "False/QuorumLost", "False/AsExpected"},
	}, {
		name:   "quorum lost, not confirmed yet",
		reason: "reported before, but for less than QuorumLossConfirmAfter",
		in:     quorumLostFor(QuorumLossConfirmAfter - time.Second),
		want:   health{progressing, "False/QuorumLost", "False/QuorumLost", "False/AsExpected"},
	}, {
		name:   "quorum lost, confirmed",
		reason: "reported for QuorumLossConfirmAfter with no member starting and no step of the hook under way: a person must look",
		in:     quorumLostFor(QuorumLossConfirmAfter),
		want:   health{degraded, "False/QuorumLost", "False/QuorumLost", "True/QuorumLost"},
	}, {
		name:   "quorum lost while a member starts",
		reason: "a member's Pod is being brought up by the kubelet: the loss may pass by itself",
		in: with(quorumLostFor(time.Minute), func(o *Observed) {
			p := o.Pods[name(2)]
			p.Status.Phase = corev1.PodPending
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
		}),
		want: health{progressing, "False/QuorumLost", "False/QuorumLost", "False/AsExpected"},
	}, {
		name:   "quorum lost while a single member upgrades",
		reason: "a cluster of one has no quorum while its member restarts on the new image: the hook's own step, not a stall",
		in: with(observed(newCluster(1, "3.6.16"), restarting(onVersion(memberPod(name(0), corev1.PodRunning, false), "3.6.16"))), func(o *Observed) {
			o.Cluster.Status = v1beta2.ClusterStatus{Phase: v1beta2.PhaseRunning, Size: 1, TargetVersion: "3.6.16", Conditions: []v1beta2.ClusterCondition{
				{Type: v1beta2.ConditionAvailable, Status: metav1.ConditionFalse, Reason: ReasonQuorumLost, LastTransitionTime: metav1.NewTime(testNow.Add(-time.Minute))},
				{Type: v1beta2.ConditionUpgrading, Status: metav1.ConditionTrue, Reason: ReasonRollingUpgrade},
			}}
		}),
		want: health{progressing, "False/RollingUpgrade", "True/RollingUpgrade", "False/AsExpected"},
	}, {
		name:   "upgrade halted",
		reason: "the member upgraded first cannot pull its image: the upgrade goes no further until the version is set back",
		in: with(upgradeCluster("3.6.16", "3.6.16", "3.5.35", "3.5.35"), func(o *Observed) {
			p := o.Pods[name(1)]
			onVersion(p, "3.6.16")
			p.Status.Conditions[0].Status = corev1.ConditionFalse
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}
			o.Membership.Members[1] = down(o.Membership.Members[1])
			o.Cluster.Status.TargetVersion = "3.6.16"
			o.Cluster.Status.Conditions = []v1beta2.ClusterCondition{{Type: v1beta2.ConditionUpgrading, Status: metav1.ConditionTrue, Reason: ReasonRollingUpgrade}}
		}),
		want: health{degraded, "False/UpgradeHalted", "False/UpgradeHalted", "True/UpgradeHalted"},
	}, {
		name:   "rollout halted",
		reason: "the member rolled first cannot be scheduled on the new spec",
		in: with(rolloutCluster(true, false, true, false), func(o *Observed) {
			unschedulablePod(o.Pods[name(1)])
			o.Membership.Members[1] = down(o.Membership.Members[1])
		}),
		want: health{degraded, "False/RolloutHalted", "False/RolloutHalted", "True/RolloutHalted"},
	}, {
		name:   "all members lost",
		reason: "nothing is left to recover from and no automatic restore is configured",
		in:     with(observed(newCluster(3, "3.6.16")), func(o *Observed) { withRecord(record(firstSeed, true))(o); servicesLeft(o) }),
		want:   health{degraded, "False/AllMembersLost", "False/AllMembersLost", "True/AllMembersLost"},
	}, {
		name:   "restore verifying",
		reason: "an EtcdRestore's seed checks the backup beside the running members",
		in:     with(observed(newCluster(3, "3.6.16")), func(o *Observed) { runningThree(o); etcdRestore()(o) }),
		want:   health{progressing, "False/Restoring", "True/Restoring", "False/AsExpected"},
	}, {
		name:   "restore refused",
		reason: "an invalid EtcdRestore is not carried out: a person must fix or delete it",
		in: with(observed(newCluster(3, "3.6.16")), func(o *Observed) {
			runningThree(o)
			etcdRestore(func(r *v1beta2.EtcdRestore) { r.Spec.S3 = nil })(o)
		}),
		want: health{degraded, "False/RestoreRefused", "False/RestoreRefused", "True/RestoreRefused"},
	}, {
		name:   "paused",
		reason: "a pause is a person's decision: nothing reconciles, nothing is stalled, and a serving cluster reads Current",
		in: with(upgradeCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16"), func(o *Observed) {
			o.Cluster.Spec.Paused = true
			o.Cluster.Spec.Size = 5
		}),
		want: health{suspended, "True/Paused", "False/Paused", "False/Paused"},
	}, {
		name:   "paused without quorum",
		reason: "paused, and not serving: not Ready, yet neither reconciling nor stalled",
		in: with(quorumLostFor(time.Hour), func(o *Observed) {
			o.Cluster.Spec.Paused = true
		}),
		want: health{suspendedNotServing, "False/Paused", "False/Paused", "False/Paused"},
	}, {
		name:   "CORRUPT alarm",
		reason: "the members' data differ: etcd refuses writes and only a person can tell which copy is right",
		in: with(upgradeCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16"), func(o *Observed) {
			o.Membership.Members[1].Errors = []string{"memberID:2 alarm:CORRUPT "}
		}),
		want: health{degraded, "False/Corrupt", "False/Corrupt", "True/Corrupt"},
	}, {
		name:   "NOSPACE alarm without housekeeping",
		reason: "etcd refuses writes until keys go and the alarm is disarmed, and nothing in the spec lets the hook do it",
		in: with(upgradeCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16"), func(o *Observed) {
			o.Membership.Members[1].Errors = []string{nospaceOf(2)}
		}),
		want: health{degraded, "False/NoSpace", "False/NoSpace", "True/NoSpace"},
	}, {
		name:   "a member down",
		reason: "a quorum serves, the hook waits for the member: neither converged nor stalled",
		in: with(upgradeCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16"), func(o *Observed) {
			o.Pods[name(2)].Status.Conditions[0].Status = corev1.ConditionFalse
			o.Membership.Members[2] = down(o.Membership.Members[2])
		}),
		want: health{progressing, "False/WaitingForMember", "True/WaitingForMember", "False/AsExpected"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Plan(tt.in)
			if diff := cmp.Diff(tt.want, healthOf(t, tt.in.Cluster, d.Status)); diff != "" {
				t.Errorf("%s (-want +got):\n%s\nstatus: %s", tt.reason, diff, describeConditions(d.Status))
			}
		})
	}
}

// TestHealthWithTLSSecrets: a Secret that is not there yet is waited for
// (cert-manager issues it after the cluster is applied); one that is there
// and unusable needs a person.
func TestHealthWithTLSSecrets(t *testing.T) {
	good := issued(t)
	missing := map[string]*corev1.Secret{peerSecret: good[peerSecret], operatorSecret: good[operatorSecret]}
	broken := map[string]*corev1.Secret{peerSecret: good[peerSecret], operatorSecret: good[operatorSecret], serverSecret: good[serverSecret].DeepCopy()}
	broken[serverSecret].ResourceVersion = "2"
	delete(broken[serverSecret].Data, "server.key")

	for _, tt := range []struct {
		name    string
		secrets map[string]*corev1.Secret
		want    health
	}{
		{"all there", good, health{progressing, "False/Bootstrapping", "True/Bootstrapping", "False/AsExpected"}},
		{"one missing", missing, health{progressing, "False/TLSSecretInvalid", "False/TLSSecretInvalid", "False/AsExpected"}},
		{"one without its key", broken, health{degraded, "False/TLSSecretInvalid", "False/TLSSecretInvalid", "True/TLSSecretInvalid"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := withSecrets(observed(tlsCluster(3)), tt.secrets)
			d := Plan(o)
			if diff := cmp.Diff(tt.want, healthOf(t, o.Cluster, d.Status)); diff != "" {
				t.Errorf("(-want +got):\n%s\nstatus: %s", diff, describeConditions(d.Status))
			}
		})
	}
}

// TestHealthIsSteady: a status fed back unchanged gives the same status,
// so the new conditions cause no sync loop; lastTransitionTime moves only
// when a condition's status does.
func TestHealthIsSteady(t *testing.T) {
	o := upgradeCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16")
	first := Plan(o).Status
	o.Cluster.Status = first
	o.Now = testNow.Add(time.Hour)
	second := Plan(o).Status
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("the status of a steady cluster changed an hour later (-first +second):\n%s", diff)
	}

	o.Cluster.Spec.Size = 5
	scaling := Plan(o).Status
	if got := conditionOf(scaling, v1beta2.ConditionReady); got.LastTransitionTime.Time != o.Now {
		t.Errorf("Ready went False at %s, want %s", got.LastTransitionTime, o.Now)
	}
	if got := conditionOf(scaling, v1beta2.ConditionStalled); got.LastTransitionTime != conditionOf(first, v1beta2.ConditionStalled).LastTransitionTime {
		t.Errorf("Stalled stayed False and its lastTransitionTime moved: %s", got.LastTransitionTime)
	}
}

// FuzzHealth checks, on arbitrary clusters, what kstatus relies on: the
// three conditions are there once each, Reconciling and Stalled are never
// both True, Ready is never True beside either, and kstatus judges the
// object without error.
func FuzzHealth(f *testing.F) {
	f.Add([]byte{4, 0, 6, 3, 0x10, 0x10, 0x10})
	f.Add([]byte{6, 1, 6, 3, 0x10, 0x10, 0x14, 1})
	f.Add([]byte{0, 0, 6, 3, 0x10, 0x10, 0x10})
	f.Add([]byte{4, 2, 14, 3, 0x10, 0x14, 0x14})
	f.Add([]byte{4, 0, 0, 0, 3})
	f.Add([]byte{4, 2, 6, 3, 0x10, 0x10, 0x10, 0, 3, 5})
	f.Add([]byte{4, 2, 6, 3, 0x10, 0x10, 0x10, 0, 0, 0, 3, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		o := scenario(data)
		st := Plan(o).Status
		if o.Finalizing {
			return
		}
		seen := map[v1beta2.ConditionType]metav1.ConditionStatus{}
		for _, c := range st.Conditions {
			if _, dup := seen[c.Type]; dup {
				t.Fatalf("condition %s twice: %s", c.Type, describeConditions(st))
			}
			seen[c.Type] = c.Status
		}
		for _, typ := range []v1beta2.ConditionType{v1beta2.ConditionReady, v1beta2.ConditionReconciling, v1beta2.ConditionStalled} {
			if _, ok := seen[typ]; !ok {
				t.Fatalf("no %s condition: %s", typ, describeConditions(st))
			}
		}
		reconciling, stalled := seen[v1beta2.ConditionReconciling] == metav1.ConditionTrue, seen[v1beta2.ConditionStalled] == metav1.ConditionTrue
		if reconciling && stalled {
			t.Fatalf("Reconciling and Stalled both True: %s", describeConditions(st))
		}
		if seen[v1beta2.ConditionReady] == metav1.ConditionTrue && (reconciling || stalled) {
			t.Fatalf("Ready beside Reconciling or Stalled: %s", describeConditions(st))
		}
		obj := *o.Cluster
		obj.Status = st
		if _, err := gitopstest.Judge(obj); err != nil {
			t.Fatal(err)
		}
	})
}

func describeConditions(st v1beta2.ClusterStatus) string {
	var parts []string
	for _, c := range st.Conditions {
		parts = append(parts, string(c.Type)+"="+string(c.Status)+"/"+c.Reason)
	}
	return "phase " + string(st.Phase) + ": " + strings.Join(parts, " ")
}
