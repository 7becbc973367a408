package hooks

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/plan/etcdbackup"
)

// ArchiveStatusReader reads what a continuous backup's archiver Pod
// serves: the one piece of an EtcdBackup sync that is not in the request,
// since the archiver runs on and has no termination message to give.
type ArchiveStatusReader interface {
	ReadArchiveStatus(ctx context.Context, pod *corev1.Pod) (*report.ArchiveStatus, error)
}

// ArchiveStatusTimeout bounds one read of an archiver's status: well
// inside Metacontroller's 10 s hook timeout, with the plan still to make.
const ArchiveStatusTimeout = 2 * time.Second

// HTTPArchiveStatus reads the status over HTTP at the Pod's IP, on
// report.ArchiveStatusPort (Port overrides it, for tests).
type HTTPArchiveStatus struct {
	Client *http.Client
	Port   int
}

// ReadArchiveStatus implements ArchiveStatusReader.
func (h HTTPArchiveStatus) ReadArchiveStatus(ctx context.Context, pod *corev1.Pod) (*report.ArchiveStatus, error) {
	if pod.Status.PodIP == "" {
		return nil, fmt.Errorf("the Pod %s has no IP yet (phase %s)", pod.Name, pod.Status.Phase)
	}
	port := h.Port
	if port == 0 {
		port = report.ArchiveStatusPort
	}
	client := h.Client
	if client == nil {
		client = http.DefaultClient
	}
	url := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)) + report.ArchiveStatusPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the status at %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the status at %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the status at %s: %s", url, resp.Status)
	}
	var st report.ArchiveStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("the status at %s is not an archiver's: %w", url, err)
	}
	return &st, nil
}

// readArchivers reads every archiver among the Pods at once, each within
// ArchiveStatusTimeout; a Pod that is not running is not asked.
func readArchivers(ctx context.Context, r ArchiveStatusReader, pods map[string]*corev1.Pod) map[string]etcdbackup.ArchiveObservation {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out map[string]etcdbackup.ArchiveObservation
	)
	for name, pod := range pods {
		if !etcdbackup.IsArchiver(pod) {
			continue
		}
		if out == nil {
			out = map[string]etcdbackup.ArchiveObservation{}
		}
		if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
			out[name] = etcdbackup.ArchiveObservation{Error: fmt.Sprintf("its Pod is %s", podPhase(pod))}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, ArchiveStatusTimeout)
			defer cancel()
			st, err := r.ReadArchiveStatus(ctx, pod)
			obs := etcdbackup.ArchiveObservation{Status: st}
			if err != nil {
				obs = etcdbackup.ArchiveObservation{Error: err.Error()}
			}
			mu.Lock()
			out[name] = obs
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func podPhase(pod *corev1.Pod) string {
	if pod.DeletionTimestamp != nil {
		return "terminating"
	}
	if pod.Status.Phase == "" {
		return "not started"
	}
	return string(pod.Status.Phase)
}
