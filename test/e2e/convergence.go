package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// Figure is one scenario's line in the convergence table.
type Figure struct {
	Scenario string
	// Wall runs from the change (create, patch, delete, kill) to the first
	// moment the world was checked converged.
	Wall time.Duration
	// Floor is what etcd alone needed: the sum of the start-to-Ready times
	// of the etcd processes started for the change. Summed, not the
	// longest, because the hook adds members one at a time by design.
	Floor time.Duration
	// Refused is how long etcd refused the hook's membership steps in the
	// window ("not ready yet": its strict reconfiguration check wants every
	// voter connected for 5 s before the next add, and a learner caught up
	// before its promotion), from each first refusal to the step going
	// through. It is etcd's time as much as its starts are.
	Refused time.Duration
	// Starts is how many etcd processes make up the floor.
	Starts int
	Acked  int
	Lost   int
	// Syncs is how many hook calls Metacontroller made in the wall time,
	// and PeakSyncs the most in any one second of it: together they tell
	// pacing by resyncAfterSeconds from a sync loop.
	Syncs     int
	PeakSyncs int
}

// Ratio is wall over floor, or "-" when the change needed no etcd start
// (a scale-down, a deletion): there is no floor to compare with.
func (f Figure) Ratio() string { return ratio(f.Wall, f.Floor) }

// RatioWithRefusals is wall over the floor and etcd's refusals together:
// the hook's own share of the time.
func (f Figure) RatioWithRefusals() string {
	if f.Floor <= 0 {
		return "-"
	}
	return ratio(f.Wall, f.Floor+f.Refused)
}

func ratio(wall, floor time.Duration) string {
	if floor <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(wall)/float64(floor))
}

// ReportHeader is the table's header, markdown so that it can go into
// BENCHMARKS.md as it is.
const ReportHeader = "| scenario | wall | floor | ratio | etcd refused | ratio to floor + refused | acknowledged | lost | etcd starts | hook calls (peak/s) |\n|---|---|---|---|---|---|---|---|---|---|\n"

// Line renders the figure as a table row.
func (f Figure) Line() string {
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %d | %d | %d | %d (%d) |", f.Scenario, round(f.Wall), round(f.Floor), f.Ratio(),
		round(f.Refused), f.RatioWithRefusals(), f.Acked, f.Lost, f.Starts, f.Syncs, f.PeakSyncs)
}

func round(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return d.Round(10 * time.Millisecond).String()
}

// Floor sums the start-to-Ready times of the cluster's etcd processes that
// started within [from, to] and were Ready by to. A process that never got
// ready in the window did not help converge, so it is not part of the floor.
func Floor(k *harness.Kubelet, c *Cluster, from, to time.Time) (time.Duration, int) {
	var sum time.Duration
	n := 0
	for _, r := range k.ContainerRuns() {
		if r.Namespace != c.Namespace || !strings.HasPrefix(r.Pod, c.Name+"-") {
			continue
		}
		if r.Started.Before(from) || r.Started.After(to) || r.Ready.IsZero() || r.Ready.After(to) {
			continue
		}
		sum += r.Ready.Sub(r.Started)
		n++
	}
	return sum, n
}

// MaxSyncsPerSecond bounds the hook calls in any one second of a scenario.
// Metacontroller syncs again on every change of the parent, its own status
// included, so a hook whose answers keep changing the status (say, naming a
// fresh random member each time) loops at over a hundred calls a second. The
// hook paces itself with resyncAfterSeconds, 0.5 s at the fastest, and a
// starting Pod changes its status a few times: a healthy second has a handful.
const MaxSyncsPerSecond = 25

// PeakPerSecond is the most hook calls that started within one second, in
// [from, to], and when that second began.
func PeakPerSecond(records []harness.SyncRecord, from, to time.Time) (int, time.Time) {
	var times []time.Time
	for _, r := range records {
		if !r.Start.Before(from) && !r.Start.After(to) {
			times = append(times, r.Start)
		}
	}
	best, at, j := 0, time.Time{}, 0
	for i, t := range times {
		for times[j].Add(time.Second).Before(t) {
			j++
		}
		if n := i - j + 1; n > best {
			best, at = n, times[j]
		}
	}
	return best, at
}

// reportEnv names the file the table lines are appended to.
const reportEnv = "ETCDHOOK_E2E_REPORT"

var reportMu sync.Mutex

// reportPath resolves ETCDHOOK_E2E_REPORT; a relative path is taken from
// the module root, because go test runs in the package directory while
// people run make from the root.
func reportPath() (string, error) { return testenv.FromModuleRoot(os.Getenv(reportEnv)) }

// StartReport truncates the report file and writes the header.
func StartReport() error {
	p, err := reportPath()
	if err != nil || p == "" {
		return err
	}
	return os.WriteFile(p, []byte(ReportHeader), 0o644)
}

// Report logs the figure and appends it to the report file.
func Report(t testing.TB, f Figure) {
	t.Helper()
	appendTableLine(t, "figures", ReportHeader, f.Line(), reportPath)
}

// appendTableLine logs a table line under its header and appends it to the
// file that path names, if any.
func appendTableLine(t testing.TB, table, header, line string, path func() (string, error)) {
	t.Helper()
	t.Log(table + ": " + header[:strings.IndexByte(header, '\n')])
	t.Log(table + ": " + line)
	p, err := path()
	if err != nil {
		t.Errorf("%s: %v", table, err)
		return
	}
	if p == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	file, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Errorf("%s: %v", table, err)
		return
	}
	defer file.Close()
	if _, err := fmt.Fprintln(file, line); err != nil {
		t.Errorf("%s: %v", table, err)
	}
}

// HookActions scrapes etcd_hook_membership_actions_total from the hook's
// /metrics, keyed "action/result". The counters live in the hook process,
// so they restart from zero with it.
func HookActions(hookURL string) (map[string]float64, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Get(hookURL + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: HTTP %d", resp.StatusCode)
	}
	return parseActions(resp.Body)
}

func parseActions(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	const name = "etcd_hook_membership_actions_total{"
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return nil, fmt.Errorf("metrics: cannot parse %q", line)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: cannot parse %q: %w", line, err)
		}
		var action, result string
		for _, kv := range strings.Split(labels, ",") {
			k, val, _ := strings.Cut(kv, "=")
			val = strings.Trim(val, `"`)
			switch k {
			case "action":
				action = val
			case "result":
				result = val
			}
		}
		out[action+"/"+result] = v
	}
	return out, sc.Err()
}

// LoggedAction is one "membership step made" line of the hook's log.
type LoggedAction struct {
	Time   string
	Action string // e.g. "add learner example-x (http://...)"
}

// LoggedActions reads the membership changes the hook made for a cluster
// from its log, across restarts (the log file is appended to).
func LoggedActions(logPath string, c *Cluster) ([]LoggedAction, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, fmt.Errorf("hook log: %w", err)
	}
	defer f.Close()
	var out []LoggedAction
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var line struct {
			Time      string `json:"time"`
			Msg       string `json:"msg"`
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
			Action    string `json:"action"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue // the harness' own lines
		}
		if line.Msg == "membership step made" && line.Namespace == c.Namespace && line.Name == c.Name {
			out = append(out, LoggedAction{Time: line.Time, Action: line.Action})
		}
	}
	return out, sc.Err()
}

// Refused sums, for a cluster's membership steps in [from, to], the time
// from etcd's first "not ready yet" to the step going through (or to to).
// Steps are told apart by kind only: an add names a fresh member on each
// attempt.
func Refused(logPath string, c *Cluster, from, to time.Time) (time.Duration, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return 0, fmt.Errorf("hook log: %w", err)
	}
	defer f.Close()
	firstRefusal := map[string]time.Time{}
	var sum time.Duration
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var line struct {
			Time      time.Time `json:"time"`
			Msg       string    `json:"msg"`
			Namespace string    `json:"namespace"`
			Name      string    `json:"name"`
			Action    string    `json:"action"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Namespace != c.Namespace || line.Name != c.Name {
			continue
		}
		if line.Time.Before(from) || line.Time.After(to) {
			continue
		}
		kind, _, _ := strings.Cut(line.Action, " ")
		switch line.Msg {
		case "membership step not possible yet":
			if _, ok := firstRefusal[kind]; !ok {
				firstRefusal[kind] = line.Time
			}
		case "membership step made":
			if t, ok := firstRefusal[kind]; ok {
				sum += line.Time.Sub(t)
				delete(firstRefusal, kind)
			}
		}
	}
	for _, t := range firstRefusal {
		sum += to.Sub(t)
	}
	return sum, sc.Err()
}

// CountActions counts logged actions by their first word (add, promote, remove, ...).
func CountActions(actions []LoggedAction) map[string]int {
	out := map[string]int{}
	for _, a := range actions {
		verb, _, _ := strings.Cut(a.Action, " ")
		out[verb]++
	}
	return out
}
