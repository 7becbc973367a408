package v1beta2

// SpreadPolicy is how strictly the default placement spreads a cluster's
// members over zones and nodes.
//
// +kubebuilder:validation:Enum=preferred;strict
type SpreadPolicy string

const (
	// SpreadPreferred asks the scheduler to spread members (ScheduleAnyway):
	// a cluster on a single zone, or on fewer nodes than members, still
	// schedules.
	SpreadPreferred SpreadPolicy = "preferred"
	// SpreadStrict requires it (DoNotSchedule): a member that would land in
	// a zone or on a node that already holds more members than another
	// stays Pending, and the cluster says so.
	SpreadStrict SpreadPolicy = "strict"
)

// The well-known node labels the default placement spreads over. The zone
// reaches a Pod as its own label when the API server copies it from the
// Node at binding (the PodTopologyLabels admission, on by default since
// Kubernetes 1.35); the node is the Pod's spec.nodeName.
const (
	LabelTopologyZone = "topology.kubernetes.io/zone"
	LabelHostname     = "kubernetes.io/hostname"
)

// DefaultPlacement reports whether the hook places members itself: neither
// spec.pod.affinity nor spec.pod.topologySpreadConstraints is set.
func (p *PodPolicy) DefaultPlacement() bool {
	return p == nil || (p.Affinity == nil && len(p.TopologySpreadConstraints) == 0)
}

// SpreadOrDefault is spec.pod.spread, preferred when unset.
func (p *PodPolicy) SpreadOrDefault() SpreadPolicy {
	if p == nil || p.Spread == "" {
		return SpreadPreferred
	}
	return p.Spread
}

// MemberPlacement is where a member's Pod runs, as observed on the Pod.
type MemberPlacement struct {
	Name string `json:"name"`
	// Node is the Pod's spec.nodeName.
	// +optional
	Node string `json:"node,omitempty"`
	// Zone is the Pod's topology.kubernetes.io/zone label, which the API
	// server copies from the Node at binding (Kubernetes 1.35 and later).
	// Empty where it does not.
	// +optional
	Zone string `json:"zone,omitempty"`
}
