package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/shard"
)

// capturedCluster is Metacontroller's first sync of a new cluster, renamed
// to name with the UID uid, so that each request is another parent.
func capturedCluster(t *testing.T, name, uid string) string {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(testenv.SharedDir(t), "metacontroller", "captured", "sync-new-cluster.request.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(body), "example-etcd-cluster", name)
	return strings.ReplaceAll(s, "b0ab0783-8788-491a-9e3f-f20ff6e5986b", uid)
}

// syncAt posts a sync and returns the replica that answered it.
func syncAt(t *testing.T, c *http.Client, url, body string) (code int, replica string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/sync", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get(shard.ReplicaHeader)
}

// metricsOf returns the lines of a replica's /metrics that start with
// prefix.
func metricsOf(t *testing.T, plainAddr, prefix string) []string {
	t.Helper()
	resp, err := http.Get("http://" + plainAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// TestSyncsSpreadOverReplicas runs two replicas with --peers, as the
// chart does, over plain HTTP and over HTTPS: each parent's syncs are
// answered by its owner, whichever replica Metacontroller reached, each
// replica holds the series of its own parents only, and once a replica
// stops the other answers everything.
func TestSyncsSpreadOverReplicas(t *testing.T) {
	ca := newTestCA(t)
	certPEM, keyPEM := ca.leaf(t, 7)
	vol := newSecretVolume(t, map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM})
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			plain := []string{freeAddr(t), freeAddr(t)}
			served := plain // the addresses peers and Metacontroller use
			var tlsArgs [2][]string
			client := http.DefaultClient
			if scheme == "https" {
				served = []string{freeAddr(t), freeAddr(t)}
				for i := range tlsArgs {
					tlsArgs[i] = []string{"--tls-cert-file", vol.path("tls.crt"), "--tls-key-file", vol.path("tls.key"), "--tls-addr", served[i]}
				}
				client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}}}
			}
			peers := strings.Join(served, ",")
			stops := make([]func() error, 2)
			for i := range 2 {
				args := append([]string{"--peers", peers, "--peer-address", served[i]}, tlsArgs[i]...)
				_, stops[i] = startHookAt(t, plain[i], args...)
			}
			sorted := slices.Sorted(slices.Values(served))

			owned := map[string][]string{}
			for i := range 24 {
				name, uid := fmt.Sprintf("c%d", i), fmt.Sprintf("6f1c2a7e-0000-4b1d-9a3c-%012d", i)
				owner := shard.Owner(uid, sorted)
				owned[owner] = append(owned[owner], name)
				code, by := syncAt(t, client, scheme+"://"+served[i%2], capturedCluster(t, name, uid))
				if code != http.StatusOK || by != owner {
					t.Fatalf("cluster %s sent to %s: HTTP %d answered by %q, want 200 by its owner %s", name, served[i%2], code, by, owner)
				}
			}
			for i, addr := range served {
				if len(owned[addr]) == 0 {
					t.Fatalf("replica %s owns none of 24 clusters", addr)
				}
				series := strings.Join(metricsOf(t, plain[i], "etcd_cluster_last_sync_timestamp_seconds{"), "\n")
				for owner, names := range owned {
					for _, n := range names {
						if has := strings.Contains(series, `name="`+n+`"`); has != (owner == addr) {
							t.Errorf("replica %s serves cluster %s's series: %v; its owner is %s", addr, n, has, owner)
						}
					}
				}
				for _, want := range []string{`etcd_hook_sync_routing_total{outcome="forwarded"}`, `etcd_hook_sync_routing_total{outcome="received"}`, `etcd_hook_sync_routing_total{outcome="owned"}`, "etcd_hook_peers 2"} {
					if len(metricsOf(t, plain[i], want)) == 0 {
						t.Errorf("replica %s reports no %s", addr, want)
					}
				}
			}

			// The second replica stops (its listener closes at once): the
			// first answers its clusters too.
			if err := stops[1](); err != nil {
				t.Fatal(err)
			}
			for _, name := range owned[served[1]] {
				uid := fmt.Sprintf("6f1c2a7e-0000-4b1d-9a3c-%012s", strings.TrimPrefix(name, "c"))
				if code, by := syncAt(t, client, scheme+"://"+served[0], capturedCluster(t, name, uid)); code != http.StatusOK || by != served[0] {
					t.Errorf("cluster %s with its owner stopped: HTTP %d by %q, want 200 by %s", name, code, by, served[0])
				}
			}
			if len(metricsOf(t, plain[0], `etcd_hook_sync_routing_total{outcome="fallback"}`)) == 0 {
				t.Error("the replica left reports no fallback")
			}
		})
	}
}

// TestPeerMustServeTheSameCertificate: over HTTPS a replica forwards only
// to a peer that serves its own certificate; another certificate, even
// from the same CA, is not a replica of this hook, and the sync is
// answered where it arrived.
func TestPeerMustServeTheSameCertificate(t *testing.T) {
	ca := newTestCA(t)
	certA, keyA := ca.leaf(t, 1)
	certB, keyB := ca.leaf(t, 2)
	volA := newSecretVolume(t, map[string][]byte{"tls.crt": certA, "tls.key": keyA})
	volB := newSecretVolume(t, map[string][]byte{"tls.crt": certB, "tls.key": keyB})
	served := []string{freeAddr(t), freeAddr(t)}
	peers := strings.Join(served, ",")
	for i, vol := range []*secretVolume{volA, volB} {
		startHook(t, "--peers", peers, "--peer-address", served[i],
			"--tls-cert-file", vol.path("tls.crt"), "--tls-key-file", vol.path("tls.key"), "--tls-addr", served[i])
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	sorted := slices.Sorted(slices.Values(served))
	for i := range 16 {
		uid := fmt.Sprintf("6f1c2a7e-0000-4b1d-9a3c-%012d", i)
		if shard.Owner(uid, sorted) != served[1] {
			continue
		}
		if code, by := syncAt(t, client, "https://"+served[0], capturedCluster(t, fmt.Sprintf("c%d", i), uid)); code != http.StatusOK || by != served[0] {
			t.Fatalf("HTTP %d answered by %q; want 200 by %s, the peer with another certificate refused", code, by, served[0])
		}
		return
	}
	t.Fatal("no cluster of 16 is owned by the second replica")
}
