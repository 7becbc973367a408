package etcdbackup

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Following the run Pods: which run is current, whether it ended, and
// what its termination message reports. A run that ends without a result
// is recorded as a failure that says why, never left open.
// runState is what followRuns found.
type runState int

const (
	idle    runState = iota // no run, or one recorded as ended
	ended                   // a run ended and is recorded by this answer
	running                 // a run is in flight
)

// followRuns keeps the run in flight, records a run that has ended (and
// keeps its Pod until the status that records it comes back), and drops
// every other run Pod: at most one runs.
func (p *planner) followRuns() runState {
	current := p.currentRun()
	if current == nil {
		return p.missingRun()
	}
	last := p.status.LastRun
	if last == nil || last.Name != current.Name {
		// A run whose start the status never recorded (its write was
		// lost): it is the current run all the same.
		last = &v1beta2.BackupRun{Name: current.Name, Generation: runGeneration(current), Start: current.CreationTimestamp,
			ConsecutiveFailures: p.failures(), Request: current.Annotations[AnnotationRequest]}
		p.status.LastRun = last
	}
	switch {
	case last.End != nil:
		// Recorded by the status this request carries: the Pod can go.
		return idle
	case finished(current):
		p.record(last, outcome(current))
		p.children = append(p.children, plan.KeepPod(current))
		return ended
	case p.o.Now.Sub(last.Start.Time) > p.timeout()+startGrace:
		// Dropped: Metacontroller deletes it, and the agent, if it ever
		// started, aborts its upload on SIGTERM.
		p.record(last, report.BackupResult{Reason: fmt.Sprintf("the backup Pod %s did not finish within %s%s", current.Name, p.timeout()+startGrace, waitingReason(current))})
		return ended
	}
	p.children = append(p.children, plan.KeepPod(current))
	p.progressing = cond{metav1.ConditionTrue, ReasonRunning, "backup " + current.Name + " is running"}
	p.resync = resyncRunning
	return running
}

// missingRun handles a run the status says was started but no Pod shows:
// not created yet where the request was read from (an informer cache
// behind), or deleted before it ended. Its Pod is asked for again under
// the same name, which changes nothing if it exists, until the run is
// overdue and counted as failed.
func (p *planner) missingRun() runState {
	last := p.status.LastRun
	if last == nil || last.End != nil {
		return idle
	}
	if p.o.Now.Sub(last.Start.Time) > p.timeout()+startGrace {
		p.record(last, report.BackupResult{Reason: fmt.Sprintf("the backup Pod %s is gone and reported no result", last.Name)})
		return ended
	}
	t, reason, _ := p.target()
	if reason != "" || len(p.o.SpecErrors) > 0 {
		p.record(last, report.BackupResult{Reason: fmt.Sprintf("the backup Pod %s is gone and reported no result", last.Name)})
		return ended
	}
	p.children = append(p.children, plan.Child{Kind: plan.KindPod, Name: last.Name, Object: p.runPod(last.Name, t, last.Request)})
	p.progressing = cond{metav1.ConditionTrue, ReasonRunning, "backup " + last.Name + " is running"}
	p.resync = resyncRunning
	return running
}

// currentRun is the run the status names, or a newer one it missed.
func (p *planner) currentRun() *corev1.Pod {
	var current *corev1.Pod
	for _, pod := range p.o.Pods {
		if current == nil || runNumber(pod.Name) > runNumber(current.Name) {
			current = pod
		}
	}
	if current == nil {
		return nil
	}
	if last := p.status.LastRun; last != nil && runNumber(current.Name) < runNumber(last.Name) {
		return nil
	}
	return current
}

func (p *planner) failures() int {
	if last := p.status.LastRun; last != nil && !last.Succeeded {
		return last.ConsecutiveFailures
	}
	return 0
}

// record writes a run's outcome into the status.
func (p *planner) record(run *v1beta2.BackupRun, res report.BackupResult) {
	end := metav1.NewTime(p.o.Now.UTC().Truncate(time.Second))
	if !res.End.IsZero() {
		end = metav1.NewTime(res.End.UTC().Truncate(time.Second))
	}
	run.End, run.Succeeded, run.Reason = &end, res.Succeeded, res.Reason
	st := &p.status
	st.Succeeded, st.Reason = res.Succeeded, res.Reason
	if !res.Succeeded {
		// The run carried the failures before it since it started.
		run.ConsecutiveFailures++
		return
	}
	run.ConsecutiveFailures = 0
	st.EtcdVersion, st.EtcdRevision, st.LastSuccessDate = res.EtcdVersion, res.EtcdRevision, &end
	st.LastBackup = &v1beta2.StoredBackup{
		Location: res.Location, Size: res.Size, SHA256: res.SHA256, Revision: res.EtcdRevision,
		EtcdVersion: res.EtcdVersion, ClusterID: res.ClusterID, Time: end,
	}
}
func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// outcome reads a finished run: the agent's result from the termination
// message, or what the kubelet says when there is none (killed, evicted,
// never started).
func outcome(p *corev1.Pod) report.BackupResult {
	for _, cs := range p.Status.ContainerStatuses {
		t := cs.State.Terminated
		if cs.Name != ContainerName || t == nil {
			continue
		}
		var res report.BackupResult
		if t.Message != "" && json.Unmarshal([]byte(t.Message), &res) == nil && (res.Succeeded || res.Reason != "") {
			if res.Succeeded && t.ExitCode != 0 {
				res.Succeeded, res.Reason = false, fmt.Sprintf("the agent reported success but exited %d", t.ExitCode)
			}
			return res
		}
		return report.BackupResult{Reason: fmt.Sprintf("the backup container ended without a result: %s (exit code %d) %s", t.Reason, t.ExitCode, t.Message)}
	}
	why := string(p.Status.Phase)
	if p.Status.Reason != "" {
		why += ": " + p.Status.Reason + " " + p.Status.Message
	}
	return report.BackupResult{Reason: "the backup Pod ended without a result: " + strings.TrimSpace(why)}
}

func waitingReason(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return fmt.Sprintf(" (waiting: %s %s)", w.Reason, w.Message)
		}
	}
	return ""
}

func runGeneration(p *corev1.Pod) int64 {
	g, _ := strconv.ParseInt(p.Labels[LabelGeneration], 10, 64)
	return g
}
