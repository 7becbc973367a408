package harness

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/tlstest"
)

// newTLSFakeHook serves the fake hook over HTTPS with leaf, on a random
// (so never the default) port of 127.0.0.1. edit may change the server's
// TLS configuration before it starts.
func newTLSFakeHook(t *testing.T, leaf tlstest.Leaf, edit func(*tls.Config)) *fakeHook {
	t.Helper()
	kp, err := leaf.KeyPair()
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeHook{cfg: fakeConfig{version: "3.6.16", noPods: true}}
	f.srv = httptest.NewUnstartedServer(f)
	f.srv.TLS = &tls.Config{Certificates: []tls.Certificate{kp}}
	if edit != nil {
		edit(f.srv.TLS)
	}
	// Refused handshakes are what some cases test, not noise.
	f.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	f.srv.StartTLS()
	t.Cleanup(f.Close)
	return f
}

// waitUntil polls cond every 10 ms for at most timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting %s for %s: last: %s", timeout, what, detail)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tlsFixture is a CA, the leaf the hook serves with and a CA that did not
// sign it, plus an API server holding the first CA in a Secret (keys ca.crt
// and bundle.pem) and a ConfigMap (ca.crt), and an empty-valued Secret key.
type tlsFixture struct {
	ca, other *tlstest.CA
	leaf      tlstest.Leaf
	api       *APIServer
}

const caNamespace = "metacontroller"

func newTLSFixture(t *testing.T) *tlsFixture {
	t.Helper()
	ca, err := tlstest.NewCA("hook CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlstest.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(tlstest.LeafOptions{CommonName: "hook", DNSNames: []string{"localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: tlstest.Server})
	if err != nil {
		t.Fatal(err)
	}
	api := NewAPIServer()
	enc := base64.StdEncoding.EncodeToString
	for _, o := range []Object{
		{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "hook-ca", "namespace": caNamespace},
			"data": map[string]any{"ca.crt": enc(ca.PEM), "bundle.pem": enc(append(other.PEM, ca.PEM...)), "empty": ""}},
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "hook-ca", "namespace": caNamespace},
			"data": map[string]any{"ca.crt": string(ca.PEM)}},
	} {
		if _, err := api.Create(o); err != nil {
			t.Fatal(err)
		}
	}
	return &tlsFixture{ca: ca, other: other, leaf: leaf, api: api}
}

func (f *tlsFixture) config(hookURL string) ControllerConfig {
	return ControllerConfig{SyncURL: hookURL + "/sync", FinalizeURL: hookURL + "/finalize", ResyncPeriod: -1}
}

// TestHTTPSWebhooks: hooks on https URLs are verified against their
// caBundle, from any source, or the one of the endpointConfigs entry their
// host matches; a bundle of another CA, or none (system roots), is a TLS
// error of the call, recorded like any failed call, and the hook never sees
// a request.
func TestHTTPSWebhooks(t *testing.T) {
	fx := newTLSFixture(t)
	inline := func(ca *tlstest.CA) *CABundle { return &CABundle{Inline: string(ca.PEM)} }
	secret := &CABundle{SecretRef: &ResourceKeyRef{Name: "hook-ca", Namespace: caNamespace}}
	tests := []struct {
		name string
		// host replaces 127.0.0.1 in the hook URL.
		host      string
		bundle    *CABundle // of both hooks
		endpoints func(hostPort string) []EndpointConfig
		serverTLS func(*tls.Config)
		wantErr   string // of the sync call; "" for a 200
	}{
		{name: "inline", bundle: inline(fx.ca)},
		{name: "secretRef, default key", bundle: secret},
		{name: "secretRef, named key with two CAs", bundle: &CABundle{SecretRef: &ResourceKeyRef{Name: "hook-ca", Namespace: caNamespace, Key: "bundle.pem"}}},
		{name: "configMapRef", bundle: &CABundle{ConfigMapRef: &ResourceKeyRef{Name: "hook-ca", Namespace: caNamespace}}},
		{name: "endpointConfigs, host:port", endpoints: func(hp string) []EndpointConfig {
			return []EndpointConfig{{Host: "127.0.0.1:1"}, {Host: hp, CABundle: inline(fx.ca)}}
		}},
		{name: "endpointConfigs, DNS name, any case", host: "localhost", endpoints: func(hp string) []EndpointConfig {
			return []EndpointConfig{{Host: strings.ToUpper(hp), CABundle: secret}}
		}},
		{name: "endpointConfigs of another port", endpoints: func(string) []EndpointConfig {
			return []EndpointConfig{{Host: "127.0.0.1:443", CABundle: inline(fx.ca)}}
		}, wantErr: "certificate signed by unknown authority"},
		{name: "the hook's own bundle wins over endpointConfigs", bundle: inline(fx.other), endpoints: func(hp string) []EndpointConfig {
			return []EndpointConfig{{Host: hp, CABundle: inline(fx.ca)}}
		}, wantErr: "certificate signed by unknown authority"},
		{name: "another CA", bundle: inline(fx.other), wantErr: "certificate signed by unknown authority"},
		{name: "no bundle: system roots", wantErr: "certificate signed by unknown authority"},
		{name: "TLS 1.1 is refused", bundle: inline(fx.ca), serverTLS: func(c *tls.Config) {
			c.MinVersion, c.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
		}, wantErr: "protocol version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newTLSFakeHook(t, fx.leaf, tt.serverTLS)
			hookURL := fake.URL()
			if tt.host != "" {
				hookURL = strings.Replace(hookURL, "127.0.0.1", tt.host, 1)
			}
			cfg := fx.config(hookURL)
			cfg.SyncCABundle, cfg.FinalizeCABundle = tt.bundle, tt.bundle
			if tt.endpoints != nil {
				cfg.EndpointConfigs = tt.endpoints(strings.TrimPrefix(hookURL, "https://"))
			}
			mc, err := NewMetacontroller(fx.api, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			mc.Start(ctx)
			defer mc.Stop()
			parent := strings.NewReplacer(" ", "-", ",", "", ":", "", "'", "").Replace(strings.ToLower(tt.name))
			if _, err := mc.CreateParent(ns, parent, map[string]any{"size": 1}); err != nil {
				t.Fatal(err)
			}
			var first SyncRecord
			waitUntil(t, 10*time.Second, "a sync call", func() (bool, string) {
				recs := mc.Records(ns, parent)
				if len(recs) == 0 {
					return false, "no call"
				}
				first = recs[0]
				return true, ""
			})
			if tt.wantErr != "" {
				if first.Err == nil || !strings.Contains(first.Err.Error(), tt.wantErr) {
					t.Fatalf("sync call: HTTP %d, err %v; want an error with %q", first.HTTPStatus, first.Err, tt.wantErr)
				}
				if m := mc.Metrics(ns, parent); m.HookErrors == 0 {
					t.Errorf("metrics %+v: the TLS error is not counted as a hook error", m)
				}
				if n := len(fake.Calls("")); n != 0 {
					t.Errorf("the hook got %d requests through a refused handshake", n)
				}
				return
			}
			if first.Err != nil || first.HTTPStatus != http.StatusOK {
				t.Fatalf("sync call: HTTP %d, err %v; want 200", first.HTTPStatus, first.Err)
			}
			// The finalize hook has its own client, with the same bundle.
			if err := mc.DeleteParent(ns, parent); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 10*time.Second, "the parent finalized", func() (bool, string) {
				_, ok := mc.Parent(ns, parent)
				return !ok, fmt.Sprintf("metrics %+v", mc.Metrics(ns, parent))
			})
			if m := mc.Metrics(ns, parent); m.HookErrors != 0 || m.Finalizes == 0 {
				t.Errorf("metrics %+v: want finalize calls and no hook error", m)
			}
		})
	}
}

// TestHTTPSWebhookConfigErrors: a caBundle that cannot be resolved or
// parsed keeps the controller from being created, as Metacontroller refuses
// to start it; an endpointConfigs entry no hook matches is not resolved.
func TestHTTPSWebhookConfigErrors(t *testing.T) {
	fx := newTLSFixture(t)
	const hookURL = "https://hook.example:8443"
	ref := func(name, key string) *ResourceKeyRef {
		return &ResourceKeyRef{Name: name, Namespace: caNamespace, Key: key}
	}
	tests := []struct {
		name    string
		edit    func(*ControllerConfig)
		wantErr string // "" for none
	}{
		{"inline that is not PEM", func(c *ControllerConfig) { c.SyncCABundle = &CABundle{Inline: "not a certificate"} },
			"sync hook: caBundle: no valid PEM-encoded certificates"},
		{"missing Secret", func(c *ControllerConfig) { c.FinalizeCABundle = &CABundle{SecretRef: ref("nope", "")} },
			"finalize hook: can't resolve caBundle: caBundle: failed to get Secret metacontroller/nope: not found"},
		{"missing Secret key", func(c *ControllerConfig) { c.SyncCABundle = &CABundle{SecretRef: ref("hook-ca", "tls.crt")} },
			`key "tls.crt" not found in Secret metacontroller/hook-ca`},
		{"empty Secret key", func(c *ControllerConfig) { c.SyncCABundle = &CABundle{SecretRef: ref("hook-ca", "empty")} },
			`key "empty" in Secret metacontroller/hook-ca is empty`},
		{"missing ConfigMap", func(c *ControllerConfig) { c.SyncCABundle = &CABundle{ConfigMapRef: ref("nope", "")} },
			"failed to get ConfigMap metacontroller/nope"},
		{"Secret without namespace", func(c *ControllerConfig) {
			c.SyncCABundle = &CABundle{SecretRef: &ResourceKeyRef{Name: "hook-ca"}}
		}, "name and namespace are required"},
		{"two sources", func(c *ControllerConfig) {
			c.SyncCABundle = &CABundle{Inline: string(fx.ca.PEM), SecretRef: ref("hook-ca", "")}
		}, "more than one source"},
		{"no source", func(c *ControllerConfig) { c.SyncCABundle = &CABundle{} }, "none of inline, secretRef, or configMapRef"},
		{"customize hook", func(c *ControllerConfig) {
			c.CustomizeURL, c.CustomizeCABundle = hookURL+"/customize", &CABundle{Inline: "garbage"}
		}, "customize hook"},
		{"matching endpointConfigs entry", func(c *ControllerConfig) {
			c.EndpointConfigs = []EndpointConfig{{Host: "hook.example:8443", CABundle: &CABundle{SecretRef: ref("nope", "")}}}
		}, "sync hook: can't resolve caBundle: caBundle: failed to get Secret"},
		{"endpointConfigs entry without host", func(c *ControllerConfig) {
			c.EndpointConfigs = []EndpointConfig{{CABundle: &CABundle{Inline: string(fx.ca.PEM)}}}
		}, "spec.endpointConfigs[0].host: Required value"},
		{"endpointConfigs entry no hook matches", func(c *ControllerConfig) {
			c.EndpointConfigs = []EndpointConfig{{Host: "hook.example", CABundle: &CABundle{SecretRef: ref("nope", "")}}}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fx.config(hookURL)
			tt.edit(&cfg)
			_, err := NewMetacontroller(fx.api, cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("NewMetacontroller: %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("NewMetacontroller: %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

// TestCABundleInController: the controller object sent to the hooks shows
// the bundles as the API server stores them, keys defaulted to ca.crt.
func TestCABundleInController(t *testing.T) {
	fx := newTLSFixture(t)
	cfg := fx.config("https://hook.example:8443")
	cfg.SyncCABundle = &CABundle{SecretRef: &ResourceKeyRef{Name: "hook-ca", Namespace: caNamespace}}
	cfg.EndpointConfigs = []EndpointConfig{{Host: "hook.example:8443", CABundle: &CABundle{ConfigMapRef: &ResourceKeyRef{Name: "hook-ca", Namespace: caNamespace}}}}
	mc, err := NewMetacontroller(fx.api, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{
		"sync":     nestedMapValue(mc.ctrl, "spec", "hooks", "sync", "webhook", "caBundle"),
		"finalize": nestedMapValue(mc.ctrl, "spec", "hooks", "finalize", "webhook", "caBundle"),
		"endpoint": nestedMapValue(mc.ctrl, "spec", "endpointConfigs"),
	}
	want := map[string]any{
		"sync":     map[string]any{"secretRef": map[string]any{"name": "hook-ca", "namespace": caNamespace, "key": "ca.crt"}},
		"finalize": nil,
		"endpoint": []any{map[string]any{"host": "hook.example:8443",
			"caBundle": map[string]any{"configMapRef": map[string]any{"name": "hook-ca", "namespace": caNamespace, "key": "ca.crt"}}}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("controller spec (-want +got):\n%s", d)
	}
}

func TestMatchEndpointConfig(t *testing.T) {
	configs := []EndpointConfig{{Host: "a.example"}, {Host: "b.example:8443"}, {Host: "c.example:443"}, {Host: "D.example:80"}}
	tests := []struct {
		url  string
		want string // matched host, "" for none
	}{
		{"https://a.example/sync", "a.example"},
		{"https://a.example:443/sync", "a.example"},
		{"https://a.example:8443/sync", ""},
		{"https://b.example:8443/sync", "b.example:8443"},
		{"https://b.example/sync", ""},
		{"https://c.example/sync", "c.example:443"},
		{"http://c.example/sync", ""},
		{"http://d.example/sync", "D.example:80"},
		{"https://A.EXAMPLE/sync", "a.example"},
	}
	for _, tt := range tests {
		got := ""
		if c := matchEndpointConfig(tt.url, configs); c != nil {
			got = c.Host
		}
		if got != tt.want {
			t.Errorf("%s matched %q, want %q", tt.url, got, tt.want)
		}
	}
}
