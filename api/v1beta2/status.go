package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterPhase is the coarse state of a cluster.
type ClusterPhase string

const (
	PhaseCreating ClusterPhase = "Creating"
	PhaseRunning  ClusterPhase = "Running"
	PhaseFailed   ClusterPhase = "Failed"
)

// ConditionType names a condition.
type ConditionType string

const (
	// Available: a quorum of members serves clients.
	ConditionAvailable ConditionType = "Available"
	// Progressing: the hook is moving the cluster toward its spec.
	ConditionProgressing ConditionType = "Progressing"
	// Degraded: something needs attention: an invalid spec, members that
	// are not ready, a lost quorum, or a spec field not yet honoured.
	ConditionDegraded ConditionType = "Degraded"
	// Upgrading: members run another version than the spec asks for, and
	// the hook is moving them one at a time, or has stopped and says why.
	ConditionUpgrading ConditionType = "Upgrading"
)

// ClusterStatus is what the hook last observed. Metacontroller replaces it
// wholesale on every sync, so every field is recomputed from observation.
type ClusterStatus struct {
	// ObservedGeneration is injected by Metacontroller.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// +optional
	// +kubebuilder:validation:Enum=Creating;Running;Failed
	Phase ClusterPhase `json:"phase,omitempty"`

	// Reason explains the phase in one sentence.
	// +optional
	Reason string `json:"reason,omitempty"`

	// ControlPaused mirrors spec.paused once the hook has honoured it.
	// +optional
	ControlPaused bool `json:"controlPaused,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []ClusterCondition `json:"conditions,omitempty"`

	// Size is the number of members etcd reports, learners included.
	// +optional
	Size int `json:"size"`

	// ReadyMembers counts members.ready, for the printer column.
	// +optional
	ReadyMembers int `json:"readyMembers"`

	// +optional
	Members MembersStatus `json:"members,omitzero"`

	// ServiceName is the client Service.
	// +optional
	ServiceName string `json:"serviceName,omitempty"`

	// +optional
	ClientPort int `json:"clientPort,omitempty"`

	// CurrentVersion is the lowest version a member reports running.
	// +optional
	CurrentVersion string `json:"currentVersion,omitempty"`

	// TargetVersion is the version the spec asks for.
	// +optional
	TargetVersion string `json:"targetVersion,omitempty"`
}

// MembersStatus lists members by readiness of their Pods.
type MembersStatus struct {
	// +optional
	Ready []string `json:"ready,omitempty"`
	// +optional
	Unready []string `json:"unready,omitempty"`
}

// ClusterCondition is one observation about the cluster.
type ClusterCondition struct {
	Type ConditionType `json:"type"`
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status metav1.ConditionStatus `json:"status"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// LastTransitionTime changes only when Status changes, so that a steady
	// cluster's status is byte-for-byte stable and causes no sync loop.
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty,omitzero"`
}
