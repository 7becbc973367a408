package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

var metricsNow = time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)

// readyPod is a member Pod the kubelet reports running and ready.
func readyPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Image: "quay.io/coreos/etcd:v3.6.16"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "etcd", Image: "quay.io/coreos/etcd:v3.6.16", Ready: true}}},
	}
}

// runningCluster is EtcdCluster prod/demo of size 3 whose three members
// answer, m1 the leader, with the database sizes and alarms given.
func runningCluster(leader uint64, errors ...string) *etcdcluster.Observed {
	c := &v1beta2.EtcdCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta2.APIVersion, Kind: v1beta2.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "prod", UID: "u-1", Generation: 1},
		Spec:       v1beta2.ClusterSpec{Size: 3, Version: "3.6.16", Etcd: &v1beta2.EtcdSettings{QuotaBackendBytes: 4 << 30}},
		Status:     v1beta2.ClusterStatus{Phase: v1beta2.PhaseRunning},
	}
	// The EtcdBackup that names the cluster, whose newest backup the
	// cluster's status reports.
	nightly := &v1beta2.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "prod"},
		Spec:       v1beta2.BackupSpec{ClusterName: "demo", StorageType: v1beta2.BackupStorageS3, S3: &v1beta2.S3BackupSource{Path: "b/k", AWSSecret: "aws"}},
		Status: v1beta2.BackupStatus{Succeeded: true, LastBackup: &v1beta2.StoredBackup{
			Location: "s3://b/k", Revision: 9, Time: metav1.NewTime(metricsNow.Add(-90 * time.Minute)),
		}},
	}
	o := &etcdcluster.Observed{Cluster: c, Now: metricsNow, Pods: map[string]*corev1.Pod{}, Services: map[string]*corev1.Service{},
		PVCs: map[string]*corev1.PersistentVolumeClaim{}, Backups: map[string]*v1beta2.EtcdBackup{"nightly": nightly}}
	o.Membership = &membership.Membership{LeaderID: leader}
	for i, size := range []int64{300 << 20, 500 << 20, 400 << 20} {
		name := []string{"demo-aaaaa", "demo-bbbbb", "demo-ccccc"}[i]
		o.Pods[name] = readyPod(name)
		o.Membership.Members = append(o.Membership.Members, membership.Member{
			ID: uint64(i + 1), Name: name, PeerURLs: []string{"http://" + name + ".demo.prod.svc:2380"},
			Reachable: true, Version: "3.6.16", RaftIndex: 100, DBSize: size, DBSizeInUse: size / 2,
		})
	}
	o.Membership.Members[2].Errors = errors
	return o
}

func newTestObjects() *objectMetrics {
	return newObjectMetrics(func() time.Time { return metricsNow })
}

// recordPlanned records what the planner answers for o.
func recordPlanned(m *objectMetrics, o *etcdcluster.Observed) etcdcluster.Decision {
	d := etcdcluster.Plan(o)
	m.recordCluster(o, d)
	return d
}

// TestClusterSeries: one sync of a running cluster gives every series of
// the contract, from what etcd and the status said, the ages computed at
// scrape time. A member holds etcd's NOSPACE alarm, which without
// spec.housekeeping needs a person: Stalled.
func TestClusterSeries(t *testing.T) {
	m := newTestObjects()
	nospace := (&pb.AlarmMember{MemberID: 3, Alarm: pb.AlarmType_NOSPACE}).String()
	recordPlanned(m, runningCluster(2, nospace))

	const want = `
# HELP etcd_cluster_backup_age_seconds Seconds since the newest backup known for the cluster, at scrape time.
# TYPE etcd_cluster_backup_age_seconds gauge
etcd_cluster_backup_age_seconds{name="demo",namespace="prod"} 5400
# HELP etcd_cluster_corrupt_alarm 1 when a member reported the CORRUPT alarm at the last sync.
# TYPE etcd_cluster_corrupt_alarm gauge
etcd_cluster_corrupt_alarm{name="demo",namespace="prod"} 0
# HELP etcd_cluster_db_quota_bytes The database quota the members run with (spec.etcd.quotaBackendBytes or its default).
# TYPE etcd_cluster_db_quota_bytes gauge
etcd_cluster_db_quota_bytes{name="demo",namespace="prod"} 4.294967296e+09
# HELP etcd_cluster_db_size_bytes Largest database file among the members that answered the last sync.
# TYPE etcd_cluster_db_size_bytes gauge
etcd_cluster_db_size_bytes{name="demo",namespace="prod"} 5.24288e+08
# HELP etcd_cluster_db_size_in_use_bytes Largest part of a member's database file that holds data (etcd 3.4 and later).
# TYPE etcd_cluster_db_size_in_use_bytes gauge
etcd_cluster_db_size_in_use_bytes{name="demo",namespace="prod"} 2.62144e+08
# HELP etcd_cluster_desired_members Members the EtcdCluster's spec.size asks for.
# TYPE etcd_cluster_desired_members gauge
etcd_cluster_desired_members{name="demo",namespace="prod"} 3
# HELP etcd_cluster_has_leader 1 when the members that answered the last sync knew a leader.
# TYPE etcd_cluster_has_leader gauge
etcd_cluster_has_leader{name="demo",namespace="prod"} 1
# HELP etcd_cluster_hibernated 1 when the cluster is hibernated (spec.hibernated, and no member Pod left): its member alerts have no target, and it is Ready.
# TYPE etcd_cluster_hibernated gauge
etcd_cluster_hibernated{name="demo",namespace="prod"} 0
# HELP etcd_cluster_last_backup_timestamp_seconds Time of the newest backup known for the cluster (status.newestBackup).
# TYPE etcd_cluster_last_backup_timestamp_seconds gauge
etcd_cluster_last_backup_timestamp_seconds{name="demo",namespace="prod"} 1.795329e+09
# HELP etcd_cluster_last_sync_timestamp_seconds Time of the last sync this hook replica answered for the cluster.
# TYPE etcd_cluster_last_sync_timestamp_seconds gauge
etcd_cluster_last_sync_timestamp_seconds{name="demo",namespace="prod"} 1.7953344e+09
# HELP etcd_cluster_leader_changes_total Times the leader differed from the one this hook replica saw at the cluster's previous sync with a leader.
# TYPE etcd_cluster_leader_changes_total counter
etcd_cluster_leader_changes_total{name="demo",namespace="prod"} 0
# HELP etcd_cluster_learners Learners in etcd's member list; absent when the last sync could not read it.
# TYPE etcd_cluster_learners gauge
etcd_cluster_learners{name="demo",namespace="prod"} 0
# HELP etcd_cluster_nospace_alarm 1 when a member reported the NOSPACE alarm at the last sync.
# TYPE etcd_cluster_nospace_alarm gauge
etcd_cluster_nospace_alarm{name="demo",namespace="prod"} 1
# HELP etcd_cluster_quorum 1 when a quorum of the voting members answered the last sync.
# TYPE etcd_cluster_quorum gauge
etcd_cluster_quorum{name="demo",namespace="prod"} 1
# HELP etcd_cluster_ready 1 when the Ready condition is True: the cluster matches its spec.
# TYPE etcd_cluster_ready gauge
etcd_cluster_ready{name="demo",namespace="prod"} 0
# HELP etcd_cluster_ready_members Members whose Pod is ready, as the last sync saw them.
# TYPE etcd_cluster_ready_members gauge
etcd_cluster_ready_members{name="demo",namespace="prod"} 3
# HELP etcd_cluster_reconciling 1 when the Reconciling condition is True: the hook is moving the cluster toward its spec.
# TYPE etcd_cluster_reconciling gauge
etcd_cluster_reconciling{name="demo",namespace="prod"} 0
# HELP etcd_cluster_rollout_halted 1 when an upgrade (UpgradeHalted) or the roll of a spec change (RolloutHalted) stopped on a member that cannot run.
# TYPE etcd_cluster_rollout_halted gauge
etcd_cluster_rollout_halted{name="demo",namespace="prod"} 0
# HELP etcd_cluster_stalled 1 when the Stalled condition is True: the hook cannot go on without a person.
# TYPE etcd_cluster_stalled gauge
etcd_cluster_stalled{name="demo",namespace="prod"} 1
# HELP etcd_cluster_voting_members Voting members in etcd's member list; absent when the last sync could not read it.
# TYPE etcd_cluster_voting_members gauge
etcd_cluster_voting_members{name="demo",namespace="prod"} 3
`
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestClusterSeriesFollowTheSync: a later sync replaces what an earlier
// one said; what etcd did not say is absent, not zero; the alarm string
// is the one etcd puts in StatusResponse.errors.
func TestClusterSeriesFollowTheSync(t *testing.T) {
	m := newTestObjects()
	recordPlanned(m, runningCluster(2))

	scaling := runningCluster(2)
	scaling.Cluster.Spec.Size = 5
	recordPlanned(m, scaling)
	for name, want := range map[string]float64{
		"etcd_cluster_desired_members": 5, "etcd_cluster_ready": 0, "etcd_cluster_reconciling": 1, "etcd_cluster_stalled": 0,
		"etcd_cluster_corrupt_alarm": 0,
	} {
		if got := seriesValue(t, m, name); got != want {
			t.Errorf("scaling: %s = %v, want %v", name, got, want)
		}
	}

	corrupt := runningCluster(2, (&pb.AlarmMember{MemberID: 3, Alarm: pb.AlarmType_CORRUPT}).String())
	recordPlanned(m, corrupt)
	for name, want := range map[string]float64{
		"etcd_cluster_desired_members": 3, "etcd_cluster_ready": 0, "etcd_cluster_reconciling": 0, "etcd_cluster_stalled": 1,
		"etcd_cluster_corrupt_alarm": 1, "etcd_cluster_nospace_alarm": 0,
	} {
		if got := seriesValue(t, m, name); got != want {
			t.Errorf("CORRUPT: %s = %v, want %v", name, got, want)
		}
	}

	unread := runningCluster(2)
	unread.Membership, unread.MembershipError = nil, "context deadline exceeded"
	recordPlanned(m, unread)
	for _, name := range []string{"etcd_cluster_voting_members", "etcd_cluster_learners", "etcd_cluster_db_size_bytes", "etcd_cluster_nospace_alarm"} {
		if n := testutil.CollectAndCount(m, name); n != 0 {
			t.Errorf("%s: %d series after a sync that could not read etcd, want none", name, n)
		}
	}
	if got := seriesValue(t, m, "etcd_cluster_quorum"); got != 0 {
		t.Errorf("etcd_cluster_quorum = %v after a sync that could not read etcd, want 0", got)
	}
}

// TestLeaderChanges counts a leader that differs from the one the
// previous sync with a leader saw; a sync without one counts nothing.
func TestLeaderChanges(t *testing.T) {
	m := newTestObjects()
	for _, leader := range []uint64{1, 1, 0, 2, 2, 0, 2, 3, 1} {
		o := runningCluster(leader)
		if leader == 0 {
			o.Membership.Stale = true
		}
		recordPlanned(m, o)
	}
	// 1→2, 2→3, 3→1; the elections without a leader in between count
	// only if they end with another leader.
	if got := seriesValue(t, m, "etcd_cluster_leader_changes_total"); got != 3 {
		t.Errorf("etcd_cluster_leader_changes_total = %v, want 3", got)
	}
}

// TestClusterSeriesGoWithTheCluster: a finalize answer that is not done
// keeps the series, one that says finalized drops them, and a late sync
// of the deleted cluster does not bring them back.
func TestClusterSeriesGoWithTheCluster(t *testing.T) {
	m := newTestObjects()
	recordPlanned(m, runningCluster(1))
	other := runningCluster(1)
	other.Cluster.Name = "other"
	recordPlanned(m, other)

	deleting := runningCluster(1)
	deleting.Cluster.DeletionTimestamp = &metav1.Time{Time: metricsNow}
	deleting.Finalizing = true
	m.recordCluster(deleting, etcdcluster.Decision{Finalized: false, Status: deleting.Cluster.Status})
	if got := countFor(t, m, "demo"); got == 0 {
		t.Fatal("the series went before the finalize answer said finalized")
	}
	m.recordCluster(deleting, etcdcluster.Decision{Finalized: true})
	if got := countFor(t, m, "demo"); got != 0 {
		t.Errorf("%d series of demo after it was finalized, want none", got)
	}
	late := runningCluster(1)
	late.Cluster.DeletionTimestamp = &metav1.Time{Time: metricsNow}
	recordPlanned(m, late)
	if got := countFor(t, m, "demo"); got != 0 {
		t.Errorf("a late sync of the deleted cluster brought back %d series", got)
	}
	if got := countFor(t, m, "other"); got == 0 {
		t.Error("another cluster's series went too")
	}
}

// TestBackupAndRestoreSeries drives the EtcdBackup and EtcdRestore routes
// of the real router, scrapes /metrics, and deletes both objects through
// their finalize routes.
func TestBackupAndRestoreSeries(t *testing.T) {
	registry := prometheus.NewRegistry()
	met := newMetrics(registry)
	met.objects.now = func() time.Time { return metricsNow }
	ready := &readiness{}
	ready.set(true)
	srv := httptest.NewServer(newRouter(staticSyncer{}, hooks.BackupConfig{AgentImage: "test", Now: func() time.Time { return metricsNow }},
		met, registry, slog.New(slog.NewTextHandler(io.Discard, nil)), ready, nil))
	defer srv.Close()

	lastSuccess := metricsNow.Add(-2 * time.Hour).Format(time.RFC3339)
	backupBody := `{"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdBackup","metadata":{"name":"nightly","namespace":"prod","uid":"b-1","generation":1},` +
		`"spec":{"clusterName":"demo","storageType":"S3","backupPolicy":{"backupIntervalInSecond":3600},"s3":{"path":"b/k","awsSecret":"aws"}},` +
		`"status":{"succeeded":true,"lastSuccessDate":"` + lastSuccess + `","lastRun":{"name":"nightly-1","generation":1,"start":"` + lastSuccess + `","end":"` + lastSuccess + `","succeeded":true}}},` +
		`"related":{"Secret.v1":{"aws":{"apiVersion":"v1","kind":"Secret","metadata":{"name":"aws","namespace":"prod"},"data":{"credentials":"W2RlZmF1bHRdCg=="}}},` +
		`"EtcdCluster.etcd.database.coreos.com/v1beta2":{"demo":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdCluster","metadata":{"name":"demo","namespace":"prod"},"spec":{"size":3}}}}}`
	restoreBody := `{"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdRestore","metadata":{"name":"demo","namespace":"prod","uid":"r-1"},` +
		`"spec":{"etcdCluster":{"name":"other"},"backupStorageType":"S3","s3":{"path":"b/k","awsSecret":"aws"}}},"related":{}}`
	postJSON(t, srv.URL+"/backup/sync", backupBody)
	postJSON(t, srv.URL+"/restore/sync", restoreBody)

	scrape := getBody(t, srv.URL+"/metrics")
	for _, line := range []string{
		`etcd_backup_age_seconds{name="nightly",namespace="prod"} 7200`,
		`etcd_backup_interval_seconds{name="nightly",namespace="prod"} 3600`,
		`etcd_backup_ready{name="nightly",namespace="prod"} 1`,
		`etcd_backup_stalled{name="nightly",namespace="prod"} 0`,
		// Its name differs from the cluster's: refused, for good.
		`etcd_restore_failed{name="demo",namespace="prod"} 1`,
		`etcd_restore_ready{name="demo",namespace="prod"} 0`,
	} {
		if !strings.Contains(scrape, line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}

	// Its cluster hibernates: no run is due, so no interval for the
	// too-old alert to measure against.
	postJSON(t, srv.URL+"/backup/sync", strings.Replace(backupBody, `"spec":{"size":3}`, `"spec":{"size":3,"hibernated":true}`, 1))
	if scrape := getBody(t, srv.URL+"/metrics"); strings.Contains(scrape, "\netcd_backup_interval_seconds{") || !strings.Contains(scrape, "\netcd_backup_age_seconds{") {
		t.Errorf("while the cluster hibernates: want etcd_backup_age_seconds and no etcd_backup_interval_seconds; /metrics has:\n%s", scrape)
	}

	postJSON(t, srv.URL+"/backup/finalize", strings.Replace(backupBody, `"generation":1},`, `"generation":1,"deletionTimestamp":"`+metricsNow.Format(time.RFC3339)+`"},`, 1))
	postJSON(t, srv.URL+"/restore/finalize", strings.Replace(restoreBody, `"related":{}`, `"related":{},"finalizing":true`, 1))
	scrape = getBody(t, srv.URL+"/metrics")
	for _, prefix := range []string{"etcd_backup_", "etcd_restore_"} {
		if strings.Contains(scrape, "\n"+prefix) {
			t.Errorf("/metrics still has %s series after the finalize answers", prefix)
		}
	}
}

func postJSON(t *testing.T, url, body string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: HTTP %d %s", url, resp.StatusCode, b)
	}
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// seriesValue is the value of the one series of name.
func seriesValue(t *testing.T, m *objectMetrics, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		if len(f.Metric) != 1 {
			t.Fatalf("%s: %d series, want 1", name, len(f.Metric))
		}
		if g := f.Metric[0].GetGauge(); g != nil {
			return g.GetValue()
		}
		return f.Metric[0].GetCounter().GetValue()
	}
	t.Fatalf("no series %s", name)
	return 0
}

// countFor counts the series of the cluster named name.
func countFor(t *testing.T, m *objectMetrics, name string) int {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		for _, s := range f.Metric {
			for _, l := range s.Label {
				if l.GetName() == "name" && l.GetValue() == name {
					n++
				}
			}
		}
	}
	return n
}

// TestCertificateSeries: the earliest expiry of status.TLS, and the
// earliest renewal the hook will make; a cluster whose certificates the
// user renews has no renewal series, which is what the alert on them
// tells by.
func TestCertificateSeries(t *testing.T) {
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: metricsNow.Add(d)} }
	tests := []struct {
		name, reason string
		tls          *v1beta2.TLSStatus
		want         string
	}{
		{"auto", "the hook renews: both series", &v1beta2.TLSStatus{Certificates: []v1beta2.CertificateStatus{
			{Name: "peer-ca", NotAfter: *at(48 * time.Hour), RenewAt: at(24 * time.Hour)},
			{Name: "peer", NotAfter: *at(10 * time.Hour), RenewAt: at(5 * time.Hour)},
		}}, `
# HELP etcd_cluster_certificate_expiry_timestamp_seconds Earliest expiry among the cluster's certificates (status.TLS); absent without spec.TLS.
# TYPE etcd_cluster_certificate_expiry_timestamp_seconds gauge
etcd_cluster_certificate_expiry_timestamp_seconds{name="demo",namespace="prod"} 1.795370400e+09
# HELP etcd_cluster_certificate_renewal_timestamp_seconds Earliest moment the hook renews one of the cluster's certificates (spec.TLS.auto); absent when the user renews them.
# TYPE etcd_cluster_certificate_renewal_timestamp_seconds gauge
etcd_cluster_certificate_renewal_timestamp_seconds{name="demo",namespace="prod"} 1.795352400e+09
`},
		{"static", "the user renews: no renewal series", &v1beta2.TLSStatus{Certificates: []v1beta2.CertificateStatus{
			{Name: "server", NotAfter: *at(10 * time.Hour)},
		}}, `
# HELP etcd_cluster_certificate_expiry_timestamp_seconds Earliest expiry among the cluster's certificates (status.TLS); absent without spec.TLS.
# TYPE etcd_cluster_certificate_expiry_timestamp_seconds gauge
etcd_cluster_certificate_expiry_timestamp_seconds{name="demo",namespace="prod"} 1.795370400e+09
`},
		{"plain", "no TLS: no series", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newTestObjects()
			o := runningCluster(2)
			m.recordCluster(o, etcdcluster.Decision{Status: v1beta2.ClusterStatus{TLS: tt.tls}})
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(m)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tt.want),
				"etcd_cluster_certificate_expiry_timestamp_seconds", "etcd_cluster_certificate_renewal_timestamp_seconds"); err != nil {
				t.Errorf("%s: %v", tt.reason, err)
			}
		})
	}
}
