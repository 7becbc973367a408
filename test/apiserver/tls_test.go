package apiserver

import (
	"encoding/json"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	tlsOverlay         = "manifests/tls"
	certManagerOverlay = "manifests/tls/cert-manager"
	// The host:port of the hook's webhook URLs in the TLS overlays.
	tlsHookHost = "etcd-hook.etcd-hook.svc:443"
)

// certManagerCRDs are what manifests/tls/cert-manager creates besides
// manifests/tls; cert-manager installs them.
var certManagerCRDs = []string{"certificates.cert-manager.io", "issuers.cert-manager.io"}

// testTLSOverlays switches the install to HTTPS with manifests/tls, client-
// side and server-side with strict field validation and no warning: the
// CompositeControllers' https webhooks and endpointConfigs with a caBundle
// are accepted by Metacontroller's real schema and stored as written. Then
// it applies the plain HTTP opt-out (manifests/plain-http), which takes
// the install to plain HTTP with nothing of HTTPS left over, and
// manifests/ again, the HTTPS default, so that steps after this one see
// what Install made.
func testTLSOverlays(t *testing.T, k *kube) {
	t.Run("tls", func(t *testing.T) {
		noWarnings(t, k.mustKubectl(t, "", "apply", "--validate=strict", "-k", tlsOverlay))
		if r := k.kubectl(t, "", "diff", "-k", tlsOverlay); r.code != 0 || r.stdout != "" {
			t.Errorf("drift right after a client-side apply -k %s:\n%s", tlsOverlay, r)
		}
		noWarnings(t, k.mustKubectl(t, "", "apply", "--server-side", "--validate=strict", "-k", tlsOverlay))
		if r := k.kubectl(t, "", "diff", "--server-side", "-k", tlsOverlay); r.code != 0 || r.stdout != "" {
			t.Errorf("drift right after a server-side apply -k %s:\n%s", tlsOverlay, r)
		}
		checkTLSControllers(t, k, tlsOverlay)
	})

	t.Run("cert-manager", func(t *testing.T) {
		for _, crd := range certManagerCRDs {
			if r := k.kubectl(t, "", "get", "crd", crd, "-o", "name"); r.code != 0 {
				t.Skipf("cert-manager's CRD %s is not installed in this API server, so %s cannot be applied; "+
					"manifests/tls_test.go checks what it renders", crd, certManagerOverlay)
			}
		}
		noWarnings(t, k.mustKubectl(t, "", "apply", "--server-side", "--validate=strict", "-k", certManagerOverlay))
		checkTLSControllers(t, k, certManagerOverlay)
	})

	t.Run("the plain HTTP opt-out", func(t *testing.T) {
		const plain = "manifests/plain-http"
		noWarnings(t, k.mustKubectl(t, "", "apply", "--validate=strict", "-k", plain))
		k.mustKubectl(t, "", "apply", "--server-side", "--validate=strict", "-k", plain)
		for _, args := range [][]string{{"diff", "-k", plain}, {"diff", "--server-side", "-k", plain}} {
			if r := k.kubectl(t, "", args...); r.code != 0 || r.stdout != "" {
				t.Errorf("drift after applying %s over %s:\n%s", plain, tlsOverlay, r)
			}
		}
		var live map[string]any
		unmarshal(t, k.mustKubectl(t, "", "get", metacontrolCR, "-o", "json").stdout, &live)
		if got := lookupPath(live, ".spec.endpointConfigs"); got != nil {
			t.Errorf("spec.endpointConfigs %s left over after applying %s", jsonString(t, got), plain)
		}
		if url, _ := lookupPath(live, ".spec.hooks.sync.webhook.url").(string); !strings.HasPrefix(url, "http://") {
			t.Errorf("%s: the sync webhook is %q, want plain http", plain, url)
		}
	})

	t.Run("back to the HTTPS default", func(t *testing.T) {
		noWarnings(t, k.mustKubectl(t, "", "apply", "--validate=strict", "-k", "manifests/"))
		k.mustKubectl(t, "", "apply", "--server-side", "--validate=strict", "-k", "manifests/")
		for _, args := range [][]string{{"diff", "-k", "manifests/"}, {"diff", "--server-side", "-k", "manifests/"}} {
			if r := k.kubectl(t, "", args...); r.code != 0 || r.stdout != "" {
				t.Errorf("drift after applying manifests/ over the plain HTTP opt-out:\n%s", r)
			}
		}
		checkTLSControllers(t, k, "manifests/")
	})
}

// checkTLSControllers compares each CompositeController the overlay
// renders with the stored one: nothing pruned or changed by Metacontroller's
// schema, and every webhook on https with the CA of its endpointConfigs
// entry.
func checkTLSControllers(t *testing.T, k *kube, overlay string) {
	t.Helper()
	// A dry run prints one object after another; get prints a List.
	var want []map[string]any
	dec := json.NewDecoder(strings.NewReader(k.mustKubectl(t, "", "create", "--dry-run=client", "-o", "json", "-k", overlay).stdout))
	for dec.More() {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			t.Fatalf("kubectl create --dry-run=client -k %s: %v", overlay, err)
		}
		want = append(want, obj)
	}
	var live struct {
		Items []map[string]any `json:"items"`
	}
	unmarshal(t, k.mustKubectl(t, "", "get", "-k", overlay, "-o", "json").stdout, &live)
	stored := map[string]map[string]any{}
	for _, obj := range live.Items {
		stored[objectKey(obj)] = obj
	}

	var controllers []string
	for _, obj := range want {
		if obj["kind"] != "CompositeController" {
			continue
		}
		key := objectKey(obj)
		controllers = append(controllers, key)
		got, ok := stored[key]
		if !ok {
			t.Errorf("%s is not stored", key)
			continue
		}
		for _, p := range notKept(".spec", obj["spec"], got["spec"]) {
			t.Errorf("%s: %s did not survive admission: %s says %s", key, p, overlay, jsonString(t, lookupPath(obj, p)))
		}

		hosts := map[string]bool{}
		configs, _ := lookupPath(got, ".spec.endpointConfigs").([]any)
		for i := range configs {
			entry := ".spec.endpointConfigs[" + strconv.Itoa(i) + "]"
			host, _ := lookupPath(got, entry+".host").(string)
			if name := lookupPath(got, entry+".caBundle.secretRef.name"); name != "etcd-hook-tls" {
				t.Errorf("%s: %s.caBundle.secretRef.name is %v, want etcd-hook-tls", key, entry, name)
			}
			// The default Metacontroller's schema fills in, stored.
			if secretKey := lookupPath(got, entry+".caBundle.secretRef.key"); secretKey != "ca.crt" {
				t.Errorf("%s: %s.caBundle.secretRef.key is %v, want ca.crt", key, entry, secretKey)
			}
			hosts[host] = true
		}
		hooks, _ := lookupPath(got, ".spec.hooks").(map[string]any)
		for _, hook := range slices.Sorted(maps.Keys(hooks)) {
			raw, _ := lookupPath(got, ".spec.hooks."+hook+".webhook.url").(string)
			u, err := url.Parse(raw)
			if err != nil || u.Scheme != "https" || u.Host != tlsHookHost || !hosts[u.Host] {
				t.Errorf("%s: hooks.%s.webhook.url %q is not https on %s with a caBundle (endpointConfigs hosts %v)", key, hook, raw, tlsHookHost, slices.Sorted(maps.Keys(hosts)))
			}
		}
	}
	if len(controllers) != 3 {
		t.Errorf("%s renders %d CompositeControllers (%s), want 3", overlay, len(controllers), strings.Join(controllers, ", "))
	}
}

func objectKey(obj map[string]any) string {
	name, _ := lookupPath(obj, ".metadata.name").(string)
	kind, _ := obj["kind"].(string)
	return kind + "/" + name
}
