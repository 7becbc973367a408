package harness

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// These tests need no sandbox: they run wherever go test runs.

func obj(s string) Object {
	var o Object
	if err := json.Unmarshal([]byte(s), &o); err != nil {
		panic(err)
	}
	return o
}

func TestApplyMerge(t *testing.T) {
	tests := []struct {
		name                        string
		observed, lastApplied, want string
		desired                     string
	}{
		{
			name:        "desired field wins, foreign field kept",
			observed:    `{"spec":{"a":1,"defaulted":"x"},"status":{"phase":"Running"}}`,
			lastApplied: `{"spec":{"a":1}}`,
			desired:     `{"spec":{"a":2}}`,
			want:        `{"spec":{"a":2,"defaulted":"x"},"status":{"phase":"Running"}}`,
		},
		{
			name:        "field dropped by the hook is removed",
			observed:    `{"metadata":{"labels":{"a":"1","b":"2","other":"x"}}}`,
			lastApplied: `{"metadata":{"labels":{"a":"1","b":"2"}}}`,
			desired:     `{"metadata":{"labels":{"a":"1"}}}`,
			want:        `{"metadata":{"labels":{"a":"1","other":"x"}}}`,
		},
		{
			name:        "containers merge by name keeping server defaults",
			observed:    `{"spec":{"containers":[{"name":"etcd","image":"e:v1","terminationMessagePath":"/dev/termination-log"}]}}`,
			lastApplied: `{"spec":{"containers":[{"name":"etcd","image":"e:v1"}]}}`,
			desired:     `{"spec":{"containers":[{"name":"etcd","image":"e:v2"}]}}`,
			want:        `{"spec":{"containers":[{"name":"etcd","image":"e:v2","terminationMessagePath":"/dev/termination-log"}]}}`,
		},
		{
			name:        "list map: removed item goes, new item is appended",
			observed:    `{"ports":[{"port":1,"x":"srv"},{"port":2},{"port":9,"foreign":true}]}`,
			lastApplied: `{"ports":[{"port":1},{"port":2}]}`,
			desired:     `{"ports":[{"port":3},{"port":1}]}`,
			want:        `{"ports":[{"port":1,"x":"srv"},{"port":9,"foreign":true},{"port":3}]}`,
		},
		{
			name:        "scalar lists are replaced",
			observed:    `{"command":["etcd","--a"]}`,
			lastApplied: `{"command":["etcd","--a"]}`,
			desired:     `{"command":["etcd","--b"]}`,
			want:        `{"command":["etcd","--b"]}`,
		},
		{
			name:     "no last-applied: nothing is removed",
			observed: `{"spec":{"a":1,"b":2}}`,
			desired:  `{"spec":{"a":3}}`,
			want:     `{"spec":{"a":3,"b":2}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var last Object
			if tt.lastApplied != "" {
				last = obj(tt.lastApplied)
			}
			observed := obj(tt.observed)
			got := applyMerge(observed, last, obj(tt.desired))
			if d := cmp.Diff(obj(tt.want), got); d != "" {
				t.Errorf("applyMerge (-want +got):\n%s", d)
			}
			if d := cmp.Diff(obj(tt.observed), observed); d != "" {
				t.Errorf("observed was modified (-before +after):\n%s", d)
			}
		})
	}
}

func TestValidatePodUpdate(t *testing.T) {
	base := corev1.PodSpec{
		Containers:    []corev1.Container{{Name: "etcd", Image: "e:v1", Command: []string{"etcd"}}},
		RestartPolicy: corev1.RestartPolicyAlways,
		Tolerations:   []corev1.Toleration{{Key: "a", Operator: "Exists"}},
	}
	tests := []struct {
		name    string
		edit    func(*corev1.PodSpec)
		allowed bool
	}{
		{"image", func(s *corev1.PodSpec) { s.Containers[0].Image = "e:v2" }, true},
		{"added toleration", func(s *corev1.PodSpec) { s.Tolerations = append(s.Tolerations, corev1.Toleration{Key: "b"}) }, true},
		{"activeDeadlineSeconds", func(s *corev1.PodSpec) { n := int64(5); s.ActiveDeadlineSeconds = &n }, true},
		{"command", func(s *corev1.PodSpec) { s.Containers[0].Command = []string{"etcd", "--x"} }, false},
		{"restartPolicy", func(s *corev1.PodSpec) { s.RestartPolicy = corev1.RestartPolicyNever }, false},
		{"removed toleration", func(s *corev1.PodSpec) { s.Tolerations = nil }, false},
		{"hostname", func(s *corev1.PodSpec) { s.Hostname = "x" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			after := base.DeepCopy()
			tt.edit(after)
			err := validatePodUpdate("p", &base, after)
			if (err == nil) != tt.allowed {
				t.Errorf("allowed = %v, want %v (err %v)", err == nil, tt.allowed, err)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}

func TestImageVersion(t *testing.T) {
	tests := []struct {
		image, want string
		ok          bool
	}{
		{"quay.io/coreos/etcd:v3.6.16", "v3.6.16", true},
		{"gcr.io/etcd-development/etcd:v3.5.35", "v3.5.35", true},
		{"registry.k8s.io/etcd:3.5.35-0", "v3.5.35", true},
		{"localhost:5000/etcd:3.6.16", "v3.6.16", true},
		{"quay.io/coreos/etcd", "", false},
		{"busybox:1.36", "", false},
		{"quay.io/coreos/etcd@sha256:abcd", "", false},
	}
	for _, tt := range tests {
		got, err := imageVersion(tt.image)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("imageVersion(%q) = %q, %v; want %q, ok=%v", tt.image, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, errImagePull) {
			t.Errorf("imageVersion(%q): %v does not wrap errImagePull", tt.image, err)
		}
	}
}

func TestExpandVars(t *testing.T) {
	env := map[string]string{"A": "x", "EMPTY": ""}
	lookup := func(n string) (string, bool) { v, ok := env[n]; return v, ok }
	tests := map[string]string{
		"--name=$(A)":      "--name=x",
		"$(A)$(A)":         "xx",
		"$$(A)":            "$(A)",
		"$(MISSING)":       "$(MISSING)",
		"$(EMPTY)-":        "-",
		"cost $5":          "cost $5",
		"open $(A":         "open $(A",
		"trailing $":       "trailing $",
		"$(A) and $$ kept": "x and $ kept",
	}
	for in, want := range tests {
		if got := expandVars(in, lookup); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPlanContainer(t *testing.T) {
	bin := t.TempDir()
	for _, f := range []string{"etcd-v3.6.16", "etcdctl-v3.6.16", "etcdutl-v3.6.16"} {
		if err := os.WriteFile(filepath.Join(bin, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{}
	pod.Name, pod.Namespace = "c-0", "ns"
	pod.Spec.Hostname = "c-0"
	pc := podContext{
		pod: pod, ip: netip.MustParseAddr("127.0.3.4"), lo: netip.MustParseAddr("127.0.3.5"),
		binDir: bin, volumes: map[string]string{"etcd-data": "/host/pv1"}, home: "/host/pod", rootfs: "/host/rootfs",
	}
	c := &corev1.Container{
		Name:  "etcd",
		Image: "quay.io/coreos/etcd:v3.6.16",
		Command: []string{"/usr/local/bin/etcd", "--name=$(POD_NAME)", "--data-dir=/var/etcd/data",
			"--listen-client-urls=http://0.0.0.0:2379,http://127.0.0.1:2379",
			"--listen-peer-urls", "http://[::]:2380",
			"--advertise-client-urls=http://c-0.c.ns.svc:2379",
			"--wal-dir", "/var/etcd/wal", "--unrelated=/var/etcdx", "--log-outputs=/dev/stderr"},
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "ETCD_LISTEN_METRICS_URLS", Value: "http://0.0.0.0:2381"},
			{Name: "ETCD_SNAPSHOT_DIR", Value: "/var/etcd/snap"},
			{Name: "GREETING", Value: "hi $(POD_NAME)"},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "etcd-data", MountPath: "/var/etcd"}},
	}
	got, err := planContainer(pc, c)
	if err != nil {
		t.Fatal(err)
	}
	want := &launch{
		Binary: filepath.Join(bin, "etcd-v3.6.16"),
		Args: []string{"--name=c-0", "--data-dir=/host/pv1/data",
			"--listen-client-urls=http://127.0.3.4:2379,http://127.0.3.5:2379",
			"--listen-peer-urls", "http://127.0.3.4:2380",
			"--advertise-client-urls=http://c-0.c.ns.svc:2379",
			"--wal-dir", "/host/pv1/wal", "--unrelated=/host/rootfs/var/etcdx", "--log-outputs=/dev/stderr"},
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/host/pod", "HOSTNAME=c-0",
			"POD_NAME=c-0", "ETCD_LISTEN_METRICS_URLS=http://127.0.3.4:2381", "ETCD_SNAPSHOT_DIR=/host/pv1/snap",
			"GREETING=hi c-0", "GODEBUG=netdns=go",
		},
		Dir: "/host/rootfs",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("planContainer (-want +got):\n%s", d)
	}

	c.Image = "quay.io/coreos/etcd:v3.4.1"
	if _, err := planContainer(pc, c); !errors.Is(err, errImagePull) {
		t.Errorf("missing binary: err = %v, want errImagePull", err)
	}
	c.Image = "quay.io/coreos/etcd:v3.6.16"
	c.Command = []string{"/bin/sh", "-c", "etcd"}
	if _, err := planContainer(pc, c); !errors.Is(err, errContainerConfig) {
		t.Errorf("shell command: err = %v, want errContainerConfig", err)
	}

	// A restore's second init container: our binary, copied into a volume,
	// runs in the etcd image and names the image's etcdutl by its path.
	tools := t.TempDir()
	if err := os.WriteFile(filepath.Join(tools, "etcd-hook"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	pc.volumes["restore-tools"] = tools
	restore := &corev1.Container{
		Name: "restore", Image: "quay.io/coreos/etcd:v3.6.16",
		Command:      []string{"/restore-tools/etcd-hook", "restore", "apply", "--etcdutl=/usr/local/bin/etcdutl", "--data-dir=/var/etcd/data"},
		VolumeMounts: []corev1.VolumeMount{{Name: "etcd-data", MountPath: "/var/etcd"}, {Name: "restore-tools", MountPath: "/restore-tools"}},
	}
	got, err = planContainer(pc, restore)
	if err != nil {
		t.Fatal(err)
	}
	wantArgs := []string{"restore", "apply", "--etcdutl=" + filepath.Join(bin, "etcdutl-v3.6.16"), "--data-dir=/host/pv1/data"}
	if got.Binary != filepath.Join(tools, "etcd-hook") || !cmp.Equal(got.Args, wantArgs) {
		t.Errorf("restore step: %s %v, want %s %v", got.Binary, got.Args, filepath.Join(tools, "etcd-hook"), wantArgs)
	}
	restore.Command[0] = "/elsewhere/etcd-hook"
	if _, err := planContainer(pc, restore); !errors.Is(err, errContainerConfig) {
		t.Errorf("etcd-hook outside a volume in an etcd image: err = %v, want errContainerConfig", err)
	}
}

func TestDNSServer(t *testing.T) {
	d, err := StartDNS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	remove := d.AddSource(func(name string) []netip.Addr {
		if name == "a.b.ns.svc" {
			return []netip.Addr{netip.MustParseAddr("127.0.9.2"), netip.MustParseAddr("127.0.9.1")}
		}
		return nil
	})
	for _, network := range []string{"udp", "tcp"} {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, network, d.Addr().String())
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := r.LookupHost(ctx, "A.b.ns.svc.")
		cancel()
		if err != nil {
			t.Fatalf("%s lookup: %v", network, err)
		}
		sort.Strings(got)
		if d := cmp.Diff([]string{"127.0.9.1", "127.0.9.2"}, got); d != "" {
			t.Errorf("%s lookup (-want +got):\n%s", network, d)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		_, err = r.LookupHost(ctx, "x.b.ns.svc.")
		cancel()
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			t.Errorf("%s lookup of an unknown name: %v, want not found", network, err)
		}
	}
	remove()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", d.Addr().String())
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.LookupHost(ctx, "a.b.ns.svc."); err == nil {
		t.Error("a removed source still answers")
	}
}

func TestClusterDNS(t *testing.T) {
	api := NewAPIServer()
	mk := func(o string) {
		if _, err := api.Create(obj(o)); err != nil {
			t.Fatal(err)
		}
	}
	mk(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"c-0","namespace":"ns","labels":{"app":"c"}},"spec":{"hostname":"c-0","subdomain":"c","containers":[{"name":"etcd","image":"e"}]}}`)
	mk(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"c-1","namespace":"ns","labels":{"app":"c"}},"spec":{"hostname":"c-1","subdomain":"c","containers":[{"name":"etcd","image":"e"}]}}`)
	setStatus := func(name, ip string, ready bool) {
		st := map[string]any{"podIP": ip, "conditions": []any{map[string]any{"type": "Ready", "status": map[bool]string{true: "True", false: "False"}[ready]}}}
		if _, err := api.UpdateStatus(Ref{Type: TypePod, Namespace: "ns", Name: name}, "", st); err != nil {
			t.Fatal(err)
		}
	}
	setStatus("c-0", "127.0.1.1", true)
	setStatus("c-1", "127.0.1.2", false)
	mk(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"c-client","namespace":"ns"},"spec":{"selector":{"app":"c"},"ports":[{"port":2379}]}}`)

	addrs := func(ips []netip.Addr) []string {
		out := []string{}
		for _, ip := range ips {
			out = append(out, ip.String())
		}
		sort.Strings(out)
		return out
	}
	lenient, strict := clusterDNS(api, false), clusterDNS(api, true)
	tests := []struct {
		name   string
		lookup func(string) []netip.Addr
		query  string
		want   []string
	}{
		{"pod by hostname", lenient, "c-1.c.ns.svc", []string{"127.0.1.2"}},
		{"pod, cluster.local", lenient, "c-0.c.ns.svc.cluster.local", []string{"127.0.1.1"}},
		{"service: ready endpoints", lenient, "c-client.ns.svc", []string{"127.0.1.1"}},
		{"other namespace", lenient, "c-0.c.other.svc", []string{}},
		{"not a cluster name", lenient, "c-0.c.ns", []string{}},
		{"strict without headless service", strict, "c-0.c.ns.svc", []string{}},
	}
	for _, tt := range tests {
		if d := cmp.Diff(tt.want, addrs(tt.lookup(tt.query))); d != "" {
			t.Errorf("%s: %s (-want +got):\n%s", tt.name, tt.query, d)
		}
	}
	mk(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"c","namespace":"ns"},"spec":{"clusterIP":"None","selector":{"app":"c"}}}`)
	if d := cmp.Diff([]string{}, addrs(strict("c-1.c.ns.svc"))); d != "" {
		t.Errorf("strict, not ready, not published (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"127.0.1.1"}, addrs(strict("c-0.c.ns.svc"))); d != "" {
		t.Errorf("strict, ready (-want +got):\n%s", d)
	}
}

func TestAPIServerDeletion(t *testing.T) {
	api := NewAPIServer()
	var events []string
	api.Subscribe(func(ev Event) { events = append(events, string(ev.Type)+" "+ev.Ref.Type+" "+ev.Ref.Name) })
	parent, err := api.Create(obj(`{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdCluster","metadata":{"name":"c","namespace":"ns","finalizers":["f"]},"spec":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	owner := `"ownerReferences":[{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdCluster","name":"c","uid":"` + nestedString(parent, "metadata", "uid") + `","controller":true}]`
	for _, o := range []string{
		`{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"d","namespace":"ns",` + owner + `},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}`,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns",` + owner + `},"spec":{"containers":[{"name":"etcd","image":"e"}],"volumes":[{"name":"v","persistentVolumeClaim":{"claimName":"d"}}]}}`,
		`{"apiVersion":"v1","kind":"Service","metadata":{"name":"s","namespace":"ns",` + owner + `},"spec":{"ports":[{"port":1}]}}`,
	} {
		if _, err := api.Create(obj(o)); err != nil {
			t.Fatal(err)
		}
	}
	pvc, _ := api.Get(Ref{Type: TypePVC, Namespace: "ns", Name: "d"})
	if nestedString(pvc, "status", "phase") != "Bound" || !containsString(finalizersOf(pvc), pvcProtectionFinalizer) {
		t.Errorf("new PVC: status %v finalizers %v, want Bound with pvc-protection", nestedMap(pvc, "status"), finalizersOf(pvc))
	}
	// The parent has a finalizer: deletion only marks it.
	if err := api.Delete(Ref{Type: TypeEtcdCluster, Namespace: "ns", Name: "c"}, ""); err != nil {
		t.Fatal(err)
	}
	p, ok := api.Get(Ref{Type: TypeEtcdCluster, Namespace: "ns", Name: "c"})
	if g, _ := nestedInt(p, "metadata", "generation"); !ok || !isTerminating(p) || g != 2 {
		t.Fatalf("parent after delete: ok=%v terminating=%v generation=%d", ok, isTerminating(p), g)
	}
	// Removing the finalizer removes it, and the GC deletes the children:
	// the Service at once, the Pod gracefully, the PVC once the Pod is gone.
	if _, err := api.Mutate(RefOf(p), func(o Object) error { setFinalizers(o, nil); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, ok := api.Get(Ref{Type: TypeService, Namespace: "ns", Name: "s"}); ok {
		t.Error("service survived its owner")
	}
	pod, _ := api.Get(Ref{Type: TypePod, Namespace: "ns", Name: "p"})
	pvc, _ = api.Get(Ref{Type: TypePVC, Namespace: "ns", Name: "d"})
	if !isTerminating(pod) || !isTerminating(pvc) {
		t.Fatalf("pod terminating=%v, pvc terminating=%v; want both", isTerminating(pod), isTerminating(pvc))
	}
	if err := api.Remove(RefOf(pod), ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := api.Get(RefOf(pvc)); ok {
		t.Error("PVC survived the last pod using it")
	}
	want := []string{
		"ADDED EtcdCluster.etcd.database.coreos.com/v1beta2 c", "ADDED PersistentVolumeClaim.v1 d", "ADDED Pod.v1 p", "ADDED Service.v1 s",
		"MODIFIED EtcdCluster.etcd.database.coreos.com/v1beta2 c",
		"MODIFIED EtcdCluster.etcd.database.coreos.com/v1beta2 c", "DELETED EtcdCluster.etcd.database.coreos.com/v1beta2 c",
		"MODIFIED PersistentVolumeClaim.v1 d", "MODIFIED Pod.v1 p", "DELETED Service.v1 s",
		"DELETED Pod.v1 p", "MODIFIED PersistentVolumeClaim.v1 d", "DELETED PersistentVolumeClaim.v1 d",
	}
	if d := cmp.Diff(want, events); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}

func TestAPIServerValidation(t *testing.T) {
	api := NewAPIServer()
	tests := []struct {
		name, obj string
		ok        bool
	}{
		{"valid pod", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"n"},"spec":{"containers":[{"name":"c","image":"i"}]}}`, true},
		{"no containers", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p2","namespace":"n"},"spec":{}}`, false},
		{"bad hostname", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p3","namespace":"n"},"spec":{"hostname":"A_b","containers":[{"name":"c","image":"i"}]}}`, false},
		{"mount of no volume", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p4","namespace":"n"},"spec":{"containers":[{"name":"c","image":"i","volumeMounts":[{"name":"v","mountPath":"/x"}]}]}}`, false},
		{"wrong type", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p5","namespace":"n"},"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":"2379"}]}]}}`, false},
		{"service name starting with a digit", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"1svc","namespace":"n"},"spec":{}}`, false},
		{"pdb with both bounds", `{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"b","namespace":"n"},"spec":{"minAvailable":1,"maxUnavailable":1}}`, false},
	}
	for _, tt := range tests {
		_, err := api.Create(obj(tt.obj))
		if (err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v does not wrap ErrInvalid", tt.name, err)
		}
	}
	// Empty env values vanish, as on a real API server: a hook comparing
	// naively would see a difference on every sync.
	got, err := api.Create(obj(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"e","namespace":"n"},"spec":{"containers":[{"name":"c","image":"i","env":[{"name":"X","value":""}],"bogus":1}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := nestedMapValue(got, "spec", "containers").([]any)[0].(map[string]any)
	if d := cmp.Diff(map[string]any{"name": "X"}, c["env"].([]any)[0]); d != "" || c["bogus"] != nil {
		t.Errorf("stored container env (-want +got):\n%s bogus=%v", d, c["bogus"])
	}
	svc, err := api.Create(obj(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"h","namespace":"n"},"spec":{"clusterIP":"None"}}`))
	if err != nil {
		t.Fatal(err)
	}
	delete(nestedMap(svc, "spec"), "clusterIP")
	if _, _, err := api.Update(svc); err != nil {
		t.Errorf("update omitting clusterIP: %v", err)
	}
	nestedMap(svc, "spec")["clusterIP"] = ""
	ensureMap(svc, "spec")["clusterIP"] = "127.0.0.9"
	if _, _, err := api.Update(svc); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("update changing clusterIP: err = %v, want immutable", err)
	}
}

func TestBindListenURLs(t *testing.T) {
	ip, lo := netip.MustParseAddr("127.0.7.7"), netip.MustParseAddr("127.0.7.8")
	tests := map[string]string{
		"http://0.0.0.0:2379":                         "http://127.0.7.7:2379",
		"https://[::]:2379,http://localhost:2379":     "https://127.0.7.7:2379,http://127.0.7.8:2379",
		"http://0.0.0.0:2379,http://0.0.0.0:2379":     "http://127.0.7.7:2379",
		"http://10.1.2.3:2379":                        "http://10.1.2.3:2379",
		"unix://sock":                                 "unix://sock",
		"http://0.0.0.0:2381/metrics, http://[::1]:1": "http://127.0.7.7:2381/metrics,http://127.0.7.8:1",
	}
	for in, want := range tests {
		if got := bindListenURLs(in, ip, lo); got != want {
			t.Errorf("bindListenURLs(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMatchLabelSelector(t *testing.T) {
	labels := map[string]string{"app": "etcd", "tier": "db"}
	tests := []struct {
		sel  string
		want bool
	}{
		{`{}`, true},
		{`{"matchLabels":{"app":"etcd"}}`, true},
		{`{"matchLabels":{"app":"other"}}`, false},
		{`{"matchExpressions":[{"key":"tier","operator":"In","values":["db","x"]}]}`, true},
		{`{"matchExpressions":[{"key":"tier","operator":"NotIn","values":["db"]}]}`, false},
		{`{"matchExpressions":[{"key":"zone","operator":"DoesNotExist"}]}`, true},
		{`{"matchExpressions":[{"key":"zone","operator":"Exists"}]}`, false},
	}
	for _, tt := range tests {
		var sel any
		_ = json.Unmarshal([]byte(tt.sel), &sel)
		if got := matchLabelSelector(sel, labels); got != tt.want {
			t.Errorf("matchLabelSelector(%s) = %v, want %v", tt.sel, got, tt.want)
		}
	}
	if matchLabelSelector(nil, labels) {
		t.Error("a nil selector matched")
	}
}
