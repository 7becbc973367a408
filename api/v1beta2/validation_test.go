package v1beta2

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
