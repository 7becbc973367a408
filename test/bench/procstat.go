package bench

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// procStatus is what the kernel says about a process's memory.
type procStatus struct {
	rss, peakRSS int64 // bytes: VmRSS, and VmHWM, its peak since the start
	threads      int
}

func readProcStatus(pid int) (procStatus, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procStatus{}, err
	}
	var st procStatus
	for line := range strings.Lines(string(b)) {
		key, value, _ := strings.Cut(line, ":")
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		switch key {
		case "VmRSS":
			st.rss = n << 10 // kB
		case "VmHWM":
			st.peakRSS = n << 10
		case "Threads":
			st.threads = int(n)
		}
	}
	if st.rss == 0 {
		return procStatus{}, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return st, nil
}

// readProcCPU is the CPU time a process has used, user and system, from
// /proc/<pid>/stat (in clock ticks of 1/100 s, Linux's USER_HZ).
func readProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted from 3 (state) start after its closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	fields := strings.Fields(string(b[i+1:]))
	if i < 0 || len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %.100q", pid, b)
	}
	var ticks int64
	for _, f := range fields[11:13] { // utime, stime: fields 14 and 15
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// readMachineCPU is the CPU time every core of the machine has spent on
// anything but idling (user, nice, system, irq, softirq, steal), from the
// first line of /proc/stat, in the same clock ticks: what all processes
// used together.
func readMachineCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: %.100q", line)
	}
	var ticks int64
	for i, f := range fields[1:9] {
		// user nice system idle iowait irq softirq steal
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// scrapeMetrics reads the named unlabelled samples from a Prometheus
// text exposition; the names it does not find are left out.
func scrapeMetrics(client *http.Client, url string, names ...string) (map[string]float64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 || !slices.Contains(names, fields[0]) {
			continue
		}
		if v, err := strconv.ParseFloat(fields[1], 64); err == nil {
			out[fields[0]] = v
		}
	}
	return out, sc.Err()
}
