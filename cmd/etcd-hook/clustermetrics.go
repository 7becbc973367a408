package main

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/plan/etcdbackup"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
	"github.com/etcdhook/etcd-hook/plan/etcdrestore"
)

// objectMetrics are the per-object series: what each sync this replica
// answered said of an EtcdCluster, EtcdBackup or EtcdRestore. They are
// derived from the observation the planner saw and the status it answered
// with, as the answer leaves, and are served from memory at scrape time
// (so the ages are exact, and the syncs pay a map update, nothing more).
//
// The hook remembers nothing across restarts: a restarted replica serves
// an object's series again from its next sync (at the latest after
// Metacontroller's resync period). With two replicas behind the Service
// each serves the objects it synced, the last value it saw; query
// max by (namespace, name) for levels, or the series with the newest
// etcd_cluster_last_sync_timestamp_seconds.
//
// Every series carries the labels namespace and name, and nothing else,
// so their number grows with the objects and no further. An object's
// series go when its finalize answer says finalized; a deleted object's
// late sync never brings them back.
type objectMetrics struct {
	now func() time.Time

	mu       sync.Mutex
	clusters map[objectKey]*clusterSample
	backups  map[objectKey]*backupSample
	restores map[objectKey]*restoreSample
}

type objectKey struct{ namespace, name string }

func newObjectMetrics(now func() time.Time) *objectMetrics {
	return &objectMetrics{
		now:      now,
		clusters: map[objectKey]*clusterSample{},
		backups:  map[objectKey]*backupSample{},
		restores: map[objectKey]*restoreSample{},
	}
}

// clusterSample is one EtcdCluster as its last sync saw it.
type clusterSample struct {
	desired, readyMembers float64
	// membership is false when etcd's member list could not be read: the
	// counts, sizes and alarms it gives are then absent, not zero.
	membership             bool
	voting, learners       float64
	quorum, hasLeader      bool
	leaderID               uint64 // the last leader seen, 0 before any
	leaderChanges          float64
	dbSize, dbInUse        float64 // the largest a member reports; 0 unknown
	quota                  float64
	nospace, corrupt       bool
	lastBackup             time.Time // zero when no backup is known
	lastSync               time.Time
	ready, reconciling     bool
	stalled, rolloutHalted bool
	hibernated             bool
	// certExpiry is the earliest expiry of the certificates status.TLS
	// lists, and certRenewal the earliest moment the hook renews one of
	// them (zero for spec.TLS.static: the user renews).
	certExpiry, certRenewal time.Time
}

type backupSample struct {
	lastSuccess    time.Time // zero before the first success
	interval       float64   // 0 for a one-shot backup
	ready, stalled bool
}

type restoreSample struct{ ready, failed bool }

// syncer wraps the EtcdCluster hooks' Syncer: every answered sync is
// recorded. It forwards Prepare, which the handler looks for.
func syncerWithMetrics[P any](next hooks.Syncer[P], m *objectMetrics) hooks.Syncer[P] {
	return recordingSyncer[P]{next: next, m: m}
}

type recordingSyncer[P any] struct {
	next hooks.Syncer[P]
	m    *objectMetrics
}

func (s recordingSyncer[P]) Sync(ctx context.Context, o *etcdcluster.Observed, prepared P) (etcdcluster.Decision, error) {
	d, err := s.next.Sync(ctx, o, prepared)
	if err == nil {
		s.m.recordCluster(o, d)
	}
	return d, err
}

func (s recordingSyncer[P]) Prepare(ctx context.Context, o *etcdcluster.Observed) P {
	return s.next.Prepare(ctx, o)
}

// deleting: the object is going away. Its series are updated while they
// exist and dropped once finalized, but never created anew: a sync in
// flight as the finalize answer went out would otherwise bring them back
// for good.
func track[S any](m map[objectKey]*S, key objectKey, deleting, finalized bool) (*S, bool) {
	s, ok := m[key]
	switch {
	case deleting && finalized:
		delete(m, key)
		return nil, false
	case deleting && !ok:
		return nil, false
	case !ok:
		s = new(S)
		m[key] = s
	}
	return s, true
}

func (m *objectMetrics) recordCluster(o *etcdcluster.Observed, d etcdcluster.Decision) {
	c := o.Cluster
	deleting := o.Finalizing || c.DeletionTimestamp != nil
	now := o.Now
	if now.IsZero() {
		now = m.now()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := track(m.clusters, objectKey{c.Namespace, c.Name}, deleting, d.Finalized)
	if !ok {
		return
	}
	if o.Finalizing {
		// A finalize answer carries the last status over and reads no
		// membership: the series keep what the last sync said.
		s.lastSync = now
		return
	}
	spec, st := c.Spec.WithDefaults(), d.Status
	next := clusterSample{
		desired:       float64(spec.Size),
		readyMembers:  float64(st.ReadyMembers),
		quota:         float64(spec.Etcd.QuotaBackendBytes),
		lastSync:      now,
		ready:         conditionTrue(st.Conditions, v1beta2.ConditionReady),
		reconciling:   conditionTrue(st.Conditions, v1beta2.ConditionReconciling),
		stalled:       conditionTrue(st.Conditions, v1beta2.ConditionStalled),
		rolloutHalted: rolloutHalted(st.Conditions),
		hibernated:    st.Phase == v1beta2.PhaseHibernated,
		leaderID:      s.leaderID,
		leaderChanges: s.leaderChanges,
	}
	if b := st.NewestBackup; b != nil {
		next.lastBackup = b.Time.Time
	}
	next.addCertificates(st.TLS)
	next.addMembership(o.Membership)
	*s = next
}

func (m *objectMetrics) recordBackup(o *etcdbackup.Observed, d etcdbackup.Decision) {
	b := o.Backup
	deleting := o.Finalizing || b.DeletionTimestamp != nil
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := track(m.backups, objectKey{b.Namespace, b.Name}, deleting, d.Finalized)
	if !ok || o.Finalizing {
		return
	}
	s.lastSuccess = time.Time{}
	if t := d.Status.LastSuccessDate; t != nil {
		s.lastSuccess = t.Time
	}
	s.interval = 0
	if p := b.Spec.BackupPolicy; p != nil && !heldForHibernation(d.Status.Conditions) {
		// Absent while the cluster hibernates: no run is due, so an age
		// past two intervals is no alert (EtcdBackupTooOld).
		s.interval = float64(p.BackupIntervalInSecond)
	}
	s.ready = conditionTrue(d.Status.Conditions, v1beta2.ConditionReady)
	s.stalled = conditionTrue(d.Status.Conditions, v1beta2.ConditionStalled)
}

// recordRestore: a restore's finalize answer is always finalized (it has
// nothing to undo).
func (m *objectMetrics) recordRestore(o *etcdrestore.Observed, d etcdrestore.Decision, finalizing bool) {
	r := o.Restore
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := track(m.restores, objectKey{r.Namespace, r.Name}, finalizing || r.DeletionTimestamp != nil, finalizing)
	if !ok {
		return
	}
	s.ready = conditionTrue(d.Status.Conditions, v1beta2.ConditionReady)
	s.failed = conditionTrue(d.Status.Conditions, v1beta2.ConditionStalled)
}

// heldForHibernation: the EtcdBackup takes no run while its cluster
// hibernates.
func heldForHibernation(conds []v1beta2.ClusterCondition) bool {
	for _, c := range conds {
		if c.Type == v1beta2.ConditionProgressing {
			return c.Reason == etcdbackup.ReasonClusterHibernated
		}
	}
	return false
}

func conditionTrue(conds []v1beta2.ClusterCondition, t v1beta2.ConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// rolloutHalted: an upgrade or the roll of a Pod spec change stopped on a
// member that cannot run.
func rolloutHalted(conds []v1beta2.ClusterCondition) bool {
	for _, c := range conds {
		switch {
		case c.Type == v1beta2.ConditionUpgrading && c.Status == metav1.ConditionTrue && c.Reason == etcdcluster.ReasonUpgradeHalted,
			c.Type == v1beta2.ConditionProgressing && c.Reason == etcdcluster.ReasonRolloutHalted,
			c.Type == v1beta2.ConditionStalled && c.Status == metav1.ConditionTrue && (c.Reason == etcdcluster.ReasonUpgradeHalted || c.Reason == etcdcluster.ReasonRolloutHalted):
			return true
		}
	}
	return false
}

// The series, as the metrics contract names them.
var (
	objectLabels = []string{"namespace", "name"}

	descClusterDesired       = objectDesc("etcd_cluster_desired_members", "Members the EtcdCluster's spec.size asks for.")
	descClusterReady         = objectDesc("etcd_cluster_ready_members", "Members whose Pod is ready, as the last sync saw them.")
	descClusterVoting        = objectDesc("etcd_cluster_voting_members", "Voting members in etcd's member list; absent when the last sync could not read it.")
	descClusterLearners      = objectDesc("etcd_cluster_learners", "Learners in etcd's member list; absent when the last sync could not read it.")
	descClusterQuorum        = objectDesc("etcd_cluster_quorum", "1 when a quorum of the voting members answered the last sync.")
	descClusterHasLeader     = objectDesc("etcd_cluster_has_leader", "1 when the members that answered the last sync knew a leader.")
	descClusterLeaderChanges = objectDesc("etcd_cluster_leader_changes_total", "Times the leader differed from the one this hook replica saw at the cluster's previous sync with a leader.")
	descClusterDBSize        = objectDesc("etcd_cluster_db_size_bytes", "Largest database file among the members that answered the last sync.")
	descClusterDBInUse       = objectDesc("etcd_cluster_db_size_in_use_bytes", "Largest part of a member's database file that holds data (etcd 3.4 and later).")
	descClusterDBQuota       = objectDesc("etcd_cluster_db_quota_bytes", "The database quota the members run with (spec.etcd.quotaBackendBytes or its default).")
	descClusterNoSpace       = objectDesc("etcd_cluster_nospace_alarm", "1 when a member reported the NOSPACE alarm at the last sync.")
	descClusterCorrupt       = objectDesc("etcd_cluster_corrupt_alarm", "1 when a member reported the CORRUPT alarm at the last sync.")
	descClusterLastBackup    = objectDesc("etcd_cluster_last_backup_timestamp_seconds", "Time of the newest backup known for the cluster (status.newestBackup).")
	descClusterBackupAge     = objectDesc("etcd_cluster_backup_age_seconds", "Seconds since the newest backup known for the cluster, at scrape time.")
	descClusterLastSync      = objectDesc("etcd_cluster_last_sync_timestamp_seconds", "Time of the last sync this hook replica answered for the cluster.")
	descClusterReadyCond     = objectDesc("etcd_cluster_ready", "1 when the Ready condition is True: the cluster matches its spec.")
	descClusterReconciling   = objectDesc("etcd_cluster_reconciling", "1 when the Reconciling condition is True: the hook is moving the cluster toward its spec.")
	descClusterStalled       = objectDesc("etcd_cluster_stalled", "1 when the Stalled condition is True: the hook cannot go on without a person.")
	descClusterHibernated    = objectDesc("etcd_cluster_hibernated", "1 when the cluster is hibernated (spec.hibernated, and no member Pod left): its member alerts have no target, and it is Ready.")
	descClusterRolloutHalted = objectDesc("etcd_cluster_rollout_halted", "1 when an upgrade (UpgradeHalted) or the roll of a spec change (RolloutHalted) stopped on a member that cannot run.")
	descClusterCertExpiry    = objectDesc("etcd_cluster_certificate_expiry_timestamp_seconds", "Earliest expiry among the cluster's certificates (status.TLS); absent without spec.TLS.")
	descClusterCertRenewal   = objectDesc("etcd_cluster_certificate_renewal_timestamp_seconds", "Earliest moment the hook renews one of the cluster's certificates (spec.TLS.auto); absent when the user renews them.")

	descBackupLastSuccess = objectDesc("etcd_backup_last_success_timestamp_seconds", "Time the EtcdBackup last stored a backup.")
	descBackupAge         = objectDesc("etcd_backup_age_seconds", "Seconds since the EtcdBackup last stored a backup, at scrape time.")
	descBackupInterval    = objectDesc("etcd_backup_interval_seconds", "The EtcdBackup's spec.backupPolicy.backupIntervalInSecond; absent for a one-shot backup, and while its cluster hibernates.")
	descBackupReady       = objectDesc("etcd_backup_ready", "1 when the EtcdBackup's Ready condition is True: its last run succeeded.")
	descBackupStalled     = objectDesc("etcd_backup_stalled", "1 when the EtcdBackup's Stalled condition is True: its runs cannot succeed without a person.")

	descRestoreReady  = objectDesc("etcd_restore_ready", "1 when the EtcdRestore's Ready condition is True: the cluster runs on the restored data.")
	descRestoreFailed = objectDesc("etcd_restore_failed", "1 when the EtcdRestore will not be carried out: the backup was unusable, or the request refused or invalid.")
)

func objectDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, objectLabels, nil)
}

// Describe implements prometheus.Collector.
func (m *objectMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descClusterDesired, descClusterReady, descClusterVoting, descClusterLearners, descClusterQuorum, descClusterHasLeader,
		descClusterLeaderChanges, descClusterDBSize, descClusterDBInUse, descClusterDBQuota, descClusterNoSpace, descClusterCorrupt,
		descClusterLastBackup, descClusterBackupAge, descClusterLastSync, descClusterReadyCond, descClusterReconciling, descClusterHibernated,
		descClusterStalled, descClusterRolloutHalted, descClusterCertExpiry, descClusterCertRenewal,
		descBackupLastSuccess, descBackupAge, descBackupInterval, descBackupReady, descBackupStalled,
		descRestoreReady, descRestoreFailed,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *objectMetrics) Collect(ch chan<- prometheus.Metric) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, s := range m.clusters {
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, k.namespace, k.name)
		}
		gauge(descClusterDesired, s.desired)
		gauge(descClusterReady, s.readyMembers)
		gauge(descClusterDBQuota, s.quota)
		gauge(descClusterQuorum, boolValue(s.quorum))
		gauge(descClusterHasLeader, boolValue(s.hasLeader))
		ch <- prometheus.MustNewConstMetric(descClusterLeaderChanges, prometheus.CounterValue, s.leaderChanges, k.namespace, k.name)
		if s.membership {
			gauge(descClusterVoting, s.voting)
			gauge(descClusterLearners, s.learners)
			gauge(descClusterNoSpace, boolValue(s.nospace))
			gauge(descClusterCorrupt, boolValue(s.corrupt))
		}
		if s.dbSize > 0 {
			gauge(descClusterDBSize, s.dbSize)
		}
		if s.dbInUse > 0 {
			gauge(descClusterDBInUse, s.dbInUse)
		}
		if !s.lastBackup.IsZero() {
			gauge(descClusterLastBackup, unixSeconds(s.lastBackup))
			gauge(descClusterBackupAge, now.Sub(s.lastBackup).Seconds())
		}
		gauge(descClusterLastSync, unixSeconds(s.lastSync))
		gauge(descClusterReadyCond, boolValue(s.ready))
		gauge(descClusterHibernated, boolValue(s.hibernated))
		gauge(descClusterReconciling, boolValue(s.reconciling))
		gauge(descClusterStalled, boolValue(s.stalled))
		gauge(descClusterRolloutHalted, boolValue(s.rolloutHalted))
		if !s.certExpiry.IsZero() {
			gauge(descClusterCertExpiry, unixSeconds(s.certExpiry))
		}
		if !s.certRenewal.IsZero() {
			gauge(descClusterCertRenewal, unixSeconds(s.certRenewal))
		}
	}
	for k, s := range m.backups {
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, k.namespace, k.name)
		}
		if !s.lastSuccess.IsZero() {
			gauge(descBackupLastSuccess, unixSeconds(s.lastSuccess))
			gauge(descBackupAge, now.Sub(s.lastSuccess).Seconds())
		}
		if s.interval > 0 {
			gauge(descBackupInterval, s.interval)
		}
		gauge(descBackupReady, boolValue(s.ready))
		gauge(descBackupStalled, boolValue(s.stalled))
	}
	for k, s := range m.restores {
		ch <- prometheus.MustNewConstMetric(descRestoreReady, prometheus.GaugeValue, boolValue(s.ready), k.namespace, k.name)
		ch <- prometheus.MustNewConstMetric(descRestoreFailed, prometheus.GaugeValue, boolValue(s.failed), k.namespace, k.name)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
