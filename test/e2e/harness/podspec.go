package harness

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// How a container becomes a process. The image is not run: its tag picks a
// binary built by `make etcd-bins`, and the parts of the container spec that
// depend on the Pod's own filesystem and network are translated:
//
//   - a busybox image runs the CoreOS etcd-operator's check-dns script,
//     emulated (checkdns.go), and nothing else;
//   - image <repo>/etcd:v3.6.16 -> bin/etcd-v3.6.16 (tag "3.6.16" or the
//     registry.k8s.io form "3.6.16-0" work too); a tag without a binary is an
//     image that cannot be pulled (ErrImagePull, then ImagePullBackOff);
//   - command[0] with base name etcd, etcdctl or etcdutl runs that binary of
//     the image's version; no command means the image's entrypoint, etcd;
//   - in an etcd image, a command[0] named etcd-hook under one of the
//     container's volumeMounts runs that file from the volume (this
//     project's static binary, copied there by a restore's first init
//     container), and an argument naming /usr/local/bin/etcd, etcdctl or
//     etcdutl, alone or as a --flag= value, becomes that binary of the
//     image's version, as the image's own files would be;
//   - $(VAR) in command, args and env values is expanded as the kubelet does,
//     $$ escapes it, unknown references stay as written;
//   - a value that starts with a volumeMount's mountPath is moved to the host
//     directory of that volume (emptyDir: per Pod; PVC: per claim; Secret:
//     per Pod, refreshed in place, but a subPath of it is a copy taken at
//     the container's start, as a bind mount of the file is); any other
//     absolute path (but /dev, /proc, /sys) lands in the container's own
//     writable layer, a directory emptied at every container start, so that
//     a data dir without a volume loses its data on restart as it would in
//     Kubernetes, and nothing is ever written to the host's /var;
//   - in --listen-* flags and ETCD_LISTEN_* variables, the wildcard host
//     becomes the Pod's IP: inside a Pod's network namespace 0.0.0.0 means
//     "this Pod", and the Pods here share the host's network. Loopback hosts
//     (127.0.0.1, localhost, [::1]) become a second address private to the
//     Pod, so that a member listening on its localhost only is unreachable
//     from other Pods and from probes, as it would be on a cluster, and two
//     Pods never fight over 127.0.0.1:2379.

// errImagePull marks an image without a binary.
var errImagePull = errors.New("image cannot be pulled")

// errContainerConfig marks a container the harness cannot set up
// (CreateContainerConfigError in kubelet terms).
var errContainerConfig = errors.New("container config")

var tagVersion = regexp.MustCompile(`^v?(\d+\.\d+\.\d+)(-\d+)?$`)

// imageVersion extracts "v3.6.16" from an image reference of an etcd image.
func imageVersion(image string) (string, error) {
	if strings.Contains(image, "@") {
		return "", fmt.Errorf("%w: %q: digests are not mapped to binaries", errImagePull, image)
	}
	repo, tag := image, "latest"
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		repo, tag = image[:i], image[i+1:]
	}
	if path.Base(repo) != "etcd" {
		return "", fmt.Errorf("%w: %q: the harness only runs etcd images", errImagePull, image)
	}
	m := tagVersion.FindStringSubmatch(tag)
	if m == nil {
		return "", fmt.Errorf("%w: %q: tag %q is not an etcd version", errImagePull, image, tag)
	}
	return "v" + m[1], nil
}

// launch is a container turned into a process.
type launch struct {
	Binary string
	Args   []string
	Env    []string
	Dir    string
}

// podContext is what the translation needs to know about the Pod.
type podContext struct {
	pod     *corev1.Pod
	ip      netip.Addr // the Pod IP
	lo      netip.Addr // stands for the Pod's own 127.0.0.1
	binDir  string
	volumes map[string]string // volume name -> host directory
	home    string
	rootfs  string // the container's writable layer
	// termLog is the host file behind the container's
	// terminationMessagePath.
	termLog string
	// subPaths replace the host path of volumeMounts, by index: the copy
	// a subPath mount of a Secret volume gets at the container's start.
	subPaths map[int]string
}

// hookImage reports this project's own image, which runs bin/etcd-hook:
// the backup agent runs in it.
func hookImage(image string) bool {
	repo := image
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		repo = image[:i]
	}
	return path.Base(repo) == "etcd-hook"
}

// planContainer translates one container. Errors wrap errImagePull or
// errContainerConfig.
func planContainer(pc podContext, c *corev1.Container) (*launch, error) {
	if busyboxImage(c.Image) {
		return planBusybox(pc, c)
	}
	var ver, etcdBin string
	if hookImage(c.Image) {
		etcdBin = filepath.Join(pc.binDir, "etcd-hook")
	} else {
		var err error
		if ver, err = imageVersion(c.Image); err != nil {
			return nil, err
		}
		etcdBin = filepath.Join(pc.binDir, "etcd-"+ver)
	}
	if err := testenv.Executable(etcdBin); err != nil {
		return nil, fmt.Errorf("%w: %q: %w", errImagePull, c.Image, err)
	}
	env, err := containerEnv(pc, c)
	if err != nil {
		return nil, err
	}
	lookup := func(name string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if env[i].name == name {
				return env[i].value, true
			}
		}
		return "", false
	}
	argv := make([]string, 0, len(c.Command)+len(c.Args))
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		argv = append(argv, expandVars(a, lookup))
	}
	mounts, err := mountMap(pc, c)
	if err != nil {
		return nil, err
	}
	bin := etcdBin
	if len(c.Command) > 0 {
		switch base := path.Base(argv[0]); {
		case ver != "" && base == "etcd-hook" && inVolume(argv[0], c.VolumeMounts):
			// This project's static binary, copied into a volume by an
			// earlier container, run in an etcd image.
			bin = rewritePath(argv[0], mounts)
			if err := testenv.Executable(bin); err != nil {
				return nil, fmt.Errorf("%w: %s: %w", errContainerConfig, argv[0], err)
			}
		case ver == "" && base == "etcd-hook":
		case ver == "":
			return nil, fmt.Errorf("%w: command %q: the etcd-hook image runs only /etcd-hook", errContainerConfig, argv[0])
		case base == "etcd" || base == "etcdctl" || base == "etcdutl":
			bin = filepath.Join(pc.binDir, base+"-"+ver)
			if err := testenv.Executable(bin); err != nil {
				return nil, fmt.Errorf("%w: %s not in image %q: %w", errContainerConfig, argv[0], c.Image, err)
			}
		default:
			return nil, fmt.Errorf("%w: command %q: the harness runs only etcd, etcdctl or etcdutl", errContainerConfig, argv[0])
		}
		argv = argv[1:]
	}
	args := make([]string, len(argv))
	for i, a := range argv {
		if ver != "" {
			mapped, err := imageBinaryArg(a, pc.binDir, ver)
			if err != nil {
				return nil, err
			}
			if mapped != a {
				args[i] = mapped // a host path already
				continue
			}
		}
		args[i] = rewriteArg(a, mounts, pc.ip, pc.lo)
		if i > 0 && isListenFlag(argv[i-1]) && !strings.Contains(argv[i-1], "=") {
			args[i] = bindListenURLs(rewritePath(a, mounts), pc.ip, pc.lo)
		}
	}
	hostname := pc.pod.Spec.Hostname
	if hostname == "" {
		hostname = pc.pod.Name
	}
	procEnv := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + pc.home,
		"HOSTNAME=" + hostname,
	}
	godebug := "netdns=go"
	for _, e := range env {
		v := e.value
		if e.name != "PATH" && !strings.Contains(v, ":") {
			v = rewritePath(v, mounts)
		}
		if strings.HasPrefix(e.name, "ETCD_LISTEN_") {
			v = bindListenURLs(v, pc.ip, pc.lo)
		}
		if e.name == "GODEBUG" {
			if v != "" {
				godebug = v + "," + godebug
			}
			continue
		}
		procEnv = append(procEnv, e.name+"="+v)
	}
	// The pure Go resolver reads the sandbox's resolv.conf; forcing it keeps a
	// cgo-built binary from consulting anything else.
	procEnv = append(procEnv, "GODEBUG="+godebug)
	dir := pc.rootfs
	if c.WorkingDir != "" {
		dir = rewritePath(c.WorkingDir, mounts)
	}
	return &launch{Binary: bin, Args: args, Env: procEnv, Dir: dir}, nil
}

type envVar struct{ name, value string }

// containerEnv resolves env in order, expanding references to earlier entries.
func containerEnv(pc podContext, c *corev1.Container) ([]envVar, error) {
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("%w: envFrom is not supported by the harness", errContainerConfig)
	}
	var out []envVar
	lookup := func(name string) (string, bool) {
		for i := len(out) - 1; i >= 0; i-- {
			if out[i].name == name {
				return out[i].value, true
			}
		}
		return "", false
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			out = append(out, envVar{e.Name, expandVars(e.Value, lookup)})
			continue
		}
		if e.ValueFrom.FieldRef == nil {
			return nil, fmt.Errorf("%w: env %s: only fieldRef is supported in valueFrom", errContainerConfig, e.Name)
		}
		v, err := fieldRef(pc, e.ValueFrom.FieldRef.FieldPath)
		if err != nil {
			return nil, fmt.Errorf("%w: env %s: %w", errContainerConfig, e.Name, err)
		}
		out = append(out, envVar{e.Name, v})
	}
	return out, nil
}

var labelRef = regexp.MustCompile(`^metadata\.(labels|annotations)\['([^']+)'\]$`)

func fieldRef(pc podContext, fp string) (string, error) {
	p := pc.pod
	switch fp {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "spec.nodeName":
		return nodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return pc.ip.String(), nil
	case "status.hostIP", "status.hostIPs":
		return hostIP, nil
	}
	if m := labelRef.FindStringSubmatch(fp); m != nil {
		if m[1] == "labels" {
			return p.Labels[m[2]], nil
		}
		return p.Annotations[m[2]], nil
	}
	return "", fmt.Errorf("fieldPath %q is not supported", fp)
}

// expandVars implements the kubelet's $(VAR) expansion.
func expandVars(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

type mountPoint struct{ ctr, host string }

// mountMap lists the container's mounts, longest path first so that nested
// mounts win.
func mountMap(pc podContext, c *corev1.Container) ([]mountPoint, error) {
	var out []mountPoint
	for i, m := range c.VolumeMounts {
		host, ok := pc.volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("%w: volumeMount %s: volume not available", errContainerConfig, m.Name)
		}
		if m.SubPath != "" {
			host = filepath.Join(host, filepath.Clean("/"+m.SubPath))
		}
		if p, ok := pc.subPaths[i]; ok {
			host = p
		}
		ctr := path.Clean(m.MountPath)
		if ctr == "/" {
			return nil, fmt.Errorf("%w: volumeMount %s: mounting over / is not supported", errContainerConfig, m.Name)
		}
		out = append(out, mountPoint{ctr: ctr, host: host})
	}
	if pc.termLog != "" {
		p := c.TerminationMessagePath
		if p == "" {
			p = corev1.TerminationMessagePathDefault
		}
		out = append(out, mountPoint{ctr: path.Clean(p), host: pc.termLog})
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].ctr) > len(out[j].ctr) })
	if pc.rootfs != "" {
		out = append(out, mountPoint{ctr: "/", host: pc.rootfs})
	}
	return out, nil
}

// hostPaths are paths a container shares with the host.
var hostPaths = []string{"/dev", "/proc", "/sys"}

func rewritePath(v string, mounts []mountPoint) string {
	if !strings.HasPrefix(v, "/") {
		return v
	}
	// A file the kubelet mounts, such as the termination message, even
	// under /dev.
	for _, m := range mounts {
		if v == m.ctr && m.ctr != "/" {
			return m.host
		}
	}
	for _, h := range hostPaths {
		if v == h || strings.HasPrefix(v, h+"/") {
			return v
		}
	}
	for _, m := range mounts {
		if m.ctr == "/" {
			return filepath.Join(m.host, v)
		}
		if v == m.ctr {
			return m.host
		}
		if rest, ok := strings.CutPrefix(v, m.ctr+"/"); ok {
			return filepath.Join(m.host, rest)
		}
	}
	return v
}

func isListenFlag(arg string) bool {
	name := strings.TrimLeft(arg, "-")
	return arg != name && strings.HasPrefix(name, "listen-")
}

// rewriteArg applies the volume and listen-address translations to one argument.
func rewriteArg(a string, mounts []mountPoint, ip, lo netip.Addr) string {
	if strings.HasPrefix(a, "-") {
		if name, val, ok := strings.Cut(a, "="); ok {
			val = rewritePath(val, mounts)
			if isListenFlag(name) {
				val = bindListenURLs(val, ip, lo)
			}
			return name + "=" + val
		}
		return a
	}
	return rewritePath(a, mounts)
}

// bindListenURLs maps wildcard hosts in a comma-separated URL list to the Pod
// IP and loopback hosts to the Pod's private loopback address, dropping
// duplicates that would make etcd bind twice.
func bindListenURLs(v string, ip, lo netip.Addr) string {
	var out []string
	seen := map[string]bool{}
	for _, u := range strings.Split(v, ",") {
		u = strings.TrimSpace(u)
		scheme, rest, ok := strings.Cut(u, "://")
		if ok {
			host, tail := rest, ""
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				host, tail = rest[:i], rest[i:]
			}
			h, port := host, ""
			if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
				h, port = host[:i], host[i:]
			}
			switch h {
			case "0.0.0.0", "[::]", "::", "":
				u = scheme + "://" + ip.String() + port + tail
			case "localhost", "127.0.0.1", "[::1]":
				u = scheme + "://" + lo.String() + port + tail
			}
		}
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	return strings.Join(out, ",")
}

// imageBinaries are the etcd image's own binaries, by path in the image.
var imageBinaries = map[string]string{"/usr/local/bin/etcd": "etcd", "/usr/local/bin/etcdctl": "etcdctl", "/usr/local/bin/etcdutl": "etcdutl"}

// imageBinaryArg rewrites an argument that names one of the etcd image's
// binaries, alone or as a flag's value, to that binary of the image's
// version: a program in the image (our restore step) runs the image's
// etcdutl by its path there.
func imageBinaryArg(a, binDir, ver string) (string, error) {
	prefix, value := "", a
	if i := strings.IndexByte(a, '='); i >= 0 && strings.HasPrefix(a, "-") {
		prefix, value = a[:i+1], a[i+1:]
	}
	base, ok := imageBinaries[value]
	if !ok {
		return a, nil
	}
	bin := filepath.Join(binDir, base+"-"+ver)
	if err := testenv.Executable(bin); err != nil {
		return "", fmt.Errorf("%w: %s not in the image of version %s: %w", errContainerConfig, value, ver, err)
	}
	return prefix + bin, nil
}

// inVolume reports a path under one of the container's volumeMounts.
func inVolume(p string, mounts []corev1.VolumeMount) bool {
	for _, m := range mounts {
		dir := path.Clean(m.MountPath)
		if dir != "/" && strings.HasPrefix(path.Clean(p), dir+"/") {
			return true
		}
	}
	return false
}
