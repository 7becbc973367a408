package v1beta2

import "strings"

// WithDefaults returns the spec as the hook acts on it. The CRD applies the
// same defaults at admission; the hook repeats them for parents that reach it
// without them (curl fixtures, a CRD installed without its schema).
func (s ClusterSpec) WithDefaults() ClusterSpec {
	if s.Repository == "" {
		s.Repository = DefaultRepository
	}
	if s.Version == "" {
		s.Version = DefaultVersion
	}
	s.Version = strings.TrimPrefix(s.Version, "v")
	s.Etcd = s.Etcd.WithDefaults()
	return s
}

// Image is the etcd image a member of this spec runs.
func (s ClusterSpec) Image() string {
	return s.Repository + ":v" + s.Version
}

// ClusterDomainSuffix returns the DNS suffix after ".svc", accepting either
// spelling of the field.
func (p *PodPolicy) ClusterDomainSuffix() string {
	if p == nil {
		return ""
	}
	if p.ClusterDomain != "" {
		return p.ClusterDomain
	}
	return p.LegacyClusterDomain
}

// Persistent reports whether members keep their data on PVCs.
func (s ClusterSpec) Persistent() bool {
	return s.Pod != nil && s.Pod.PersistentVolumeClaimSpec != nil
}
