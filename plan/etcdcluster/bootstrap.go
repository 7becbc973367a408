package etcdcluster

import (
	"encoding/json"
	"reflect"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// The bootstrap record says which etcd cluster an EtcdCluster created and
// whether it has run. It is what keeps a cluster that lost every member
// from being bootstrapped again as a new, empty cluster under the same
// name: clients would reconnect to it and see their data, and revisions,
// silently gone.
//
// The hook remembers nothing, so the record travels in what each request
// carries, in three places:
//   - status.bootstrap, which Metacontroller hands back on every sync;
//   - a copy on the peer Service (AnnotationBootstrap), so that a status
//     wiped by hand, or a status write that failed, does not erase it;
//   - each member Pod names its cluster's seed (AnnotationSeedMember), so
//     a Pod of a re-created cluster is recognised even before either
//     record says so.
//
// A cluster is bootstrapped once a member was seen running, or etcd
// answered. Before that the record only names the seed being started, and
// a seed Pod that never ran may be rendered again. When the evidence is
// ambiguous (no record, but Services or a status written by an earlier
// version of the hook) the cluster counts as bootstrapped: a refusal that
// needs a human costs minutes, a silent empty cluster costs the data.
const (
	// AnnotationBootstrap on the peer Service holds a JSON copy of
	// status.bootstrap.
	AnnotationBootstrap = v1beta2.Group + "/bootstrap"
	// AnnotationSeedMember on a member Pod names the seed member of the
	// etcd cluster it belongs to.
	AnnotationSeedMember = v1beta2.Group + "/seed-member"
)

// bootstrapRecord gathers the record from everything the request carries.
// It is nil only for a cluster the hook has never started.
func (p *planner) bootstrapRecord() *v1beta2.BootstrapStatus {
	o, c := p.o, p.o.Cluster
	p.serviceRec, p.serviceRecRaw = serviceRecords.of(o.Services[c.Name])
	rec := newerRecord(c.Status.Bootstrap, p.serviceRec)
	if rec == nil && p.earlierVersionEvidence() {
		rec = &v1beta2.BootstrapStatus{SeedMember: p.firstSeedName(), Bootstrapped: true}
	}
	if seed := p.podsSeed(); seed != "" {
		switch {
		case rec == nil:
			rec = &v1beta2.BootstrapStatus{SeedMember: seed}
		case seed != rec.SeedMember && seed == p.recreatedSeed(rec.SeedMember):
			// The Pods of the cluster that replaced the recorded one exist,
			// though the record of the replacement was not written.
			rec = &v1beta2.BootstrapStatus{SeedMember: seed, RecreatedFrom: rec.SeedMember}
		}
	}
	if rec == nil {
		return nil
	}
	out := *rec
	out.RevisionSeen = max(out.RevisionSeen, c.Status.Bootstrap.GetRevisionSeen(), p.serviceRec.GetRevisionSeen(),
		roundRevision(p.liveRevision()))
	if o.Membership != nil || p.anyPodStarted(out.SeedMember) {
		out.Bootstrapped = true
	}
	if out.Restore != nil && !out.Formed && (o.Membership != nil || p.restoredMemberReady(&out)) {
		out.Formed = true
	}
	if ms := o.Membership; ms != nil && ms.ClusterID != 0 && out.ClusterID == "" {
		out.ClusterID = strconv.FormatUint(ms.ClusterID, 16)
	}
	return &out
}

// revisionSeenStep is what the record's RevisionSeen is rounded down to.
// The restore's bump (BumpRevision, a thousand times larger) covers what the
// rounding leaves out, and the writes made after the last sync saw them.
const revisionSeenStep = 1_000_000

func roundRevision(rev int64) int64 { return rev - rev%revisionSeenStep }

// liveRevision is the highest revision a member reported in this sync; 0
// when none answered.
func (p *planner) liveRevision() int64 {
	var rev int64
	if ms := p.o.Membership; ms != nil {
		for _, m := range ms.Members {
			rev = max(rev, m.Revision)
		}
	}
	return rev
}

// replacedRevision is the highest revision the etcd clusters this
// EtcdCluster ran are known to have reached: a restore is lifted above it.
func (p *planner) replacedRevision() int64 {
	rev := p.liveRevision()
	if p.rec != nil {
		rev = max(rev, p.rec.RevisionSeen)
	}
	return rev
}

// newRecord is a record for another etcd cluster of this EtcdCluster: it
// keeps the revisions every earlier one was seen at.
func (p *planner) newRecord(rec v1beta2.BootstrapStatus) *v1beta2.BootstrapStatus {
	rec.RevisionSeen = max(rec.RevisionSeen, roundRevision(p.liveRevision()))
	if p.rec != nil {
		rec.RevisionSeen = max(rec.RevisionSeen, p.rec.RevisionSeen)
	}
	return &rec
}

// newerRecord merges the status's record with the Service's copy. They
// differ only when a write failed or someone edited one: the same seed
// merges, a record of the cluster that replaced the other's wins, and
// otherwise the status does.
func newerRecord(status, copy *v1beta2.BootstrapStatus) *v1beta2.BootstrapStatus {
	switch {
	case status == nil:
		return copy
	case copy == nil:
		return status
	case status.SeedMember == copy.SeedMember:
		out := *status
		out.Bootstrapped = status.Bootstrapped || copy.Bootstrapped
		out.Formed = status.Formed || copy.Formed
		if out.ClusterID == "" {
			out.ClusterID = copy.ClusterID
		}
		if out.RecreatedFrom == "" {
			out.RecreatedFrom = copy.RecreatedFrom
		}
		return &out
	case copy.RecreatedFrom == status.SeedMember:
		return copy
	}
	return status
}

// recordText is the peer Service's annotation when it already says what
// this sync's record says, so that the record is not encoded again on
// every sync; "" otherwise.
func (p *planner) recordText() string {
	if p.rec == nil || p.serviceRec == nil || !sameRecord(p.rec, p.serviceRec) {
		return ""
	}
	return p.serviceRecRaw
}

// sameRecord is reflect.DeepEqual of two records, field by field: this
// runs on every sync, and the restore's record is the only part that
// needs reflection.
func sameRecord(a, b *v1beta2.BootstrapStatus) bool {
	if a.SeedMember != b.SeedMember || a.Bootstrapped != b.Bootstrapped || a.Formed != b.Formed || a.ClusterID != b.ClusterID ||
		a.RecreatedFrom != b.RecreatedFrom || a.RevisionSeen != b.RevisionSeen {
		return false
	}
	if a.Restore == nil || b.Restore == nil {
		return a.Restore == b.Restore
	}
	return reflect.DeepEqual(*a.Restore, *b.Restore)
}

// serviceRecord decodes the record's copy on the peer Service s, and
// returns the annotation's text with it; nil and "" when there is none.
func serviceRecord(s *corev1.Service) (*v1beta2.BootstrapStatus, string) {
	if s == nil {
		return nil, ""
	}
	raw := s.Annotations[AnnotationBootstrap]
	var rec v1beta2.BootstrapStatus
	if err := json.Unmarshal([]byte(raw), &rec); err != nil || rec.SeedMember == "" {
		return nil, ""
	}
	return &rec, raw
}

// earlierVersionEvidence is what a cluster started by a hook without the
// record leaves behind: a status that saw members, or a peer Service
// without the record's copy. Every hook version renders the Services
// together with its seed.
func (p *planner) earlierVersionEvidence() bool {
	o, st := p.o, p.o.Cluster.Status
	if st.Phase == v1beta2.PhaseRunning || st.Phase == v1beta2.PhaseFailed || st.CurrentVersion != "" ||
		len(st.Members.Ready)+len(st.Members.Unready) > 0 {
		return true
	}
	_, ok := o.Services[p.o.Cluster.Name]
	return ok && p.serviceRec == nil
}

// podsSeed is the seed member the observed Pods name, the newest when they
// name several; Pods rendered before the record existed belong to the
// first cluster. "" when there is no Pod.
func (p *planner) podsSeed() string {
	first := p.firstSeedName()
	seed := ""
	for _, pod := range p.o.Pods {
		if _, restoring := pod.Annotations[AnnotationRestoreRequest]; restoring {
			// A restore's seed counts once the restore is committed, and
			// the record then names it; see restore.go.
			continue
		}
		s := pod.Annotations[AnnotationSeedMember]
		if s == "" {
			s = first
		}
		// s == seed changes nothing: the seed's name is hashed only for
		// another seed (the Pods of one cluster all name the same).
		if seed == "" || (s != seed && s == p.recreatedSeed(seed)) {
			seed = s
		}
	}
	return seed
}

// anyPodStarted: a Pod of the cluster seeded by seed has run. A restore's
// seed that is not yet committed runs another cluster.
func (p *planner) anyPodStarted(seed string) bool {
	for name, pod := range p.o.Pods {
		if _, restoring := pod.Annotations[AnnotationRestoreRequest]; restoring && name != seed {
			continue
		}
		if podStarted(pod) {
			return true
		}
	}
	return false
}

// restoredMemberReady: a member the recorded restore started has a Ready
// Pod, so its etcd had a leader: the restored members formed a cluster.
func (p *planner) restoredMemberReady(rec *v1beta2.BootstrapStatus) bool {
	for name, pod := range p.o.Pods {
		if restoredMember(rec, name) && podReady(pod) {
			return true
		}
	}
	return false
}

// podStarted reports a Pod whose container has run, or may have: from
// then on its member may have taken writes.
func podStarted(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
		return true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil || cs.RestartCount > 0 || cs.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}

// seed is the seed member of the cluster the hook is running or starting.
func (p *planner) seed() string {
	if p.rec != nil {
		return p.rec.SeedMember
	}
	return p.firstSeedName()
}

// firstSeedName is the seed of the cluster's first etcd cluster: SeedName
// of its UID.
func (p *planner) firstSeedName() string {
	if p.firstSeed == "" {
		p.firstSeed = firstSeeds.of(p.o.Cluster)
	}
	return p.firstSeed
}

// clusterToken is --initial-cluster-token: the first cluster keeps the
// token every earlier version used, and a re-created one adds its seed,
// so that no member of the lost cluster could ever join it.
func (p *planner) clusterToken() string {
	c := p.o.Cluster
	token := ClusterToken(c.Name, string(c.UID))
	if seed := p.seed(); seed != p.firstSeedName() {
		token += "-" + seed
	}
	return token
}

// recreatedSeed is the seed of the cluster that replaces the one seeded by
// lost, when the user asks for it: derived, so that a repeated sync names
// the same seed.
func (p *planner) recreatedSeed(lost string) string {
	c := p.o.Cluster
	return SeedName(c.Name, string(c.UID)+"/recreate-empty/"+lost)
}

// recreateRequested: the cluster ran, and the recreate-empty annotation
// names its seed member.
func (p *planner) recreateRequested() bool {
	v, ok := p.o.Cluster.Annotations[v1beta2.AnnotationRecreateEmpty]
	return ok && p.rec != nil && p.rec.Bootstrapped && v == p.rec.SeedMember
}
