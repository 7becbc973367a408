package v1beta2

// StorageStatus is where the members' data volumes stand, for a cluster
// whose members keep their data on claims (spec.pod.persistentVolumeClaimSpec).
// A raised request grows the claims in place, one at a time; this is how a
// user sees it through.
type StorageStatus struct {
	// Requested is the size spec.pod.persistentVolumeClaimSpec asks for.
	// +optional
	Requested string `json:"requested,omitempty"`
	// Capacity is the smallest capacity among the member claims, as their
	// status reports it: what every member can hold.
	// +optional
	Capacity string `json:"capacity,omitempty"`
	// Claims are the member claims, by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	Claims []ClaimStatus `json:"claims,omitempty"`
}

// ClaimStatus is one member claim's size.
type ClaimStatus struct {
	Name string `json:"name"`
	// Requested is the claim's spec.resources.requests.storage.
	// +optional
	Requested string `json:"requested,omitempty"`
	// Capacity is the claim's status.capacity.storage: what its volume
	// holds now.
	// +optional
	Capacity string `json:"capacity,omitempty"`
	// Resizing says what the claim's conditions report while it grows
	// (Resizing, FileSystemResizePending, a resize error).
	// +optional
	Resizing string `json:"resizing,omitempty"`
}
