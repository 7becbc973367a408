package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// Network partitions.
//
// Every Pod shares the host's loopback, so a Pod IP alone does not identify
// a Pod's traffic: a connection a Pod opens leaves from 127.0.0.1, the source
// the kernel picks for any 127/8 destination ("local 127.0.0.0/8 dev lo ...
// src 127.0.0.1"). A partition therefore matches, in nftables' output hook,
// where every loopback packet passes once with the socket that sent it:
//
//   - the Pod IP as source or destination: connections to the Pod (the other
//     members', the hook's, the kubelet's probes) and the Pod's answers;
//   - the group of the sending socket: with KubeletConfig.PodGroups the
//     kubelet runs each Pod's containers with a primary group of their own
//     (PodGroup), which tells the connections the Pod opens from the rest.
//
// Both directions are dropped, so TCP stalls as on a cut cable while the
// processes keep running and the Pod stays Running. netem would be the usual
// tool, but it is not in every kernel (nor is the prio qdisc it needs to be
// scoped to one address); nftables is.
//
// The rules live in a table of their own, created with nftables' owner flag
// by one long-running `nft -i` process: the kernel deletes the table when
// that process exits, and its Pdeathsig ends it with the test binary,
// however that ends. No rule outlives the test, and no other table is
// touched.

// ErrNoPartition means that partitions are not available here.
var ErrNoPartition = errors.New("network partitions unavailable")

// podGroupBase is far above any group a distribution allocates.
const podGroupBase = 0x7E5C0000

// PodGroup is the group the containers of the Pod with this IP run with
// when KubeletConfig.PodGroups is set. Pod IPs are never reused within a
// test binary and are unique on the host while in use, so groups are too.
func PodGroup(ip netip.Addr) uint32 {
	b := ip.As4()
	return podGroupBase | uint32(b[2])<<8 | uint32(b[3])
}

// RequirePartition skips the test when partitions are unavailable (fails
// with CI=true, where the image must provide nft).
func RequirePartition(t testenv.SkipFailer) {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		testenv.SkipOrFail(t, "%v: nft not found (make e2e-deps, or apt-get install nftables): %v", ErrNoPartition, err)
	}
}

// podGroup is the group for a Pod's containers, 0 to keep the harness'.
func (k *Kubelet) podGroup(ip netip.Addr) uint32 {
	if !k.cfg.PodGroups || !ip.IsValid() {
		return 0
	}
	return PodGroup(ip)
}

// Partition cuts a Pod off the network: nothing reaches it and nothing it
// sends leaves, its own loopback traffic included. Its processes run on,
// so the Pod stays Running (its readiness probe fails, as a probe across a
// cut would). It needs KubeletConfig.PodGroups and nft.
func (k *Kubelet) Partition(namespace, pod string) error {
	ref := Ref{Type: TypePod, Namespace: namespace, Name: pod}
	obj, ok := k.api.Get(ref)
	if !ok {
		return fmt.Errorf("partition pod %s/%s: %w", namespace, pod, ErrNotFound)
	}
	if !k.cfg.PodGroups {
		return fmt.Errorf("partition pod %s/%s: %w: the kubelet runs without KubeletConfig.PodGroups", namespace, pod, ErrNoPartition)
	}
	ip, err := netip.ParseAddr(nestedString(obj, "status", "podIP"))
	if err != nil || !ip.Is4() {
		return fmt.Errorf("partition pod %s/%s: no pod IP yet", namespace, pod)
	}
	fw, err := k.firewall()
	if err != nil {
		return fmt.Errorf("partition pod %s/%s: %w", namespace, pod, err)
	}
	if err := fw.cut(namespace+"/"+pod, ip); err != nil {
		return fmt.Errorf("partition pod %s/%s: %w", namespace, pod, err)
	}
	k.event(ref, "harness fault: partitioned (pod IP %s, group %d)", ip, PodGroup(ip))
	return nil
}

// Heal undoes Partition, also for a Pod that is gone since.
func (k *Kubelet) Heal(namespace, pod string) error {
	k.fwMu.Lock()
	fw := k.fw
	k.fwMu.Unlock()
	if fw == nil {
		return fmt.Errorf("heal pod %s/%s: not partitioned", namespace, pod)
	}
	ip, err := fw.mend(namespace + "/" + pod)
	if err != nil {
		return fmt.Errorf("heal pod %s/%s: %w", namespace, pod, err)
	}
	k.event(Ref{Type: TypePod, Namespace: namespace, Name: pod}, "harness fault: healed (pod IP %s)", ip)
	return nil
}

// FirewallTable names the nftables table of the kubelet's partitions, ""
// before the first Partition and after Stop.
func (k *Kubelet) FirewallTable() string {
	k.fwMu.Lock()
	defer k.fwMu.Unlock()
	if k.fw == nil {
		return ""
	}
	return k.fw.table
}

func (k *Kubelet) firewall() (*firewall, error) {
	k.fwMu.Lock()
	defer k.fwMu.Unlock()
	if k.fw != nil {
		return k.fw, nil
	}
	if k.stopped {
		return nil, errors.New("kubelet stopped")
	}
	fw, err := startFirewall()
	if err != nil {
		return nil, err
	}
	k.fw = fw
	return fw, nil
}

// closeFirewall heals every partition at once by deleting the table.
func (k *Kubelet) closeFirewall() {
	k.fwMu.Lock()
	fw := k.fw
	k.fw = nil
	k.fwMu.Unlock()
	if fw != nil {
		fw.close()
	}
}

var firewallSeq atomic.Int64

// firewall is one `nft -i` process and the table it owns.
type firewall struct {
	table string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   chan string // stdout and stderr, interleaved as nft wrote them
	done  chan struct{}

	mu     sync.Mutex
	parted map[string]netip.Addr // partitioned Pods (namespace/name) by IP
}

// nftTimeout bounds one exchange with nft; it answers in milliseconds.
const nftTimeout = 5 * time.Second

func startFirewall() (*firewall, error) {
	path, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("%w: nft not found (apt-get install nftables): %v", ErrNoPartition, err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("nft: %w", err)
	}
	cmd := exec.Command(path, "-i")
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	// One pipe for both streams keeps an error ahead of the listing that
	// follows its command.
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("nft: %w", err)
	}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("%w: start nft: %v", ErrNoPartition, err)
	}
	pw.Close()
	fw := &firewall{
		table: fmt.Sprintf("etcdhook_e2e_%d_%d", os.Getpid(), firewallSeq.Add(1)),
		cmd:   cmd, stdin: stdin, out: make(chan string, 256), done: make(chan struct{}),
		parted: map[string]netip.Addr{},
	}
	go func() {
		defer close(fw.out)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fw.out <- sc.Text()
		}
		pr.Close()
	}()
	go func() {
		_ = cmd.Wait()
		close(fw.done)
	}()
	t := "inet " + fw.table
	err = fw.run(
		"add table "+t+" { flags owner; }",
		"add set "+t+" addrs { type ipv4_addr; }",
		"add set "+t+" groups { type gid; }",
		"add chain "+t+" out { type filter hook output priority 0; policy accept; }",
		"add rule "+t+" out ip saddr @addrs counter drop",
		"add rule "+t+" out ip daddr @addrs counter drop",
		"add rule "+t+" out meta skgid @groups counter drop",
	)
	if err != nil {
		fw.close()
		return nil, fmt.Errorf("%w: %v", ErrNoPartition, err)
	}
	return fw, nil
}

// run sends commands, then lists the table: the listing marks the end of
// their output, and an "Error:" line before it is a failed command.
func (fw *firewall) run(cmds ...string) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	script := strings.Join(cmds, "\n") + "\nlist table inet " + fw.table + "\n"
	if _, err := io.WriteString(fw.stdin, script); err != nil {
		return fmt.Errorf("nft: %w", err)
	}
	timeout := time.NewTimer(nftTimeout)
	defer timeout.Stop()
	var lines []string
	for {
		select {
		case line, ok := <-fw.out:
			if !ok {
				return fmt.Errorf("nft exited: %s", strings.Join(lines, "\n"))
			}
			lines = append(lines, line)
			if line != "}" {
				continue
			}
			for _, l := range lines {
				if strings.HasPrefix(l, "Error:") {
					return fmt.Errorf("nft: %s", strings.Join(lines, "\n"))
				}
			}
			return nil
		case <-timeout.C:
			return fmt.Errorf("nft did not answer within %s: %s", nftTimeout, strings.Join(lines, "\n"))
		}
	}
}

func (fw *firewall) cut(key string, ip netip.Addr) error {
	t := "inet " + fw.table
	if err := fw.run(
		fmt.Sprintf("add element %s addrs { %s }", t, ip),
		fmt.Sprintf("add element %s groups { %d }", t, PodGroup(ip)),
	); err != nil {
		return err
	}
	fw.mu.Lock()
	fw.parted[key] = ip
	fw.mu.Unlock()
	return nil
}

func (fw *firewall) mend(key string) (netip.Addr, error) {
	fw.mu.Lock()
	ip, ok := fw.parted[key]
	fw.mu.Unlock()
	if !ok {
		return ip, errors.New("not partitioned")
	}
	t := "inet " + fw.table
	if err := fw.run(
		fmt.Sprintf("delete element %s addrs { %s }", t, ip),
		fmt.Sprintf("delete element %s groups { %d }", t, PodGroup(ip)),
	); err != nil {
		return ip, err
	}
	fw.mu.Lock()
	delete(fw.parted, key)
	fw.mu.Unlock()
	return ip, nil
}

// close ends nft; the kernel deletes the table it owns with it.
func (fw *firewall) close() {
	_ = fw.stdin.Close()
	select {
	case <-fw.done:
	case <-time.After(2 * time.Second):
		_ = fw.cmd.Process.Kill()
		<-fw.done
	}
}
