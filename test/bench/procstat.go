package bench

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
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
