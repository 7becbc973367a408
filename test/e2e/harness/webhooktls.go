package harness

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// HTTPS hooks, as Metacontroller v4.16+ calls them (pkg/hooks/cabundle.go,
// endpoint_config.go, webhook.go): a webhook's caBundle, or else the one of
// the first spec.endpointConfigs entry whose host matches the webhook URL's,
// is resolved once, when the controller is created, into the only roots the
// hook's certificate is verified against. Without one, the system roots are
// used. A bundle that cannot be resolved or parsed keeps the controller from
// being created at all: Metacontroller records "Cannot create new
// controller" and never calls the hooks.

// CABundle is a webhook's or an endpointConfigs entry's caBundle: exactly
// one source.
type CABundle struct {
	// Inline is PEM-encoded CA certificates.
	Inline string `json:"inline,omitempty"`
	// SecretRef is a key of a Secret in the API server.
	SecretRef *ResourceKeyRef `json:"secretRef,omitempty"`
	// ConfigMapRef is a key of a ConfigMap (ConfigMap.v1) in the API server.
	ConfigMapRef *ResourceKeyRef `json:"configMapRef,omitempty"`
}

// ResourceKeyRef names a key of a Secret or ConfigMap.
type ResourceKeyRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Key defaults to ca.crt, as the CRD's default does.
	Key string `json:"key,omitempty"`
}

// EndpointConfig is an entry of spec.endpointConfigs: settings for the
// webhooks whose URL host matches Host ("host" or "host:port").
type EndpointConfig struct {
	Host     string    `json:"host"`
	CABundle *CABundle `json:"caBundle,omitempty"`
}

const defaultCABundleKey = "ca.crt"

// withDefaults is the bundle as the API server stores it: keys defaulted.
func (b *CABundle) withDefaults() *CABundle {
	if b == nil {
		return nil
	}
	out := *b
	for _, ref := range []**ResourceKeyRef{&out.SecretRef, &out.ConfigMapRef} {
		if *ref != nil {
			r := **ref
			if r.Key == "" {
				r.Key = defaultCABundleKey
			}
			*ref = &r
		}
	}
	return &out
}

// resolveCABundle is Metacontroller's ResolveCABundle against the harness
// store: the PEM bytes, or nil for none (system roots).
func resolveCABundle(api *APIServer, b *CABundle) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	b = b.withDefaults()
	sources := 0
	for _, set := range []bool{b.Inline != "", b.SecretRef != nil, b.ConfigMapRef != nil} {
		if set {
			sources++
		}
	}
	switch {
	case sources == 0:
		return nil, errors.New("caBundle is set but none of inline, secretRef, or configMapRef is specified")
	case sources > 1:
		return nil, errors.New("caBundle has more than one source set: exactly one of inline, secretRef, or configMapRef must be specified")
	case b.Inline != "":
		return []byte(b.Inline), nil
	case b.SecretRef != nil:
		ref := b.SecretRef
		if ref.Name == "" || ref.Namespace == "" {
			return nil, fmt.Errorf("%w: caBundle.secretRef: name and namespace are required", ErrInvalid)
		}
		obj, ok := api.Get(Ref{Type: TypeSecret, Namespace: ref.Namespace, Name: ref.Name})
		if !ok {
			return nil, fmt.Errorf("caBundle: failed to get Secret %s/%s: %w", ref.Namespace, ref.Name, ErrNotFound)
		}
		data, err := secretData(obj)
		if err != nil {
			return nil, fmt.Errorf("caBundle: Secret %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		v, ok := data[ref.Key]
		if !ok {
			return nil, fmt.Errorf("caBundle: key %q not found in Secret %s/%s", ref.Key, ref.Namespace, ref.Name)
		}
		if len(v) == 0 {
			return nil, fmt.Errorf("caBundle: key %q in Secret %s/%s is empty", ref.Key, ref.Namespace, ref.Name)
		}
		return v, nil
	default:
		ref := b.ConfigMapRef
		if ref.Name == "" || ref.Namespace == "" {
			return nil, fmt.Errorf("%w: caBundle.configMapRef: name and namespace are required", ErrInvalid)
		}
		obj, ok := api.Get(Ref{Type: TypeConfigMap, Namespace: ref.Namespace, Name: ref.Name})
		if !ok {
			return nil, fmt.Errorf("caBundle: failed to get ConfigMap %s/%s: %w", ref.Namespace, ref.Name, ErrNotFound)
		}
		v, ok := nested(obj, "data", ref.Key)
		if !ok {
			return nil, fmt.Errorf("caBundle: key %q not found in ConfigMap %s/%s", ref.Key, ref.Namespace, ref.Name)
		}
		s, _ := v.(string)
		if s == "" {
			return nil, fmt.Errorf("caBundle: key %q in ConfigMap %s/%s is empty", ref.Key, ref.Namespace, ref.Name)
		}
		return []byte(s), nil
	}
}

// matchEndpointConfig is Metacontroller's host match: case-insensitive,
// against the URL's host[:port], and with the scheme's default port either
// written or not on either side.
func matchEndpointConfig(rawURL string, configs []EndpointConfig) *EndpointConfig {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil
	}
	defaultPort := map[string]string{"https": "443", "http": "80"}[u.Scheme]
	canonical := u.Host
	if u.Port() == "" && defaultPort != "" {
		canonical = u.Hostname() + ":" + defaultPort
	}
	for i := range configs {
		c := &configs[i]
		if strings.EqualFold(c.Host, u.Host) || strings.EqualFold(c.Host, canonical) {
			return c
		}
		if u.Port() != "" && u.Port() == defaultPort && strings.EqualFold(c.Host, u.Hostname()) {
			return c
		}
	}
	return nil
}

// hookClient builds the client of one hook: its own caBundle, else the
// matching endpointConfigs entry's, else none. workers bounds idle
// connections, as for the plain client.
func hookClient(api *APIServer, hookURL string, own *CABundle, configs []EndpointConfig, workers int) (*http.Client, error) {
	bundle := own
	if bundle == nil {
		if c := matchEndpointConfig(hookURL, configs); c != nil {
			bundle = c.CABundle
		}
	}
	pem, err := resolveCABundle(api, bundle)
	if err != nil {
		return nil, fmt.Errorf("can't resolve caBundle: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(pem) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("caBundle: no valid PEM-encoded certificates found in the provided CA bundle")
		}
		cfg.RootCAs = pool // exactly these: no system roots
	}
	// Metacontroller's transport is a clone of http.DefaultTransport, which
	// offers HTTP/2 over TLS; the harness never uses a proxy.
	return &http.Client{Transport: &http.Transport{
		Proxy: nil, MaxIdleConnsPerHost: workers, TLSClientConfig: cfg, ForceAttemptHTTP2: true,
	}}, nil
}
