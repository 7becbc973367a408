package harness

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var timestampDir = regexp.MustCompile(`^\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d+$`)

// volumeListing describes a volume directory: each entry with its symlink
// target ("->") or its mode, timestamped directories as "..<ts>/", and the
// files under ..data with their modes and contents.
func volumeListing(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				t.Fatal(err)
			}
			if timestampDir.MatchString(target) {
				target = "..<ts>"
			}
			out = append(out, e.Name()+" -> "+target)
		case timestampDir.MatchString(e.Name()):
			out = append(out, "..<ts>/")
		default:
			out = append(out, e.Name()+" (not a symlink)")
		}
	}
	_ = filepath.WalkDir(filepath.Join(dir, atomicDataDir)+"/", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(dir, atomicDataDir), p)
		out = append(out, fmt.Sprintf("%s %v %q", filepath.Join(atomicDataDir, rel), info.Mode().Perm(), data))
		return nil
	})
	sort.Strings(out)
	return out
}

func TestWriteAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	first := map[string]fileProjection{
		"ca.crt":       {data: []byte("ca"), mode: 0o644},
		"tls/peer.crt": {data: []byte("peer"), mode: 0o600},
		"./x.conf":     {data: []byte("x"), mode: 0o400}, // cleaned to x.conf
	}
	stale, err := writeAtomic(dir, first)
	if err != nil {
		t.Fatal(err)
	}
	if stale != "" {
		t.Errorf("first write superseded %q", stale)
	}
	want := []string{
		"..<ts>/",
		"..data -> ..<ts>",
		"..data/ca.crt -rw-r--r-- \"ca\"",
		"..data/tls/peer.crt -rw------- \"peer\"",
		"..data/x.conf -r-------- \"x\"",
		"ca.crt -> ..data/ca.crt",
		"tls -> ..data/tls",
		"x.conf -> ..data/x.conf",
	}
	if d := cmp.Diff(want, volumeListing(t, dir)); d != "" {
		t.Errorf("first write (-want +got):\n%s", d)
	}
	oldTS, _ := os.Readlink(filepath.Join(dir, atomicDataDir))

	// An update swaps ..data; names the payload lost go, the superseded
	// directory is left for the caller to remove.
	stale, err = writeAtomic(dir, map[string]fileProjection{"ca.crt": {data: []byte("ca2"), mode: 0o644}})
	if err != nil {
		t.Fatal(err)
	}
	if stale != filepath.Join(dir, oldTS) {
		t.Errorf("update superseded %q, want %q", stale, filepath.Join(dir, oldTS))
	}
	if err := os.RemoveAll(stale); err != nil {
		t.Fatal(err)
	}
	want = []string{"..<ts>/", "..data -> ..<ts>", "..data/ca.crt -rw-r--r-- \"ca2\"", "ca.crt -> ..data/ca.crt"}
	if d := cmp.Diff(want, volumeListing(t, dir)); d != "" {
		t.Errorf("after the update (-want +got):\n%s", d)
	}

	// Paths the AtomicWriter refuses leave the volume as it was.
	for _, p := range []string{"", "/etc/passwd", "../escape", "a/../../escape", "..data", "..hidden/x"} {
		if _, err := writeAtomic(dir, map[string]fileProjection{p: {data: []byte("bad"), mode: 0o644}}); err == nil {
			t.Errorf("path %q was written", p)
		}
	}
	if d := cmp.Diff(want, volumeListing(t, dir)); d != "" {
		t.Errorf("after refused writes (-want +got):\n%s", d)
	}
}

// TestWriteAtomicConcurrentReader: a reader looping on a key's path while
// the volume is rewritten, with superseded directories removed a round
// later as the kubelet emulator does, never misses the file nor reads a
// mixture of two versions.
func TestWriteAtomicConcurrentReader(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	version := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 64<<10) }
	if _, err := writeAtomic(dir, map[string]fileProjection{"server.crt": {data: version(0), mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads int
	var readErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			select {
			case <-stop:
				return
			default:
			}
			data, err := os.ReadFile(filepath.Join(dir, "server.crt"))
			reads++
			if err == nil && (len(data) != 64<<10 || bytes.Count(data, data[:1]) != len(data)) {
				err = fmt.Errorf("read %d bytes of mixed content", len(data))
			}
			if err != nil {
				readErr = err
				return
			}
		}
	}()
	var stale []string
	for i := 1; i <= 50; i++ {
		for _, d := range stale[:max(len(stale)-1, 0)] {
			if err := os.RemoveAll(d); err != nil {
				t.Fatal(err)
			}
		}
		s, err := writeAtomic(dir, map[string]fileProjection{"server.crt": {data: version(i), mode: 0o644}})
		if err != nil {
			t.Fatal(err)
		}
		// The directory of the version before the last goes: a reader
		// that resolved the ..data link an update ago (a thread preempted
		// in its path walk, on a loaded machine) still finds its file,
		// as it would while the kubelet's next sync is a second away.
		if len(stale) > 0 {
			stale = stale[len(stale)-1:]
		}
		stale = append(stale, s)
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if readErr != nil {
		t.Fatalf("after %d reads: %v", reads, readErr)
	}
	t.Logf("%d reads during 50 updates", reads)
}

func TestSecretPayload(t *testing.T) {
	api := NewAPIServer()
	enc := base64.StdEncoding.EncodeToString
	_, err := api.Create(Object{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s", "namespace": "ns"},
		"data": map[string]any{"a": enc([]byte("A")), "b": enc([]byte("B"))}, "stringData": map[string]any{"c": "C"}})
	if err != nil {
		t.Fatal(err)
	}
	mode := func(m int32) *int32 { return &m }
	yes := true
	tests := []struct {
		name    string
		src     corev1.SecretVolumeSource
		want    map[string]string // path -> "mode content"
		wantErr string
	}{
		{name: "every key, stringData merged, default mode", src: corev1.SecretVolumeSource{SecretName: "s"},
			want: map[string]string{"a": "-rw-r--r-- A", "b": "-rw-r--r-- B", "c": "-rw-r--r-- C"}},
		{name: "defaultMode", src: corev1.SecretVolumeSource{SecretName: "s", DefaultMode: mode(0o400)},
			want: map[string]string{"a": "-r-------- A", "b": "-r-------- B", "c": "-r-------- C"}},
		{name: "items with paths and modes", src: corev1.SecretVolumeSource{SecretName: "s", DefaultMode: mode(0o440), Items: []corev1.KeyToPath{
			{Key: "a", Path: "certs/a.pem"}, {Key: "c", Path: "c.key", Mode: mode(0o600)}}},
			want: map[string]string{"certs/a.pem": "-r--r----- A", "c.key": "-rw------- C"}},
		{name: "item of a missing key", src: corev1.SecretVolumeSource{SecretName: "s", Items: []corev1.KeyToPath{{Key: "z", Path: "z"}}},
			wantErr: "references non-existent secret key: z"},
		{name: "item of a missing key, optional", src: corev1.SecretVolumeSource{SecretName: "s", Optional: &yes, Items: []corev1.KeyToPath{
			{Key: "z", Path: "z"}, {Key: "a", Path: "a"}}},
			want: map[string]string{"a": "-rw-r--r-- A"}},
		{name: "missing Secret", src: corev1.SecretVolumeSource{SecretName: "nope"}, wantErr: `secret "nope" not found`},
		{name: "missing Secret, optional", src: corev1.SecretVolumeSource{SecretName: "nope", Optional: &yes}, want: map[string]string{}},
	}
	for _, tt := range tests {
		payload, err := secretPayload(api, "ns", &tt.src)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		got := map[string]string{}
		for p, f := range payload {
			got[p] = f.mode.String() + " " + string(f.data)
		}
		if d := cmp.Diff(tt.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, d)
		}
	}
}

// secretObject is a Secret of string values.
func secretObject(name string, data map[string]string) Object {
	d := map[string]any{}
	for k, v := range data {
		d[k] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return Object{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": name, "namespace": ns}, "data": d}
}

// TestSecretVolumeRefresh runs a Pod with Secret volumes: the kubelet's
// layout, a refresh within a bounded wait of an update that a reader of the
// key's path never sees half done, items with their modes, an optional
// Secret that does not exist, a subPath that keeps its content until the
// container restarts, a deleted Secret that leaves the last files, and a
// Pod whose Secret comes after it. Its IP also resolves back to its name
// through the sandbox resolver, as etcd's TLS listener asks.
func TestSecretVolumeRefresh(t *testing.T) {
	requireEtcd(t, "3.6.16")
	env, _ := newEnvWithFake(t, Options{})
	const etcdImage = "quay.io/coreos/etcd:v3.6.16"
	version := func(v string) string { return strings.Repeat(v, 32<<10) }
	if _, err := env.API.Create(secretObject("tls", map[string]string{"peer.crt": version("1"), "peer.key": "key"})); err != nil {
		t.Fatal(err)
	}
	yes := true
	mode := func(m int32) *int32 { return &m }
	etcdPod := func(name string, extraVolumes []corev1.Volume, extraMounts []corev1.VolumeMount) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				Hostname: name, Subdomain: "s",
				Containers: []corev1.Container{{Name: "etcd", Image: etcdImage, Args: []string{"--data-dir=/var/etcd/data"},
					VolumeMounts: append([]corev1.VolumeMount{{Name: "data", MountPath: "/var/etcd"}}, extraMounts...)}},
				Volumes: append([]corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}, extraVolumes...),
			},
		}
	}
	createPod(t, env, etcdPod("secret-pod", []corev1.Volume{
		{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls"}}},
		{Name: "items", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls", DefaultMode: mode(0o440),
			Items: []corev1.KeyToPath{{Key: "peer.key", Path: "keys/peer.key", Mode: mode(0o600)}}}}},
		{Name: "opt", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "nope", Optional: &yes}}},
	}, []corev1.VolumeMount{
		{Name: "tls", MountPath: "/etc/etcd/tls"},
		{Name: "items", MountPath: "/etc/etcd/items"},
		{Name: "opt", MountPath: "/etc/etcd/opt"},
		{Name: "tls", MountPath: "/etc/etcd/single/peer.crt", SubPath: "peer.crt"},
	}))
	pod, err := env.WaitPodReady(ns, "secret-pod", 30*time.Second)
	mustWait(t, err)

	dirs := map[string]string{}
	for _, v := range []string{"tls", "items", "opt"} {
		d, err := env.Kubelet.VolumeDir(ns, "secret-pod", v)
		if err != nil {
			t.Fatal(err)
		}
		dirs[v] = d
	}
	listings := map[string][]string{}
	for v, d := range dirs {
		listings[v] = volumeListing(t, d)
	}
	wantListings := map[string][]string{
		"tls": {"..<ts>/", "..data -> ..<ts>", fmt.Sprintf("..data/peer.crt -rw-r--r-- %q", version("1")), "..data/peer.key -rw-r--r-- \"key\"",
			"peer.crt -> ..data/peer.crt", "peer.key -> ..data/peer.key"},
		"items": {"..<ts>/", "..data -> ..<ts>", "..data/keys/peer.key -rw------- \"key\"", "keys -> ..data/keys"},
		"opt":   {"..<ts>/", "..data -> ..<ts>"},
	}
	if d := cmp.Diff(wantListings, listings); d != "" {
		t.Errorf("volumes (-want +got):\n%s", d)
	}

	// Update twice while a reader loops on the key's path.
	key := filepath.Join(dirs["tls"], "peer.crt")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads int
	var readErr error
	seen := map[string]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			select {
			case <-stop:
				return
			default:
			}
			data, err := os.ReadFile(key)
			reads++
			if err == nil && string(data) != version("1") && string(data) != version("2") && string(data) != version("3") {
				err = fmt.Errorf("read %d bytes that are no version", len(data))
			}
			if err != nil {
				readErr = err
				return
			}
			seen[string(data[:1])] = true
		}
	}()
	for _, v := range []string{"2", "3"} {
		cur, _ := env.API.Get(Ref{Type: TypeSecret, Namespace: ns, Name: "tls"})
		cur["data"].(map[string]any)["peer.crt"] = base64.StdEncoding.EncodeToString([]byte(version(v)))
		if _, _, err := env.API.Update(cur); err != nil {
			t.Fatal(err)
		}
		mustWait(t, env.WaitFor(10*time.Second, "version "+v+" in the volume", func() (bool, string) {
			data, err := os.ReadFile(key)
			return err == nil && string(data) == version(v), fmt.Sprintf("%d bytes starting %.1q, %v", len(data), data, err)
		}))
	}
	close(stop)
	wg.Wait()
	if readErr != nil {
		t.Fatalf("a reader of %s, after %d reads: %v", key, reads, readErr)
	}
	if d := cmp.Diff(map[string]bool{"1": true, "2": true, "3": true}, seen); d != "" {
		t.Logf("versions the reader saw in %d reads (-all +seen):\n%s", reads, d)
	}
	if fi, err := os.Lstat(filepath.Join(dirs["tls"], atomicDataDir)); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("..data after the updates: %v, %v; want a symlink", fi, err)
	}
	// Superseded directories go a refresh later.
	mustWait(t, env.WaitFor(5*time.Second, "one timestamped directory", func() (bool, string) {
		l := volumeListing(t, dirs["tls"])
		return l[0] == "..<ts>/" && l[1] != "..<ts>/", strings.Join(l[:2], ", ")
	}))

	// The subPath mount is a copy taken when the container started.
	podUID := nestedString(pod, "metadata", "uid")
	subPath := filepath.Join(env.Kubelet.cfg.Dir, "pods", ns+"_secret-pod_"+podUID, "volume-subpaths", "tls", "etcd", "4")
	readSubPath := func() string { data, _ := os.ReadFile(subPath); return string(data) }
	if got := readSubPath(); got != version("1") {
		t.Errorf("subPath mount holds %.8q..., want version 1 until the container restarts", got)
	}

	// A deleted Secret leaves the last files.
	if err := env.API.Delete(Ref{Type: TypeSecret, Namespace: ns, Name: "tls"}, ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if data, err := os.ReadFile(key); err != nil || string(data) != version("3") {
		t.Errorf("after the Secret's deletion: %.8q..., %v; want version 3", data, err)
	}

	// A restarted container gets the volume as it is now.
	if err := env.Kubelet.KillContainer(ns, "secret-pod", "etcd"); err != nil {
		t.Fatal(err)
	}
	mustWait(t, env.WaitFor(30*time.Second, "container restarted", func() (bool, string) {
		p, _ := env.Pod(ns, "secret-pod")
		return restartCount(p) >= 1 && podReady(p), PodSummary(p)
	}))
	if got := readSubPath(); got != version("3") {
		t.Errorf("subPath mount after a restart holds %.8q..., want version 3", got)
	}

	// The Pod's IP resolves back to its name, as etcd's listener asks.
	ctx, cancel := context.WithTimeout(env.Ctx(), 5*time.Second)
	defer cancel()
	names, err := net.DefaultResolver.LookupAddr(ctx, nestedString(pod, "status", "podIP"))
	if d := cmp.Diff([]string{"secret-pod.s.default.svc.cluster.local."}, names); d != "" || err != nil {
		t.Errorf("reverse lookup of the Pod IP: %v (-want +got):\n%s", err, d)
	}

	// A Pod whose Secret does not exist yet: the containers that mount it
	// wait, and start once the Secret exists.
	createPod(t, env, etcdPod("late-secret",
		[]corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "late"}}}},
		[]corev1.VolumeMount{{Name: "tls", MountPath: "/etc/etcd/tls"}}))
	mustWait(t, env.WaitFor(10*time.Second, "late-secret waiting for its volume", func() (bool, string) {
		st := podStatus(env, "late-secret")
		w := ""
		if len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Waiting != nil {
			w = st.ContainerStatuses[0].State.Waiting.Reason
		}
		return w == "CreateContainerConfigError", fmt.Sprintf("%+v", st.ContainerStatuses)
	}))
	if _, err := env.Kubelet.VolumeDir(ns, "late-secret", "tls"); !errors.Is(err, ErrNotFound) {
		t.Errorf("volume of a missing Secret: %v, want ErrNotFound", err)
	}
	if _, err := env.API.Create(secretObject("late", map[string]string{"ca.crt": "late CA"})); err != nil {
		t.Fatal(err)
	}
	_, err = env.WaitPodReady(ns, "late-secret", 30*time.Second)
	mustWait(t, err)
	d, err := env.Kubelet.VolumeDir(ns, "late-secret", "tls")
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(d, "ca.crt")); err != nil || string(data) != "late CA" {
		t.Errorf("late Secret's file: %q, %v", data, err)
	}
}
