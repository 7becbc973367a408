package etcdrestore

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/gitopstest"
)

func TestHealth(t *testing.T) {
	var (
		healthy     = gitopstest.Verdict{KStatus: "Current", Flux: "Current", ArgoCD: "Healthy"}
		progressing = gitopstest.Verdict{KStatus: "InProgress", Flux: "InProgress", ArgoCD: "Progressing"}
		degraded    = gitopstest.Verdict{KStatus: "Failed", Flux: "Failed", ArgoCD: "Degraded"}
	)
	clusterSays := func(phase v1beta2.RestorePhase) map[string]*v1beta2.EtcdCluster {
		return map[string]*v1beta2.EtcdCluster{"demo": cluster(&v1beta2.ClusterRestoreStatus{Request: "EtcdRestore/r-1", Phase: phase, Message: "as the cluster says"})}
	}
	type restoreHealth struct {
		Tools                       gitopstest.Verdict
		Ready, Reconciling, Stalled string
	}
	tests := []struct {
		name   string
		reason string
		o      Observed
		want   restoreHealth
	}{
		{"pending", "the cluster takes the request up at its next sync",
			Observed{Restore: request(), Clusters: map[string]*v1beta2.EtcdCluster{"demo": cluster(nil)}, Secrets: awsSecret},
			restoreHealth{progressing, "False/Pending", "True/Pending", "False/AsExpected"}},
		{"verifying", "", Observed{Restore: request(), Clusters: clusterSays(v1beta2.RestoreVerifying)},
			restoreHealth{progressing, "False/Verifying", "True/Verifying", "False/AsExpected"}},
		{"restoring", "", Observed{Restore: request(), Clusters: clusterSays(v1beta2.RestoreRestoring)},
			restoreHealth{progressing, "False/Restoring", "True/Restoring", "False/AsExpected"}},
		{"completed", "", Observed{Restore: request(), Clusters: clusterSays(v1beta2.RestoreCompleted)},
			restoreHealth{healthy, "True/Completed", "False/Completed", "False/AsExpected"}},
		{"failed", "the backup was unusable: never retried, a person must act", Observed{Restore: request(), Clusters: clusterSays(v1beta2.RestoreFailed)},
			restoreHealth{degraded, "False/Failed", "False/Failed", "True/Failed"}},
		{"refused", "", Observed{Restore: request(), Clusters: clusterSays(v1beta2.RestoreRefused)},
			restoreHealth{degraded, "False/Refused", "False/Refused", "True/Refused"}},
		{"invalid", "", Observed{Restore: request(), Clusters: map[string]*v1beta2.EtcdCluster{"demo": cluster(nil)}, SpecErrors: field.ErrorList{field.Required(field.NewPath("spec", "s3"), "")}},
			restoreHealth{degraded, "False/InvalidSpec", "False/InvalidSpec", "True/InvalidSpec"}},
		{"cluster not there yet", "a GitOps tool may apply the EtcdCluster after the EtcdRestore: waited for",
			Observed{Restore: request()},
			restoreHealth{progressing, "False/ClusterNotFound", "False/ClusterNotFound", "False/AsExpected"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Now = now
			d := Plan(&tt.o)
			obj := *tt.o.Restore
			obj.TypeMeta = metav1.TypeMeta{APIVersion: v1beta2.APIVersion, Kind: v1beta2.KindRestore}
			obj.Status = d.Status
			v, err := gitopstest.Judge(obj)
			if err != nil {
				t.Fatal(err)
			}
			got := restoreHealth{Tools: v}
			for _, c := range d.Status.Conditions {
				s := string(c.Status) + "/" + c.Reason
				switch c.Type {
				case v1beta2.ConditionReady:
					got.Ready = s
				case v1beta2.ConditionReconciling:
					got.Reconciling = s
				case v1beta2.ConditionStalled:
					got.Stalled = s
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}
