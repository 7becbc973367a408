package etcdrestore

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

var now = time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)

func request(edit ...func(*v1beta2.EtcdRestore)) *v1beta2.EtcdRestore {
	r := &v1beta2.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "prod", UID: "r-1", Generation: 1},
		Spec: v1beta2.RestoreSpec{EtcdCluster: v1beta2.EtcdClusterRef{Name: "demo"}, BackupStorageType: v1beta2.BackupStorageS3,
			S3: &v1beta2.S3BackupSource{Path: "b/k", AWSSecret: "aws"}},
	}
	for _, e := range edit {
		e(r)
	}
	return r
}

func cluster(restore *v1beta2.ClusterRestoreStatus) *v1beta2.EtcdCluster {
	return &v1beta2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "prod", UID: "c-1"},
		Status: v1beta2.ClusterStatus{Restore: restore}}
}

// committed gives the cluster a bootstrap record of request r-1's restore.
func committed(c *v1beta2.EtcdCluster) *v1beta2.EtcdCluster {
	c.Status.Bootstrap = &v1beta2.BootstrapStatus{SeedMember: "demo-abcde", Bootstrapped: true,
		Restore: &v1beta2.RestoreRecord{Request: "EtcdRestore/r-1", Source: v1beta2.ResolvedSource{S3: &v1beta2.S3BackupSource{Path: "b/k", AWSSecret: "aws"}}}}
	return c
}

var awsSecret = map[string]*corev1.Secret{"aws": {Data: map[string][]byte{"credentials": []byte("[default]\n")}}}

type outcome struct {
	Succeeded bool
	Phase     v1beta2.RestorePhase
	Reason    string // the condition's
	Status    metav1.ConditionStatus
}

func TestPlan(t *testing.T) {
	cases := []struct {
		name, reason string
		o            Observed
		want         outcome
	}{
		{"pending", "a valid request waits for its cluster to take it up",
			Observed{Restore: request(), Clusters: map[string]*v1beta2.EtcdCluster{"demo": cluster(nil)}, Secrets: awsSecret},
			outcome{Reason: ReasonPending, Status: metav1.ConditionUnknown}},
		{"no cluster", "an EtcdRestore naming no EtcdCluster says so",
			Observed{Restore: request(), Secrets: awsSecret},
			outcome{Reason: ReasonClusterNotFound, Status: metav1.ConditionUnknown}},
		{"name differs", "the CoreOS rule: named after its cluster",
			Observed{Restore: request(), SpecErrors: request(func(r *v1beta2.EtcdRestore) { r.Spec.EtcdCluster.Name = "x" }).Validate()},
			outcome{Phase: v1beta2.RestoreRefused, Reason: ReasonInvalidSpec, Status: metav1.ConditionFalse}},
		{"no secret", "a missing Secret is named before the cluster tries",
			Observed{Restore: request(), Clusters: map[string]*v1beta2.EtcdCluster{"demo": cluster(nil)}},
			outcome{Reason: ReasonSecretInvalid, Status: metav1.ConditionUnknown}},
		{"failed", "the cluster's failure is the request's",
			Observed{Restore: request(), Clusters: map[string]*v1beta2.EtcdCluster{"demo": cluster(&v1beta2.ClusterRestoreStatus{Request: "EtcdRestore/r-1", Phase: v1beta2.RestoreFailed, Message: "sha256 mismatch"})}},
			outcome{Phase: v1beta2.RestoreFailed, Reason: "Failed", Status: metav1.ConditionFalse}},
		{"completed", "succeeded once the cluster runs on the restored data",
			Observed{Restore: request(), Clusters: map[string]*v1beta2.EtcdCluster{"demo": cluster(&v1beta2.ClusterRestoreStatus{Request: "EtcdRestore/r-1", Phase: v1beta2.RestoreCompleted})}},
			outcome{Succeeded: true, Phase: v1beta2.RestoreCompleted, Reason: ReasonCompleted, Status: metav1.ConditionTrue}},
		{"verifying after the commit", "a cluster status that still says Verifying (written by an earlier hook release over the commit) is outranked by the bootstrap record: the restore is under way, not being verified",
			Observed{Restore: request(), Clusters: map[string]*v1beta2.EtcdCluster{"demo": committed(cluster(&v1beta2.ClusterRestoreStatus{Request: "EtcdRestore/r-1", Phase: v1beta2.RestoreVerifying}))}},
			outcome{Phase: v1beta2.RestoreRestoring, Reason: string(v1beta2.RestoreRestoring), Status: metav1.ConditionUnknown}},
		{"committed, status moved on", "the record names this request while status.restore reports a later one: done",
			Observed{Restore: request(), Clusters: map[string]*v1beta2.EtcdCluster{"demo": committed(cluster(&v1beta2.ClusterRestoreStatus{Request: "EtcdRestore/later", Phase: v1beta2.RestoreRefused}))}},
			outcome{Succeeded: true, Phase: v1beta2.RestoreCompleted, Reason: ReasonCompleted, Status: metav1.ConditionTrue}},
		{"another request", "the cluster reporting another request's restore says nothing of this one",
			Observed{Restore: request(), Clusters: map[string]*v1beta2.EtcdCluster{"demo": cluster(&v1beta2.ClusterRestoreStatus{Request: "EtcdRestore/other", Phase: v1beta2.RestoreCompleted})}, Secrets: awsSecret},
			outcome{Reason: ReasonPending, Status: metav1.ConditionUnknown}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Now = now
			d := Plan(&tc.o)
			got := outcome{Succeeded: d.Status.Succeeded, Phase: d.Status.Phase}
			for _, c := range d.Status.Conditions {
				if c.Type == ConditionSucceeded {
					got.Reason, got.Status = c.Reason, c.Status
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
			if !d.Status.Succeeded && d.Status.Reason == "" {
				t.Errorf("%s: not succeeded, and no reason", tc.reason)
			}
		})
	}
}
