package main

import (
	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

// What a cluster's sample takes in from a sync, besides its status.

// addCertificates takes in status.TLS.
func (s *clusterSample) addCertificates(t *v1beta2.TLSStatus) {
	if t == nil {
		return
	}
	for _, c := range t.Certificates {
		if s.certExpiry.IsZero() || c.NotAfter.Time.Before(s.certExpiry) {
			s.certExpiry = c.NotAfter.Time
		}
		if c.RenewAt != nil && (s.certRenewal.IsZero() || c.RenewAt.Time.Before(s.certRenewal)) {
			s.certRenewal = c.RenewAt.Time
		}
	}
}

// addMembership takes in what etcd said in the sync, if it answered.
func (s *clusterSample) addMembership(ms *membership.Membership) {
	if ms == nil {
		return
	}
	s.membership = true
	s.quorum = !ms.Stale && membership.HasQuorum(ms)
	s.hasLeader = !ms.Stale && ms.LeaderID != 0
	for _, mem := range ms.Members {
		if mem.IsLearner {
			s.learners++
		} else {
			s.voting++
		}
		if !mem.Reachable {
			continue
		}
		s.dbSize = max(s.dbSize, float64(mem.DBSize))
		s.dbInUse = max(s.dbInUse, float64(mem.DBSizeInUse))
	}
	// The hook's own write fence (a hibernation's) is not corruption.
	for _, a := range membership.WithoutFence(ms.Alarms()) {
		s.nospace = s.nospace || a.Type == membership.AlarmNoSpace
		s.corrupt = s.corrupt || a.Type == membership.AlarmCorrupt
	}
	// A leader this replica saw before, and another one now. A sync that
	// sees no leader changes nothing: the election it is in ends with a
	// leader, the same or another, which a later sync compares.
	if s.hasLeader {
		if s.leaderID != 0 && s.leaderID != ms.LeaderID {
			s.leaderChanges++
		}
		s.leaderID = ms.LeaderID
	}
}
