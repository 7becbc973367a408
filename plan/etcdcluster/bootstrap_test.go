package etcdcluster

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// bootstrapOutcome is what a bootstrap case is about: the Pods the answer
// starts as a new cluster, the record it writes, and how status reads.
type bootstrapOutcome struct {
	NewClusterPods []string // Pods not observed yet, with --initial-cluster-state=new
	Pods           []string
	Record         *v1beta2.BootstrapStatus
	ServiceCopy    *v1beta2.BootstrapStatus
	Phase          v1beta2.ClusterPhase
	Available      string // status/reason
	Degraded       string // reason, when True
}

func outcomeOf(o *Observed, d Decision) bootstrapOutcome {
	out := bootstrapOutcome{
		NewClusterPods: startsNewCluster(o, d),
		Pods:           podsIn(d.Children),
		Record:         d.Status.Bootstrap,
		Phase:          d.Status.Phase,
	}
	avail := conditionOf(d.Status, v1beta2.ConditionAvailable)
	out.Available = string(avail.Status) + "/" + avail.Reason
	if deg := conditionOf(d.Status, v1beta2.ConditionDegraded); deg.Status == metav1.ConditionTrue {
		out.Degraded = deg.Reason
	}
	for _, c := range d.Children {
		if s, ok := c.Object.(*corev1.Service); ok && c.Name == testCluster {
			out.ServiceCopy, _ = serviceRecord(s)
		}
	}
	return out
}

var (
	firstSeed    = SeedName(testCluster, testUID)
	recreateSeed = SeedName(testCluster, testUID+"/recreate-empty/"+firstSeed)
)

func record(seed string, bootstrapped bool) *v1beta2.BootstrapStatus {
	return &v1beta2.BootstrapStatus{SeedMember: seed, Bootstrapped: bootstrapped}
}

// withRecord sets the status's record.
func withRecord(rec *v1beta2.BootstrapStatus) func(*Observed) {
	return func(o *Observed) { o.Cluster.Status.Bootstrap = rec }
}

// stampedService is the peer Service as the hook rendered it with rec.
func stampedService(o *Observed, rec *v1beta2.BootstrapStatus) {
	o.Services[testCluster] = peerService(o.Cluster, rec, "")
}

// servicesLeft: the Services stay when every member is lost, and the
// request shows them with the record's copy.
func servicesLeft(o *Observed) {
	stampedService(o, o.Cluster.Status.Bootstrap)
	o.Services[plan.ClientServiceName(testCluster)] = clientService(o.Cluster, true)
}

func annotated(value string) func(*Observed) {
	return func(o *Observed) {
		o.Cluster.Annotations = map[string]string{v1beta2.AnnotationRecreateEmpty: value}
	}
}

func seedPod(seed string, phase corev1.PodPhase) *corev1.Pod {
	p := memberPod(seed, phase, phase == corev1.PodRunning)
	p.Annotations[AnnotationSeedMember] = seed
	return p
}

func persistent(o *Observed) {
	o.Cluster.Spec.Pod = &v1beta2.PodPolicy{PersistentVolumeClaimSpec: &corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}}
}

func claimOf(name string, deleting bool) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS}}
	if deleting {
		c.DeletionTimestamp = &metav1.Time{Time: testNow}
	}
	return c
}

func apply(o *Observed, edits ...func(*Observed)) *Observed {
	for _, e := range edits {
		e(o)
	}
	return o
}

func TestBootstrapRecord(t *testing.T) {
	lost := bootstrapOutcome{
		Record: record(firstSeed, true), ServiceCopy: record(firstSeed, true),
		Phase: v1beta2.PhaseFailed, Available: "False/" + ReasonAllMembersLost, Degraded: ReasonAllMembersLost,
	}
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   bootstrapOutcome
	}{{
		name:   "first sync",
		reason: "a cluster never started gets its seed, and the record names the seed, not yet bootstrapped, in status and on the peer Service",
		in:     observed(newCluster(3, "3.6.16")),
		want: bootstrapOutcome{
			NewClusterPods: []string{firstSeed}, Pods: []string{firstSeed},
			Record: record(firstSeed, false), ServiceCopy: record(firstSeed, false),
			Phase: v1beta2.PhaseCreating, Available: "False/" + ReasonBootstrapping,
		},
	}, {
		name:   "seed never observed, status write lost",
		reason: "the Service's copy says the seed was only asked for, so the same seed is rendered again: nothing of it can have run",
		in: apply(observed(newCluster(3, "3.6.16")), func(o *Observed) {
			stampedService(o, record(firstSeed, false))
			o.Services[plan.ClientServiceName(testCluster)] = clientService(o.Cluster, true)
		}),
		want: bootstrapOutcome{
			NewClusterPods: []string{firstSeed}, Pods: []string{firstSeed},
			Record: record(firstSeed, false), ServiceCopy: record(firstSeed, false),
			Phase: v1beta2.PhaseCreating, Available: "False/" + ReasonBootstrapping,
		},
	}, {
		name:   "only the client Service observed",
		reason: "the client Service never carries the record: alone it says nothing of the past, and the seed is rendered",
		in: apply(observed(newCluster(3, "3.6.16")), func(o *Observed) {
			o.Services[plan.ClientServiceName(testCluster)] = clientService(o.Cluster, true)
		}),
		want: bootstrapOutcome{
			NewClusterPods: []string{firstSeed}, Pods: []string{firstSeed},
			Record: record(firstSeed, false), ServiceCopy: record(firstSeed, false),
			Phase: v1beta2.PhaseCreating, Available: "False/" + ReasonBootstrapping,
		},
	}, {
		name:   "seed pending",
		reason: "a seed Pod that has not started yet is not evidence of data",
		in:     apply(observed(newCluster(3, "3.6.16"), seedPod(firstSeed, corev1.PodPending)), withRecord(record(firstSeed, false))),
		want: bootstrapOutcome{
			Pods: []string{firstSeed}, Record: record(firstSeed, false), ServiceCopy: record(firstSeed, false),
			Phase: v1beta2.PhaseCreating, Available: "False/" + ReasonBootstrapping,
		},
	}, {
		name:   "seed running",
		reason: "once a member runs the cluster may hold data: the record says bootstrapped",
		in:     apply(observed(newCluster(3, "3.6.16"), seedPod(firstSeed, corev1.PodRunning)), withRecord(record(firstSeed, false))),
		want: bootstrapOutcome{
			Pods: []string{firstSeed}, Record: record(firstSeed, true), ServiceCopy: record(firstSeed, true),
			Phase: v1beta2.PhaseCreating, Available: "False/" + ReasonBootstrapping,
		},
	}, {
		name:   "every member lost",
		reason: "a bootstrapped cluster with no Pod and no claim left is reported lost, and no seed is started",
		in:     apply(observed(newCluster(3, "3.6.16")), withRecord(record(firstSeed, true)), servicesLeft),
		want:   lost,
	}, {
		name:   "no child observed at all",
		reason: "not even the Services, which a loss leaves: an informer cache behind, most likely; nothing is started and nothing declared lost",
		in: apply(observed(newCluster(3, "3.6.16")), withRecord(record(firstSeed, true)), func(o *Observed) {
			o.Cluster.Status.Phase = v1beta2.PhaseRunning
		}),
		want: bootstrapOutcome{
			Record: record(firstSeed, true), ServiceCopy: record(firstSeed, true),
			Phase: v1beta2.PhaseRunning, Available: "Unknown/" + ReasonChildrenNotObserved, Degraded: ReasonChildrenNotObserved,
		},
	}, {
		name:   "every member lost while still growing",
		reason: "the issue's case: the seed ran (phase still Creating) and was deleted; the hook before the record re-bootstrapped here",
		in: apply(observed(newCluster(3, "3.6.16")), func(o *Observed) {
			o.Cluster.Status = v1beta2.ClusterStatus{Phase: v1beta2.PhaseCreating, Size: 1, Members: v1beta2.MembersStatus{Ready: []string{firstSeed}}, CurrentVersion: "3.6.16"}
			o.Services[plan.ClientServiceName(testCluster)] = clientService(o.Cluster, true)
		}),
		want: lost,
	}, {
		name:   "status wiped, Service copy kept",
		reason: "a status wiped by hand does not erase the record: the peer Service's copy still says bootstrapped",
		in:     apply(observed(newCluster(3, "3.6.16")), func(o *Observed) { stampedService(o, record(firstSeed, true)) }),
		want:   lost,
	}, {
		name:   "status wiped, Services from an earlier hook",
		reason: "Services without the copy were rendered by a hook that predates the record, always with a seed: ambiguous, so counted as bootstrapped",
		in: apply(observed(newCluster(3, "3.6.16")), func(o *Observed) {
			o.Services[testCluster] = peerService(o.Cluster, nil, "")
		}),
		want: lost,
	}, {
		name:   "emptyDir Pods evicted",
		reason: "Pods that ended with their emptyDir hold no data any more: the cluster is lost, and the ended Pods are kept for inspection",
		in:     apply(observed(newCluster(3, "3.6.16"), memberPod(name(0), corev1.PodFailed, false), memberPod(name(1), corev1.PodFailed, false)), withRecord(record(firstSeed, true))),
		want: bootstrapOutcome{
			Pods: []string{name(0), name(1)}, Record: record(firstSeed, true), ServiceCopy: record(firstSeed, true),
			Phase: v1beta2.PhaseFailed, Available: "False/" + ReasonAllMembersLost, Degraded: ReasonAllMembersLost,
		},
	}, {
		name:   "claims being deleted",
		reason: "every Pod gone and every claim being deleted: the data goes with the claims",
		in: apply(observed(newCluster(3, "3.6.16")), persistent, withRecord(record(firstSeed, true)), servicesLeft, func(o *Observed) {
			o.PVCs[firstSeed] = claimOf(firstSeed, true)
			o.PVCs[name(1)] = claimOf(name(1), true)
		}),
		want: lost,
	}, {
		name:   "claims kept",
		reason: "every Pod gone with the claims kept: each member comes back on its data, the seed as an existing member",
		in: apply(observed(newCluster(3, "3.6.16")), persistent, withRecord(record(firstSeed, true)), func(o *Observed) {
			o.PVCs[firstSeed] = claimOf(firstSeed, false)
			o.PVCs[name(1)] = claimOf(name(1), false)
		}),
		want: bootstrapOutcome{
			Pods: []string{name(1), firstSeed}, Record: record(firstSeed, true), ServiceCopy: record(firstSeed, true),
			Phase: v1beta2.PhaseCreating, Available: "False/" + ReasonBootstrapping,
		},
	}, {
		name:   "seed claim of a cluster never started",
		reason: "the seed's Pod was deleted before it ever ran: on its own claim it still starts the cluster",
		in: apply(observed(newCluster(3, "3.6.16")), persistent, withRecord(record(firstSeed, false)), func(o *Observed) {
			o.PVCs[firstSeed] = claimOf(firstSeed, false)
		}),
		want: bootstrapOutcome{
			NewClusterPods: []string{firstSeed}, Pods: []string{firstSeed}, Record: record(firstSeed, false), ServiceCopy: record(firstSeed, false),
			Phase: v1beta2.PhaseCreating, Available: "False/" + ReasonBootstrapping,
		},
	}, {
		name:   "recreate-empty naming another cluster",
		reason: "the annotation must name the lost cluster's seed: any other value (a copy left from an earlier loss) is ignored",
		in:     apply(observed(newCluster(3, "3.6.16")), withRecord(record(firstSeed, true)), servicesLeft, annotated("demo-other")),
		want:   lost,
	}, {
		name:   "recreate-empty",
		reason: "the annotation names the lost cluster: a new seed, under a new name and token, starts an empty cluster, and the record says what it replaced",
		in:     apply(observed(newCluster(3, "3.6.16")), withRecord(record(firstSeed, true)), annotated(firstSeed)),
		want: bootstrapOutcome{
			NewClusterPods: []string{recreateSeed}, Pods: []string{recreateSeed},
			Record:      &v1beta2.BootstrapStatus{SeedMember: recreateSeed, RecreatedFrom: firstSeed},
			ServiceCopy: &v1beta2.BootstrapStatus{SeedMember: recreateSeed, RecreatedFrom: firstSeed},
			Phase:       v1beta2.PhaseCreating, Available: "False/" + ReasonBootstrapping,
		},
	}, {
		name:   "recreate-empty left in place",
		reason: "after the re-creation the annotation names the old seed, so it cannot accept the loss of the new cluster",
		in: apply(observed(newCluster(3, "3.6.16")), annotated(firstSeed),
			withRecord(&v1beta2.BootstrapStatus{SeedMember: recreateSeed, Bootstrapped: true, RecreatedFrom: firstSeed}), servicesLeft),
		want: bootstrapOutcome{
			Record:      &v1beta2.BootstrapStatus{SeedMember: recreateSeed, Bootstrapped: true, RecreatedFrom: firstSeed},
			ServiceCopy: &v1beta2.BootstrapStatus{SeedMember: recreateSeed, Bootstrapped: true, RecreatedFrom: firstSeed},
			Phase:       v1beta2.PhaseFailed, Available: "False/" + ReasonAllMembersLost, Degraded: ReasonAllMembersLost,
		},
	}, {
		name:   "re-created seed running, its record lost",
		reason: "neither record of the re-creation was written, but the new seed's Pod names it: the record follows the Pods",
		in: apply(observed(newCluster(3, "3.6.16"), seedPod(recreateSeed, corev1.PodRunning)), withRecord(record(firstSeed, true)), annotated(firstSeed),
			func(o *Observed) { stampedService(o, record(firstSeed, true)) }),
		want: bootstrapOutcome{
			Pods:        []string{recreateSeed},
			Record:      &v1beta2.BootstrapStatus{SeedMember: recreateSeed, Bootstrapped: true, RecreatedFrom: firstSeed},
			ServiceCopy: &v1beta2.BootstrapStatus{SeedMember: recreateSeed, Bootstrapped: true, RecreatedFrom: firstSeed},
			Phase:       v1beta2.PhaseCreating, Available: "False/" + ReasonBootstrapping,
		},
	}, {
		name:   "cluster ID recorded",
		reason: "etcd's cluster ID goes into the record the first time etcd answers",
		in: apply(observed(newCluster(1, "3.6.16"), seedPod(firstSeed, corev1.PodRunning)), withRecord(record(firstSeed, false)), func(o *Observed) {
			o.Membership = memberList(1, member(1, firstSeed))
			o.Membership.ClusterID = 0xcafe
		}),
		want: bootstrapOutcome{
			Pods:        []string{firstSeed},
			Record:      &v1beta2.BootstrapStatus{SeedMember: firstSeed, Bootstrapped: true, ClusterID: "cafe"},
			ServiceCopy: &v1beta2.BootstrapStatus{SeedMember: firstSeed, Bootstrapped: true, ClusterID: "cafe"},
			Phase:       v1beta2.PhaseRunning, Available: "True/" + ReasonQuorumHealthy,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := outcomeOf(tt.in, Plan(tt.in))
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("%s\n(-want +got):\n%s", tt.reason, d)
			}
		})
	}
}

// TestAllMembersLostStatus checks what a person reads: the message names
// the lost cluster and the way out, exactly.
func TestAllMembersLostStatus(t *testing.T) {
	o := apply(observed(newCluster(3, "3.6.16")), withRecord(&v1beta2.BootstrapStatus{SeedMember: firstSeed, Bootstrapped: true, ClusterID: "8e9e05c52164694d"}), servicesLeft)
	d := Plan(o)
	want := "every member of etcd cluster 8e9e05c52164694d (seeded by " + firstSeed + ") is lost and their data was on emptyDir volumes, " +
		"so its data is gone. No new, empty cluster is started under this name. Restore it from a backup (no backup of it is known: no EtcdBackup names it in spec.clusterName), or, to start an empty cluster on purpose: " +
		"kubectl annotate etcdcluster -n prod demo etcd.database.coreos.com/recreate-empty=" + firstSeed
	for _, c := range []v1beta2.ConditionType{v1beta2.ConditionAvailable, v1beta2.ConditionDegraded} {
		if got := conditionOf(d.Status, c).Message; got != want {
			t.Errorf("%s message:\n got %q\nwant %q", c, got, want)
		}
	}
	if d.Status.Reason != want {
		t.Errorf("status.reason = %q, want the same message", d.Status.Reason)
	}
	if prog := conditionOf(d.Status, v1beta2.ConditionProgressing); prog.Status != metav1.ConditionFalse || prog.Reason != ReasonAllMembersLost {
		t.Errorf("Progressing = %s/%s, want False/%s", prog.Status, prog.Reason, ReasonAllMembersLost)
	}
	if d.Status.Size != 0 || d.Status.ReadyMembers != 0 {
		t.Errorf("size %d, ready %d: want 0 and 0", d.Status.Size, d.Status.ReadyMembers)
	}
	var kinds []string
	for _, c := range d.Children {
		kinds = append(kinds, c.Kind+"/"+c.Name)
	}
	if d := cmp.Diff([]string{"Service/demo", "Service/demo-client", "PodDisruptionBudget/demo", "NetworkPolicy/demo"}, kinds); d != "" {
		t.Errorf("children: the Services, the PDB and the fence stay, nothing else is rendered (-want +got):\n%s", d)
	}
	// The same observation gives the same status: no sync loop.
	o.Cluster.Status = d.Status
	if diff := cmp.Diff(d.Status, Plan(o).Status); diff != "" {
		t.Errorf("the status changes from one sync to the next (-first +second):\n%s", diff)
	}
}

// TestRecreatedSeedPod checks the Pod that starts the replacement: a name,
// a token and a seed annotation of its own.
func TestRecreatedSeedPod(t *testing.T) {
	o := apply(observed(newCluster(3, "3.6.16")), withRecord(record(firstSeed, true)), annotated(firstSeed))
	d := Plan(o)
	pod := renderedPod(d.Children, recreateSeed)
	if pod == nil {
		t.Fatalf("no Pod %s in %v", recreateSeed, childNames(d.Children))
	}
	cmd := strings.Join(pod.Spec.Containers[0].Command, " ")
	for _, want := range []string{
		"--initial-cluster-state=new",
		"--initial-cluster-token=" + ClusterToken(testCluster, testUID) + "-" + recreateSeed,
		"--initial-cluster=" + recreateSeed + "=" + testAddresses.PeerURL(recreateSeed),
	} {
		if !strings.Contains(cmd, want) {
			t.Errorf("command %q lacks %q", cmd, want)
		}
	}
	if got := pod.Annotations[AnnotationSeedMember]; got != recreateSeed {
		t.Errorf("seed annotation %q, want %q", got, recreateSeed)
	}
	first := renderedPod(Plan(observed(newCluster(3, "3.6.16"))).Children, firstSeed)
	if !slices.Contains(first.Spec.Containers[0].Command, "--initial-cluster-token="+ClusterToken(testCluster, testUID)) {
		t.Errorf("the first cluster's token changed: %v", first.Spec.Containers[0].Command)
	}
	var copy v1beta2.BootstrapStatus
	for _, c := range d.Children {
		if s, ok := c.Object.(*corev1.Service); ok && c.Name == testCluster {
			if err := json.Unmarshal([]byte(s.Annotations[AnnotationBootstrap]), &copy); err != nil {
				t.Fatal(err)
			}
		}
	}
	if copy.SeedMember != recreateSeed {
		t.Errorf("the Service's copy names %q, want %q", copy.SeedMember, recreateSeed)
	}
}

// TestEveryPodDeletedFromARunningCluster replays every Pod of a running
// cluster being deleted, with each status fed back as Metacontroller does: a converged cluster of
// three on emptyDir, every Pod deleted at once (terminating, etcd down),
// then gone. Before the bootstrap record, the status reported the loss
// once and then forgot it, and the third sync started a new seed.
func TestEveryPodDeletedFromARunningCluster(t *testing.T) {
	c := newCluster(3, "3.6.16")
	pods := []*corev1.Pod{readyPod(name(0)), readyPod(name(1)), readyPod(name(2))}
	o := observed(c, pods...)
	o.Services[testCluster] = peerService(c, nil, "")
	o.Services[plan.ClientServiceName(testCluster)] = clientService(c, true)
	o.Membership = memberList(1, member(1, name(0)), member(2, name(1)), member(3, name(2)))
	d := Plan(o)
	if d.Status.Phase != v1beta2.PhaseRunning {
		t.Fatalf("setup: phase %s", d.Status.Phase)
	}
	services := o.Services
	c.Status = d.Status

	// Deleted: the Pods terminate, etcd no longer answers.
	o = observed(c)
	o.Services = services
	for _, p := range pods {
		p = p.DeepCopy()
		p.DeletionTimestamp = &metav1.Time{Time: testNow}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		o.Pods[p.Name] = p
	}
	o.MembershipError = "context deadline exceeded"
	d = Plan(o)
	c.Status = d.Status

	// Gone, and several syncs later still gone.
	for i := range 3 {
		o = observed(c)
		o.Services = services
		o.Now = testNow.Add(time.Duration(i+1) * 5 * time.Second)
		o.MembershipError = "no member Pod is running"
		d = Plan(o)
		for _, ch := range d.Children {
			if pod, ok := ch.Object.(*corev1.Pod); ok && slices.Contains(pod.Spec.Containers[0].Command, "--initial-cluster-state=new") {
				t.Fatalf("sync %d after the loss starts a new cluster with Pod %s; status read: phase %s, size %d", i+1, ch.Name, c.Status.Phase, c.Status.Size)
			}
		}
		if deg := conditionOf(d.Status, v1beta2.ConditionDegraded); deg.Reason != ReasonAllMembersLost || d.Status.Phase != v1beta2.PhaseFailed {
			t.Fatalf("sync %d after the loss: phase %s, Degraded %s/%s", i+1, d.Status.Phase, deg.Status, deg.Reason)
		}
		c.Status = d.Status
	}
}

// TestPeerServiceKeepsItsRecordText: a peer Service whose copy of the
// record already says what this sync's record says is answered with its
// own text, not the record encoded again (a steady sync encoded it every
// time); a record that changed is encoded.
func TestPeerServiceKeepsItsRecordText(t *testing.T) {
	rec := record(firstSeed, true)
	rec.ClusterID = "abc"
	encoded, _ := json.Marshal(rec)
	// The same record, its fields in another order: what the API server
	// hands back need not be byte for byte what was written.
	reordered := `{"clusterID":"abc","bootstrapped":true,"seedMember":"` + firstSeed + `"}`
	cases := []struct {
		name, reason string
		annotation   string
		want         string
	}{
		{"same record", "the observed text is kept as it is", reordered, reordered},
		{"record changed", "a record the copy does not say yet is encoded", `{"seedMember":"` + firstSeed + `"}`, string(encoded)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := apply(observed(newCluster(3, "3.6.16")), runningThree)
			o.Cluster.Status.Bootstrap = rec
			o.Membership.ClusterID = 0xabc
			svc := peerService(o.Cluster, rec, "")
			svc.Annotations[AnnotationBootstrap] = tc.annotation
			o.Services[testCluster] = svc
			d := Plan(o)
			var got string
			for _, c := range d.Children {
				if s, ok := c.Object.(*corev1.Service); ok && c.Name == testCluster {
					got = s.Annotations[AnnotationBootstrap]
				}
			}
			if got != tc.want {
				t.Errorf("%s: the peer Service's record %s, want %s", tc.reason, got, tc.want)
			}
		})
	}
}
