package etcdcluster

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// Growing the members' volumes in place.
//
// Raising spec.pod.persistentVolumeClaimSpec.resources.requests.storage
// raises each member claim's request in the answer, one claim at a time:
// the next claim grows only once the one before has its new capacity.
// Metacontroller patches the request in place (the CompositeController's
// PVC updateStrategy is InPlace), and the storage driver grows the volume
// under the running member: no restart, no membership change.
//
// A driver that grows the file system only when the volume is next mounted
// leaves the claim FileSystemResizePending. If that lasts longer than
// Observed.FilesystemResizeGrace (the kubelet grows mounted volumes itself
// when the driver can), the member's Pod is rolled, as a spec change rolls
// it: its data is on the claim, so it comes back as the same member.
//
// The API server refuses a larger request when the claim's StorageClass
// lacks allowVolumeExpansion, and every request smaller than the claim's
// capacity. The hook holds no Kubernetes credentials, so it learns the
// classes from the customize hook, which relates them (Related), and it
// refuses such a change itself, in a condition, touching nothing: an
// answer Metacontroller cannot apply would fail every sync of the cluster.

// Reasons of a change of the members' volume size.
const (
	ReasonVolumesGrowing      = "VolumesGrowing"
	ReasonVolumeChangeRefused = "VolumeChangeRefused"
	ReasonVolumeResizeFailed  = "VolumeResizeFailed"
)

// DefaultFilesystemResizeGrace is how long a claim may wait for its file
// system to grow on the running member before the member's Pod is rolled
// to mount it again. The kubelet grows a mounted volume within its volume
// manager's resync (about a minute) when the driver can.
const DefaultFilesystemResizeGrace = 2 * time.Minute

// The claim conditions and allocated-resource states the resize
// controllers report (core/v1, Kubernetes 1.31+).
const (
	claimResizing                corev1.PersistentVolumeClaimConditionType = "Resizing"
	claimFileSystemResizePending corev1.PersistentVolumeClaimConditionType = "FileSystemResizePending"
	claimControllerResizeError   corev1.PersistentVolumeClaimConditionType = "ControllerResizeError"
	claimNodeResizeError         corev1.PersistentVolumeClaimConditionType = "NodeResizeError"
)

// volumePlan is what this sync does with the member claims' size.
type volumePlan struct {
	want resource.Quantity
	// grow is the claim whose request this answer raises to want.
	grow string
	// newClaims is the size of the claims rendered new: want, or while a
	// shrink is refused, the size the existing claims have.
	newClaims *resource.Quantity
	// waiting says what the growth waits for; refused and failed why it
	// stopped.
	waiting, refused, failed string
}

// claimStorage is a claim's requested and current size.
func claimStorage(c *corev1.PersistentVolumeClaim) (requested, capacity resource.Quantity, bound bool) {
	requested = c.Spec.Resources.Requests[corev1.ResourceStorage]
	capacity, bound = c.Status.Capacity[corev1.ResourceStorage]
	return requested, capacity, bound
}

// planVolumes decides the claims' size for this sync.
func (p *planner) planVolumes(views []memberView) volumePlan {
	var vp volumePlan
	pol := p.spec.Pod
	if pol == nil || pol.PersistentVolumeClaimSpec == nil {
		return vp
	}
	want, ok := pol.PersistentVolumeClaimSpec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return vp
	}
	vp.want = want
	var claims []*corev1.PersistentVolumeClaim
	for _, v := range views {
		if v.claim != nil && v.claim.DeletionTimestamp == nil {
			claims = append(claims, v.claim)
		}
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i].Name < claims[j].Name })

	var largest *corev1.PersistentVolumeClaim
	for _, c := range claims {
		req, _, _ := claimStorage(c)
		if largest == nil || req.Cmp(largestRequest(largest)) > 0 {
			largest = c
		}
	}
	if largest != nil && want.Cmp(largestRequest(largest)) < 0 {
		size := largestRequest(largest)
		vp.newClaims = &size
		vp.refused = fmt.Sprintf("spec.pod.persistentVolumeClaimSpec asks for %s of storage, and claim %s has %s: a claim cannot shrink, so nothing was changed, and new members get %s too. Set the request back to %s or more",
			want.String(), largest.Name, size.String(), size.String(), size.String())
		return vp
	}
	for _, c := range claims {
		if why := resizeFailure(c); why != "" {
			vp.failed = fmt.Sprintf("claim %s could not grow: %s", c.Name, why)
			return vp
		}
	}
	for _, c := range claims {
		if state := resizeInProgress(c); state != "" {
			vp.waiting = fmt.Sprintf("growing the member volumes to %s: claim %s %s", want.String(), c.Name, state)
			return vp
		}
	}
	for _, c := range claims {
		req, _, bound := claimStorage(c)
		if req.Cmp(want) >= 0 {
			continue
		}
		if !bound {
			vp.waiting = fmt.Sprintf("growing the member volumes to %s: claim %s is not bound to a volume yet", want.String(), c.Name)
			return vp
		}
		if why := p.expansionRefused(c); why != "" {
			vp.newClaims = &req
			vp.refused = fmt.Sprintf("the member volumes cannot grow to %s, so nothing was changed: %s", want.String(), why)
			return vp
		}
		vp.grow = c.Name
		vp.waiting = fmt.Sprintf("growing the member volumes to %s: claim %s, from %s", want.String(), c.Name, req.String())
		return vp
	}
	return vp
}

func largestRequest(c *corev1.PersistentVolumeClaim) resource.Quantity {
	req, _, _ := claimStorage(c)
	return req
}

// expansionRefused says why the API server would refuse a larger request
// for the claim, as far as the related StorageClasses tell.
func (p *planner) expansionRefused(c *corev1.PersistentVolumeClaim) string {
	name := ""
	if c.Spec.StorageClassName != nil {
		name = *c.Spec.StorageClassName
	}
	switch {
	case name == "":
		return fmt.Sprintf("claim %s has no StorageClass, and only a dynamically provisioned claim can grow", c.Name)
	case p.o.StorageClasses == nil:
		return "the hook sees no StorageClasses, so it cannot tell whether " + name + " allows volume expansion: the EtcdCluster customize hook relates them, which needs Metacontroller v4.15 or later and the right to list and watch storageclasses (manifests/metacontroller/rbac.yaml)"
	}
	class, ok := p.o.StorageClasses[name]
	switch {
	case !ok:
		return fmt.Sprintf("StorageClass %s of claim %s is not found", name, c.Name)
	case class.AllowVolumeExpansion == nil || !*class.AllowVolumeExpansion:
		return fmt.Sprintf("StorageClass %s does not allow volume expansion (allowVolumeExpansion)", name)
	}
	return ""
}

// resizeInProgress says what a claim whose volume is growing is at, or ""
// when it is not growing.
func resizeInProgress(c *corev1.PersistentVolumeClaim) string {
	req, capacity, bound := claimStorage(c)
	if cond := claimCondition(c, claimFileSystemResizePending); cond != nil {
		return "waits for its file system to grow (FileSystemResizePending)"
	}
	if cond := claimCondition(c, claimResizing); cond != nil {
		return "is being resized by the storage driver"
	}
	if bound && req.Cmp(capacity) > 0 {
		return fmt.Sprintf("has %s of its %s", capacity.String(), req.String())
	}
	return ""
}

// resizeFailure is the resize error a claim reports, or "".
func resizeFailure(c *corev1.PersistentVolumeClaim) string {
	for _, t := range []corev1.PersistentVolumeClaimConditionType{claimControllerResizeError, claimNodeResizeError} {
		if cond := claimCondition(c, t); cond != nil {
			return fmt.Sprintf("%s: %s", t, cond.Message)
		}
	}
	switch s := c.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; s {
	case corev1.PersistentVolumeClaimControllerResizeInfeasible, corev1.PersistentVolumeClaimNodeResizeInfeasible:
		return string(s)
	}
	return ""
}

func claimCondition(c *corev1.PersistentVolumeClaim, t corev1.PersistentVolumeClaimConditionType) *corev1.PersistentVolumeClaimCondition {
	for i := range c.Status.Conditions {
		if cond := &c.Status.Conditions[i]; cond.Type == t && cond.Status == corev1.ConditionTrue {
			return cond
		}
	}
	return nil
}

// claimChild is a member's claim in the answer: as last applied, with the
// request raised when this sync grows it.
func (p *planner) claimChild(claim *corev1.PersistentVolumeClaim) plan.Child {
	kept := plan.KeepClaim(claim)
	if p.volumes.grow != claim.Name {
		return kept
	}
	grown, err := withStorageRequest(kept.Object, p.volumes.want)
	if err != nil {
		// The kept object is JSON the hook itself or Metacontroller
		// wrote; one that is not cannot be grown, and stays as it is.
		return kept
	}
	return plan.Child{Kind: plan.KindPVC, Name: claim.Name, Object: grown}
}

// withStorageRequest is the claim object with spec.resources.requests.storage
// set, every other field as it was: Metacontroller's three-way merge then
// patches that one field.
func withStorageRequest(obj any, size resource.Quantity) (json.RawMessage, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	spec := childMap(m, "spec")
	res := childMap(spec, "resources")
	req := childMap(res, "requests")
	req[string(corev1.ResourceStorage)] = size.String()
	return json.Marshal(m)
}

func childMap(m map[string]any, key string) map[string]any {
	child, ok := m[key].(map[string]any)
	if !ok {
		child = map[string]any{}
		m[key] = child
	}
	return child
}

// newClaimSpec is the spec new member claims are rendered from.
func (p *planner) newClaimSpec() v1beta2.ClusterSpec {
	spec := p.spec
	if size := p.volumes.newClaims; size != nil {
		pol := *spec.Pod
		claim := *pol.PersistentVolumeClaimSpec.DeepCopy()
		claim.Resources.Requests[corev1.ResourceStorage] = *size
		pol.PersistentVolumeClaimSpec = &claim
		spec.Pod = &pol
	}
	return spec
}

// volumeProblems reports the growth's refusal or failure.
func (p *planner) volumeProblems(r *observation) {
	switch vp := p.volumes; {
	case vp.refused != "":
		r.problem(ReasonVolumeChangeRefused, vp.refused)
	case vp.failed != "":
		r.problem(ReasonVolumeResizeFailed, vp.failed)
	}
}

// awaitsRemount: the member's claim has grown, but its file system waits
// for the volume to be mounted again, longer than the kubelet takes to
// grow a mounted one, and the Pod predates the wait. Only a new Pod
// mounts the volume again.
func (p *planner) awaitsRemount(pod *corev1.Pod) bool {
	claim := p.o.PVCs[pod.Name]
	if claim == nil || !podUsesClaim(pod) {
		return false
	}
	cond := claimCondition(claim, claimFileSystemResizePending)
	if cond == nil || !pod.CreationTimestamp.Time.Before(cond.LastTransitionTime.Time) {
		return false
	}
	grace := p.o.FilesystemResizeGrace
	if grace == 0 {
		grace = DefaultFilesystemResizeGrace
	}
	return !p.o.Now.IsZero() && p.o.Now.Sub(cond.LastTransitionTime.Time) >= grace
}

// storageStatus is status.storage: the claims' sizes, for a cluster on
// claims.
func (p *planner) storageStatus() *v1beta2.StorageStatus {
	pol := p.spec.Pod
	if pol == nil || pol.PersistentVolumeClaimSpec == nil || len(p.o.PVCs) == 0 {
		return nil
	}
	st := &v1beta2.StorageStatus{}
	if want, ok := pol.PersistentVolumeClaimSpec.Resources.Requests[corev1.ResourceStorage]; ok {
		st.Requested = want.String()
	}
	var smallest *resource.Quantity
	for _, c := range p.o.PVCs {
		req, capacity, bound := claimStorage(c)
		cs := v1beta2.ClaimStatus{Name: c.Name, Requested: req.String()}
		if c.Name == p.volumes.grow {
			cs.Requested = p.volumes.want.String()
		}
		if bound {
			cs.Capacity = capacity.String()
			if smallest == nil || capacity.Cmp(*smallest) < 0 {
				smallest = &capacity
			}
		}
		if why := resizeFailure(c); why != "" {
			cs.Resizing = why
		} else if state := resizeInProgress(c); state != "" {
			cs.Resizing = state
		}
		st.Claims = append(st.Claims, cs)
	}
	sort.Slice(st.Claims, func(i, j int) bool { return st.Claims[i].Name < st.Claims[j].Name })
	if smallest != nil {
		st.Capacity = smallest.String()
	}
	return st
}
