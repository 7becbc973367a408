package v1beta2

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidate(t *testing.T) {
	valid := func() *EtcdCluster {
		return &EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "example-etcd-cluster"}, Spec: ClusterSpec{Size: 3, Version: "3.2.13"}}
	}
	tests := []struct {
		name   string
		reason string
		mutate func(*EtcdCluster)
		want   []string
	}{
		{"the CoreOS seed", "the seed manifest must apply unchanged", func(*EtcdCluster) {}, nil},
		{"no version", "the default applies", func(c *EtcdCluster) { c.Spec.Version = "" }, nil},
		{"leading v", "the CoreOS operator trimmed it", func(c *EtcdCluster) { c.Spec.Version = "v3.6.16" }, nil},
		{"size zero", "", func(c *EtcdCluster) { c.Spec.Size = 0 }, []string{"spec.size: Invalid value: 0: must be between 1 and 7"}},
		{"size eight", "", func(c *EtcdCluster) { c.Spec.Size = 8 }, []string{"spec.size: Invalid value: 8: must be between 1 and 7"}},
		{"version not semver", "", func(c *EtcdCluster) { c.Spec.Version = "latest" }, []string{`spec.version: Invalid value: "latest": must be a semantic version such as "3.7.3"`}},
		{"reserved label", "", func(c *EtcdCluster) { c.Spec.Pod = &PodPolicy{Labels: map[string]string{"etcd_node": "x"}} },
			[]string{`spec.pod.labels[etcd_node]: Invalid value: "etcd_node": "app" and "etcd.database.coreos.com/serving" and labels starting with "etcd_" are reserved for the hook`}},
		{"auto TLS with defaults", "spec.TLS.auto: {} is the one line", func(c *EtcdCluster) { c.Spec.TLS = &TLSPolicy{Auto: &AutoTLS{}} }, nil},
		{"auto TLS of five minutes", "rotation must be testable", func(c *EtcdCluster) {
			c.Spec.TLS = &TLSPolicy{Auto: &AutoTLS{Validity: &metav1.Duration{Duration: 5 * time.Minute}}}
		}, nil},
		{"auto TLS too short", "", func(c *EtcdCluster) {
			c.Spec.TLS = &TLSPolicy{Auto: &AutoTLS{Validity: &metav1.Duration{Duration: 4 * time.Minute}}}
		}, []string{`spec.TLS.auto.validity: Invalid value: "4m0s": at least 5m0s`}},
		{"renewal not before expiry", "a certificate renewed no earlier than it expires is never renewed in time", func(c *EtcdCluster) {
			c.Spec.TLS = &TLSPolicy{Auto: &AutoTLS{Validity: &metav1.Duration{Duration: 6 * time.Minute}, RenewBefore: &metav1.Duration{Duration: 6 * time.Minute}}}
		}, []string{`spec.TLS.auto.renewBefore: Invalid value: "6m0s": at least 1m0s, and shorter than validity (6m0s)`}},
		{"static and auto", "two issuers for one cluster", func(c *EtcdCluster) {
			c.Spec.TLS = &TLSPolicy{Auto: &AutoTLS{}, Static: &StaticTLS{Member: &MemberSecret{PeerSecret: "p"}}}
		}, []string{"spec.TLS.auto: Forbidden: static and auto cannot be combined: static names Secrets you issue, auto has the hook issue them"}},
		{"strict spread", "the default placement, required", func(c *EtcdCluster) { c.Spec.Pod = &PodPolicy{Spread: SpreadStrict} }, nil},
		{"spread unknown", "", func(c *EtcdCluster) { c.Spec.Pod = &PodPolicy{Spread: "zones"} },
			[]string{`spec.pod.spread: Unsupported value: "zones": supported values: "preferred", "strict"`}},
		{"spread with own constraints", "spread shapes only the default, which the user's constraints replace", func(c *EtcdCluster) {
			c.Spec.Pod = &PodPolicy{Spread: SpreadStrict, TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: LabelHostname}}}
		}, []string{`spec.pod.spread: Invalid value: "strict": spec.pod.spread shapes the default placement, which spec.pod.affinity and spec.pod.topologySpreadConstraints replace: set whenUnsatisfiable in your own constraints instead`}},
		{"name too long", "the client Service <name>-client must fit 63 characters", func(c *EtcdCluster) { c.Name = strings.Repeat("a", 57) },
			[]string{"metadata.name: Too long: may not be more than 56 bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mutate(c)
			var got []string
			for _, e := range c.Validate() {
				got = append(got, e.Error())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s\nValidate() (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	got := ClusterSpec{Size: 3, Version: "v3.5.35"}.WithDefaults()
	if got.Image() != "quay.io/coreos/etcd:v3.5.35" {
		t.Errorf("Image() = %q", got.Image())
	}
	if d := (ClusterSpec{Size: 1}).WithDefaults(); d.Version != DefaultVersion || d.Repository != DefaultRepository {
		t.Errorf("defaults not applied: %+v", d)
	}
}

func TestAutoTLSDurations(t *testing.T) {
	d := func(s string) *metav1.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return &metav1.Duration{Duration: v}
	}
	tests := []struct {
		name, reason                  string
		auto                          *AutoTLS
		validity, renewBefore, caLife time.Duration
	}{
		{"defaults", "a year, renewed a month ahead", &AutoTLS{}, 8760 * time.Hour, 720 * time.Hour, 17520 * time.Hour},
		{"short validity", "a third of the validity when 720h would not fit", &AutoTLS{Validity: d("6m")}, 6 * time.Minute, 2 * time.Minute, 12 * time.Minute},
		{"both set", "", &AutoTLS{Validity: d("6m"), RenewBefore: d("4m")}, 6 * time.Minute, 4 * time.Minute, 12 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := []time.Duration{tt.auto.LeafValidity(), tt.auto.RenewalLead(), tt.auto.CAValidity()}
			if diff := cmp.Diff([]time.Duration{tt.validity, tt.renewBefore, tt.caLife}, got); diff != "" {
				t.Errorf("%s: validity, renewBefore, CA validity (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}
