package manifests_test

import (
	"encoding/json"
	"errors"
	"net/url"
	"os/exec"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// The HTTPS wiring every TLS entry point must render.
const (
	tlsSecret    = "etcd-hook-tls"
	tlsNamespace = "etcd-hook"
	tlsHost      = "etcd-hook.etcd-hook.svc:443"
	tlsMountPath = "/etc/etcd-hook/tls"
)

// tlsEntryPoints are the kustomizations that install the hook over HTTPS.
var tlsEntryPoints = []string{"tls", "tls/cert-manager"}

// kustomize renders a kustomization directory under manifests/ with
// bin/kubectl, the pinned release test/apiserver uses (kustomize is built
// into it). make test runs the unit tests before it builds kubectl, so a
// missing binary skips, even in CI: test/apiserver renders and applies the
// same overlays with it afterwards, and fails there without it.
func kustomize(t *testing.T, dir string) []document {
	t.Helper()
	kubectl, err := testenv.LookBinary(testenv.Kubectl)
	if err != nil {
		t.Skipf("%v; make kube-bins builds it (test/apiserver checks the overlays too)", err)
	}
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, exit.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return parseDocuments(t, "kustomize "+dir, out)
}

// byKindName indexes rendered documents by "Kind/name".
func byKindName(docs []document) map[string]document {
	m := map[string]document{}
	for _, d := range docs {
		m[d.str("kind")+"/"+d.str("metadata", "name")] = d
	}
	return m
}

// controllerHooks is the webhooks of a CompositeController and its
// endpointConfigs, as far as TLS goes.
type controllerHooks struct {
	Spec struct {
		EndpointConfigs []struct {
			Host     string          `json:"host"`
			CABundle json.RawMessage `json:"caBundle"`
		} `json:"endpointConfigs"`
		Hooks map[string]struct {
			Webhook *struct {
				URL      string          `json:"url"`
				Timeout  string          `json:"timeout"`
				CABundle json.RawMessage `json:"caBundle"`
			} `json:"webhook"`
		} `json:"hooks"`
	} `json:"spec"`
}

func decodeHooks(t *testing.T, d document) controllerHooks {
	t.Helper()
	var c controllerHooks
	b, err := json.Marshal(d.data)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", d, err)
	}
	return c
}

// webhook is what a test compares of one webhook.
type webhook struct {
	URL, Timeout, CABundle string
}

// TestTLSOverlays renders each HTTPS entry point and checks, against the
// plain install: the same CompositeControllers with the same hooks, every
// webhook on https://etcd-hook.etcd-hook.svc:443 with the CA of the Secret
// etcd-hook-tls (through the endpointConfigs entry of its host), the Secret
// mounted as a directory (no subPath, so that rotation reaches the hook),
// the hook's TLS flags pointing into it, and the Service's https port.
func TestTLSOverlays(t *testing.T) {
	plain := byKindName(kustomize(t, "."))
	wantCA, err := json.Marshal(map[string]any{"secretRef": map[string]any{"name": tlsSecret, "namespace": tlsNamespace, "key": "ca.crt"}})
	if err != nil {
		t.Fatal(err)
	}

	for _, entry := range tlsEntryPoints {
		t.Run(entry, func(t *testing.T) {
			rendered := byKindName(kustomize(t, entry))

			// The CompositeControllers: every hook of the plain install, on
			// https, with a CA bundle.
			var names []string
			for key, d := range plain {
				if d.str("kind") != "CompositeController" {
					continue
				}
				names = append(names, key)
				got, ok := rendered[key]
				if !ok {
					t.Errorf("%s is missing", key)
					continue
				}
				want := map[string]webhook{}
				for hook, h := range decodeHooks(t, d).Spec.Hooks {
					if h.Webhook == nil {
						continue
					}
					u, err := url.Parse(h.Webhook.URL)
					if err != nil {
						t.Fatalf("%s: hooks.%s: %v", key, hook, err)
					}
					want[hook] = webhook{URL: "https://" + tlsHost + u.Path, Timeout: h.Webhook.Timeout, CABundle: string(wantCA)}
				}
				if diff := cmp.Diff(want, renderedWebhooks(t, got)); diff != "" {
					t.Errorf("%s: webhooks (-want +got):\n%s", key, diff)
				}
			}
			if len(names) != 3 {
				t.Errorf("the plain install renders %d CompositeControllers (%v), want 3", len(names), names)
			}

			checkTLSDeployment(t, rendered)

			svc, ok := rendered["Service/etcd-hook"]
			if !ok {
				t.Fatal("Service/etcd-hook is missing")
			}
			var s corev1.Service
			if err := decodeStrict(svc, &s); err != nil {
				t.Fatal(err)
			}
			var ports []string
			for _, p := range s.Spec.Ports {
				ports = append(ports, p.Name+" "+p.TargetPort.String()+" "+strconv.Itoa(int(p.Port)))
			}
			sort.Strings(ports)
			if diff := cmp.Diff([]string{"http http 80", "https https 443"}, ports); diff != "" {
				t.Errorf("Service ports as name, targetPort, port (-want +got):\n%s", diff)
			}

			// Nothing else differs from manifests/tls but what an entry
			// point adds (cert-manager's resources).
			if entry != "tls" {
				base := byKindName(kustomize(t, "tls"))
				for key, d := range base {
					if diff := cmp.Diff(d.data, rendered[key].data); diff != "" {
						t.Errorf("%s differs from manifests/tls's (-tls +%s):\n%s", key, entry, diff)
					}
				}
			}
		})
	}
}

// renderedWebhooks returns a controller's webhooks with the CA bundle each
// is verified with: its own, or else that of the endpointConfigs entry
// whose host is the URL's host:port as written (Metacontroller's match).
func renderedWebhooks(t *testing.T, d document) map[string]webhook {
	t.Helper()
	c := decodeHooks(t, d)
	got := map[string]webhook{}
	for hook, h := range c.Spec.Hooks {
		if h.Webhook == nil {
			continue
		}
		w := webhook{URL: h.Webhook.URL, Timeout: h.Webhook.Timeout, CABundle: string(h.Webhook.CABundle)}
		if u, err := url.Parse(h.Webhook.URL); err == nil && w.CABundle == "" {
			for _, e := range c.Spec.EndpointConfigs {
				if strings.EqualFold(e.Host, u.Host) {
					w.CABundle = string(e.CABundle)
					break
				}
			}
		}
		got[hook] = w
	}
	return got
}

// checkTLSDeployment: the Secret mounted read-only as a directory, the TLS
// flags pointing into it beside the plain ones, and the https port.
func checkTLSDeployment(t *testing.T, rendered map[string]document) {
	t.Helper()
	d, ok := rendered["Deployment/etcd-hook"]
	if !ok {
		t.Fatal("Deployment/etcd-hook is missing")
	}
	var dep appsv1.Deployment
	if err := decodeStrict(d, &dep); err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]

	var volume string
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == tlsSecret {
			volume = v.Name
		}
	}
	if volume == "" {
		t.Fatalf("no volume of the Secret %s: %+v", tlsSecret, pod.Volumes)
	}
	var mounts []corev1.VolumeMount
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			mounts = append(mounts, m)
		}
	}
	// No subPath: the kubelet never updates a file mounted by subPath, so a
	// rotated certificate would not reach the hook until the Pod is
	// replaced.
	want := []corev1.VolumeMount{{Name: volume, MountPath: tlsMountPath, ReadOnly: true}}
	if diff := cmp.Diff(want, mounts); diff != "" {
		t.Errorf("mounts of the Secret %s (-want +got):\n%s", tlsSecret, diff)
	}

	image := "--agent-image=" + c.Image
	for _, arg := range []string{"--addr=:8080", image, "--tls-cert-file=" + path.Join(tlsMountPath, "tls.crt"),
		"--tls-key-file=" + path.Join(tlsMountPath, "tls.key"), "--tls-addr=:8443"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("container args %v lack %s", c.Args, arg)
		}
	}
	var ports []string
	for _, p := range c.Ports {
		ports = append(ports, p.Name+" "+strconv.Itoa(int(p.ContainerPort)))
	}
	sort.Strings(ports)
	if diff := cmp.Diff([]string{"http 8080", "https 8443"}, ports); diff != "" {
		t.Errorf("container ports (-want +got):\n%s", diff)
	}
}
