package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The CoreOS etcd-operator's check-dns init container, without busybox.
//
// From v0.8.0 on, the operator gave every member Pod an init container
// running, in a busybox image, a shell loop until the member's own DNS name
// resolves (etcd's TLS listeners look their peers up by reverse DNS at
// once). v0.9.3 and later:
//
//	TIMEOUT_READY=<spec.pod.DNSTimeoutInSecond, 0 by default>
//	while ( ! nslookup <member>.<cluster>.<namespace>.svc )
//	do
//		TIMEOUT_READY=$(( TIMEOUT_READY-1 ))
//		if [ $TIMEOUT_READY -eq 0 ]; then echo "Timed out waiting for DNS entry"; exit 1; fi
//		sleep 1
//	done
//
// and before: `while ( ! nslookup <addr> ) do sleep 2 done`. The counter
// is decremented before it is tested: 0 (or less) never times out, N > 0
// gives up with exit 1 after N failed lookups.
//
// The kubelet runs this script, and only this one, recognised by its text
// (comments and whitespace aside), as a process of the test binary itself:
// harness.Main, called from TestMain, sees checkDNSArg and runs
// runCheckDNS instead of the tests. It resolves through the sandbox's
// resolv.conf like any process of a Pod, so the harness DNS server answers
// by its own rules (Options.StrictDNS included), and it behaves as the
// shell does: one lookup per try, "Timed out waiting for DNS entry" on
// stdout, SIGTERM ignored as by a shell running as a container's PID 1 (the
// kubelet's SIGKILL after the grace period ends it). Any other command in
// a busybox image is a container config error.

// checkDNSArg is argv[1] of the emulated check-dns process. A test binary
// whose TestMain does not call Main refuses it as an unknown flag, so the
// container fails instead of running the tests.
const checkDNSArg = "-harness.check-dns"

// checkDNS is a recognised check-dns script.
type checkDNS struct {
	Host string
	// Timeout is TIMEOUT_READY; Counted is false for the scripts before
	// v0.9.3, which have no counter and wait forever.
	Timeout int
	Counted bool
	Sleep   int // seconds between lookups
}

var (
	checkDNSCounted = regexp.MustCompile(`^TIMEOUT_READY=(-?\d+) while \( ! nslookup ([A-Za-z0-9.-]+) \) do ` +
		`TIMEOUT_READY=\$\(\( TIMEOUT_READY-1 \)\) if \[ \$TIMEOUT_READY -eq 0 \] then ` +
		`echo "Timed out waiting for DNS entry" exit 1 fi sleep (\d+) done$`)
	checkDNSPlain = regexp.MustCompile(`^while \( ! nslookup ([A-Za-z0-9.-]+) \) do sleep (\d+) done$`)
)

// busyboxImage reports an image of a busybox repository, whatever its tag
// or registry (spec.pod.busyboxImage may name another).
func busyboxImage(image string) bool {
	repo := image
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	return path.Base(repo) == "busybox"
}

// parseCheckDNS recognises the check-dns command: sh -c <script>, the
// script one of the operator's, told apart by its words (comment lines
// dropped, ";" and newlines read as the separators they are).
func parseCheckDNS(argv []string) (checkDNS, bool) {
	if len(argv) != 3 || path.Base(argv[0]) != "sh" || (argv[1] != "-c" && argv[1] != "-ec") {
		return checkDNS{}, false
	}
	var words []string
	for _, line := range strings.Split(argv[2], "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		words = append(words, strings.Fields(strings.ReplaceAll(line, ";", " "))...)
	}
	script := strings.Join(words, " ")
	if m := checkDNSCounted.FindStringSubmatch(script); m != nil {
		timeout, err1 := strconv.Atoi(m[1])
		sleep, err2 := strconv.Atoi(m[3])
		if err1 == nil && err2 == nil {
			return checkDNS{Host: m[2], Timeout: timeout, Counted: true, Sleep: sleep}, true
		}
	}
	if m := checkDNSPlain.FindStringSubmatch(script); m != nil {
		if sleep, err := strconv.Atoi(m[2]); err == nil {
			return checkDNS{Host: m[1], Sleep: sleep}, true
		}
	}
	return checkDNS{}, false
}

func (c checkDNS) args() []string {
	timeout := "none"
	if c.Counted {
		timeout = strconv.Itoa(c.Timeout)
	}
	return []string{checkDNSArg, c.Host, timeout, strconv.Itoa(c.Sleep)}
}

var testBinary = sync.OnceValues(os.Executable)

// planBusybox turns a busybox container into its emulation. Errors wrap
// errContainerConfig.
func planBusybox(pc podContext, c *corev1.Container) (*launch, error) {
	argv := append(append([]string{}, c.Command...), c.Args...)
	check, ok := parseCheckDNS(argv)
	if !ok {
		return nil, fmt.Errorf("%w: image %q: the harness runs only the CoreOS etcd-operator's check-dns script in busybox, not %q",
			errContainerConfig, c.Image, strings.Join(argv, " "))
	}
	exe, err := testBinary()
	if err != nil {
		return nil, fmt.Errorf("%w: check-dns runs as the test binary: %w", errContainerConfig, err)
	}
	hostname := pc.pod.Spec.Hostname
	if hostname == "" {
		hostname = pc.pod.Name
	}
	return &launch{
		Binary: exe,
		Args:   check.args(),
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
			"HOSTNAME=" + hostname, "GODEBUG=netdns=go"},
		Dir: pc.rootfs,
	}, nil
}

// checkDNSMain runs the emulated check-dns process when argv (os.Args[1:])
// asks for it, and reports whether it did.
func checkDNSMain(argv []string) (int, bool) {
	if len(argv) == 0 || argv[0] != checkDNSArg {
		return 0, false
	}
	if len(argv) != 4 {
		fmt.Fprintf(os.Stderr, "check-dns: want host, timeout and sleep, got %q\n", argv[1:])
		return 2, true
	}
	c := checkDNS{Host: argv[1]}
	var err error
	if argv[2] != "none" {
		c.Counted = true
		if c.Timeout, err = strconv.Atoi(argv[2]); err != nil {
			fmt.Fprintf(os.Stderr, "check-dns: timeout %q: %v\n", argv[2], err)
			return 2, true
		}
	}
	if c.Sleep, err = strconv.Atoi(argv[3]); err != nil {
		fmt.Fprintf(os.Stderr, "check-dns: sleep %q: %v\n", argv[3], err)
		return 2, true
	}
	// A shell that is a container's PID 1 has no SIGTERM handler, and the
	// kernel drops signals PID 1 does not handle.
	signal.Ignore(syscall.SIGTERM)
	return runCheckDNS(c, nslookup, time.Sleep, os.Stdout), true
}

// runCheckDNS is the script's loop. lookup is one nslookup, true when the
// name resolves.
func runCheckDNS(c checkDNS, lookup func(host string) bool, sleep func(time.Duration), stdout io.Writer) int {
	timeout := c.Timeout
	for !lookup(c.Host) {
		if c.Counted {
			timeout--
			if timeout == 0 {
				fmt.Fprintln(stdout, "Timed out waiting for DNS entry")
				return 1
			}
		}
		sleep(time.Duration(c.Sleep) * time.Second)
	}
	return 0
}

// nslookup prints what busybox 1.28's nslookup prints and reports whether
// host resolved.
func nslookup(host string) bool {
	server := nameserver()
	fmt.Printf("Server:    %s\nAddress 1: %s\n\n", server, server)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil || len(addrs) == 0 {
		fmt.Fprintf(os.Stderr, "nslookup: can't resolve '%s'\n", host)
		return false
	}
	fmt.Printf("Name:      %s\n", host)
	for i, a := range addrs {
		line := fmt.Sprintf("Address %d: %s", i+1, a)
		if names, err := net.DefaultResolver.LookupAddr(ctx, a); err == nil && len(names) > 0 {
			line += " " + strings.TrimSuffix(names[0], ".")
		}
		fmt.Println(line)
	}
	return true
}

// nameserver is the first nameserver of /etc/resolv.conf.
func nameserver() string {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return "?"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) >= 2 && fields[0] == "nameserver" {
			return fields[1]
		}
	}
	return "?"
}
