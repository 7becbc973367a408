// The examples under manifests/examples: every one is an object the API
// accepts, and the CoreOS ones are exactly the CoreOS operator's.

package manifests_test

import (
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// TestExamples checks that the examples are EtcdClusters the API accepts,
// and that the CoreOS seed example is exactly the seed.
func TestExamples(t *testing.T) {
	want := map[string]struct {
		name, version string
		size          int
	}{
		"example-etcd-cluster.yaml":       {"example-etcd-cluster", "3.2.13", 3},
		"example-tls-cluster.yaml":        {"example", "3.2.13", 3},
		"example-auto-tls-cluster.yaml":   {"example-auto-tls", "", 3},
		"example-auth-cluster.yaml":       {"example-auth", "", 3},
		"example-pod-policy.yaml":         {"example-pod-policy", "3.7.3", 3},
		"example-persistent-cluster.yaml": {"example-persistent-cluster", "3.7.3", 3},
		"example-etcd-settings.yaml":      {"example-etcd-settings", "3.7.3", 3},
	}
	paths, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range paths {
		base := filepath.Base(p)
		seen[base] = true
		docs := readDocuments(t, p)
		if len(docs) != 1 {
			t.Errorf("%s: %d documents, want 1", p, len(docs))
			continue
		}
		d := docs[0]
		if got := d.str("apiVersion"); got != v1beta2.APIVersion {
			t.Errorf("%s: apiVersion %q, want %q", p, got, v1beta2.APIVersion)
		}
		if d.str("kind") == v1beta2.KindBackup {
			checkBackupExample(t, p, d)
			continue
		}
		if d.str("kind") == v1beta2.KindRestore {
			checkRestoreExample(t, p, d)
			continue
		}
		if got := d.str("kind"); got != v1beta2.Kind {
			t.Errorf("%s: kind %q, want %q", p, got, v1beta2.Kind)
		}
		var c v1beta2.EtcdCluster
		if err := decodeStrict(d, &c); err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if c.Spec.Size < v1beta2.MinSize || c.Spec.Size > v1beta2.MaxSize {
			t.Errorf("%s: spec.size %d is outside %d..%d", p, c.Spec.Size, v1beta2.MinSize, v1beta2.MaxSize)
		}
		if w, ok := want[base]; ok {
			if c.Name != w.name || c.Spec.Version != w.version || c.Spec.Size != w.size {
				t.Errorf("%s: name %q, version %q, size %d; want %q, %q, %d",
					p, c.Name, c.Spec.Version, c.Spec.Size, w.name, w.version, w.size)
			}
		}
		if c.Spec.Pod != nil {
			for k := range c.Spec.Pod.Labels {
				if k == "app" || strings.HasPrefix(k, "etcd_") {
					t.Errorf("%s: spec.pod.labels uses the reserved label %q", p, k)
				}
			}
		}
	}
	for base := range want {
		if !seen[base] {
			t.Errorf("examples/%s is missing", base)
		}
	}
	for _, base := range []string{"backup_cr.yaml", "periodic_backup_cr.yaml"} {
		if !seen[base] {
			t.Errorf("examples/%s (the CoreOS backup examples) is missing", base)
		}
	}

	// The seed is the CoreOS operator's own example, unchanged: nothing in
	// spec but size and version.
	seed := readDocuments(t, filepath.Join(examplesDir, "example-etcd-cluster.yaml"))
	if len(seed) == 1 {
		spec, _ := lookup(seed[0].data, "spec").(map[string]any)
		keys := make([]string, 0, len(spec))
		for k := range spec {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if diff := cmp.Diff([]string{"size", "version"}, keys); diff != "" {
			t.Errorf("example-etcd-cluster.yaml: spec fields (-want +got):\n%s", diff)
		}
	}
}

// checkBackupExample: an EtcdBackup example decodes strictly, passes the
// hook's validation, and uses the CoreOS operator's fields only.
func checkBackupExample(t *testing.T, p string, d document) {
	t.Helper()
	var b v1beta2.EtcdBackup
	if err := decodeStrict(d, &b); err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	if errs := b.Validate(); len(errs) > 0 {
		t.Errorf("%s: %v", p, errs.ToAggregate())
	}
	if base := filepath.Base(p); base != "backup_cr.yaml" && base != "periodic_backup_cr.yaml" {
		// This project's own examples (a continuous backup) use its fields.
		return
	}
	spec, _ := lookup(d.data, "spec").(map[string]any)
	for k := range spec {
		if !slices.Contains([]string{"etcdEndpoints", "storageType", "backupPolicy", "s3"}, k) {
			t.Errorf("%s: spec.%s is not a field of the CoreOS example", p, k)
		}
	}
}

// checkRestoreExample: the CoreOS restore_cr.yaml decodes, and, with its
// placeholders filled in, is a valid request named after its cluster.
func checkRestoreExample(t *testing.T, p string, d document) {
	t.Helper()
	var r v1beta2.EtcdRestore
	if err := decodeStrict(d, &r); err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	switch {
	case r.Spec.Backup != nil:
		// A restore from an EtcdBackup by name: no placeholders.
	case r.Spec.S3 == nil:
		t.Errorf("%s: no spec.s3", p)
		return
	default:
		r.Spec.S3.Path, r.Spec.S3.AWSSecret = "mybucket/etcd.backup", "aws"
	}
	if errs := r.Validate(); len(errs) > 0 {
		t.Errorf("%s: %v", p, errs.ToAggregate())
	}
}
