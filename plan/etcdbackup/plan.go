package etcdbackup

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// Observed is everything one sync of an EtcdBackup knows.
type Observed struct {
	Backup     *v1beta2.EtcdBackup
	SpecErrors field.ErrorList
	// Pods are the run Pods, the EtcdBackup's children.
	Pods map[string]*corev1.Pod
	// Secrets and Clusters are the related objects of the same namespace,
	// by name.
	Secrets  map[string]*corev1.Secret
	Claims   map[string]*corev1.PersistentVolumeClaim
	Clusters map[string]*v1beta2.EtcdCluster

	// Archive is what the hook read from each archiver Pod, by name.
	Archive map[string]ArchiveObservation

	Finalizing bool
	Now        time.Time
	// AgentImage is this project's image, whose backup mode a run runs.
	AgentImage string
}

// Decision is the answer to one sync.
type Decision struct {
	Children    []plan.Child
	Status      v1beta2.BackupStatus
	ResyncAfter time.Duration
	Finalized   bool
}

// Condition reasons, part of the API.
const (
	ReasonInvalidSpec     = "InvalidSpec"
	ReasonSecretInvalid   = "SecretInvalid"
	ReasonClaimNotFound   = "ClaimNotFound"
	ReasonClusterNotFound = "ClusterNotFound"
	ReasonBackupFailed    = "BackupFailed"
	ReasonRunning         = "BackupRunning"
	ReasonScheduled       = "Scheduled"
	ReasonDone            = "Done"
	ReasonAsExpected      = "AsExpected"
)

const (
	// DefaultTimeout bounds a run when the policy says 0.
	DefaultTimeout = 30 * time.Minute
	// startGrace is how long a run Pod may take beyond its timeout before
	// it is given up: an image pull, scheduling.
	startGrace = 5 * time.Minute
	// Failed runs are retried after backoffBase, doubling up to backoffMax
	// (and never later than the next period).
	backoffBase = 10 * time.Second
	backoffMax  = 5 * time.Minute
	// resyncBlocked is how often a backup blocked on its spec or a related
	// object looks again; a change of either also triggers a sync.
	resyncBlocked = 30 * time.Second
	resyncRunning = 10 * time.Second
)

type planner struct {
	o      *Observed
	status v1beta2.BackupStatus
	// children is the answer's run Pod, if any.
	children []plan.Child
	// progressing and degraded are this sync's conditions; ready is a
	// continuous backup's BackupReady.
	progressing, degraded, ready cond
	resync                       time.Duration
	// archivers are the archiver Pods observed; o.Pods holds the runs.
	archivers map[string]*corev1.Pod
}

type cond struct {
	status          metav1.ConditionStatus
	reason, message string
}

// Plan decides one sync.
func Plan(o *Observed) Decision {
	p := &planner{o: o, status: o.Backup.Status}
	p.status.ObservedGeneration = o.Backup.Generation
	if o.Finalizing {
		// The run Pods and the archiver go; a run cut short aborts its
		// upload, and the archiver stores what it holds on SIGTERM.
		return Decision{Children: []plan.Child{}, Status: p.status, Finalized: len(o.Pods) == 0, ResyncAfter: 2 * time.Second}
	}
	if runs, archivers := splitArchivers(o.Pods); archivers != nil {
		runsOnly := *o
		runsOnly.Pods = runs
		p.o, p.archivers = &runsOnly, archivers
	}
	p.degraded = cond{metav1.ConditionFalse, ReasonAsExpected, "no problem observed"}
	if o.Backup.Spec.BackupPolicy.Continuous() {
		// A run in flight from before the spec asked for continuous
		// backups is followed to its end; no new one starts.
		p.followRuns()
		p.planContinuous()
		return Decision{Children: p.children, Status: p.finalStatus(), ResyncAfter: p.resync}
	}
	if p.status.Chain != nil {
		// Continuous no more: the chain's figures go, and a last backup
		// that was the chain, which a restore could not read as a
		// snapshot.
		if last := p.status.LastBackup; last != nil && last.Location == p.status.Chain.Location {
			p.status.LastBackup = nil
		}
		p.status.LastDeltaRevision, p.status.LastDeltaTime, p.status.RPOSeconds, p.status.Chain = 0, nil, nil, nil
	}
	switch p.followRuns() {
	case idle:
		p.maybeStart(true)
	case ended:
		// The next run waits for the status that records this one, so
		// that a lost status write cannot lose an outcome.
		p.maybeStart(false)
	}
	return Decision{Children: p.children, Status: p.finalStatus(), ResyncAfter: p.resync}
}

// maybeStart starts the next run if it is due, nothing blocks it and
// mayStart; otherwise it says when the next run is due.
func (p *planner) maybeStart(mayStart bool) {
	if len(p.o.SpecErrors) > 0 {
		p.block(ReasonInvalidSpec, "the spec is invalid, so no backup is taken: "+p.o.SpecErrors.ToAggregate().Error())
		return
	}
	t, reason, msg := p.checkRun()
	if reason != "" {
		p.block(reason, msg)
		return
	}
	request := p.finalRequest()
	if p.holdForHibernation(request) {
		return
	}
	due, why := p.nextDue(request)
	if due.IsZero() {
		p.progressing = cond{metav1.ConditionFalse, ReasonDone, why}
		return
	}
	if wait := due.Sub(p.o.Now); wait > 0 || !mayStart {
		p.progressing = cond{metav1.ConditionFalse, ReasonScheduled, why}
		p.resync = max(wait, time.Second)
		return
	}
	name := fmt.Sprintf("%s-%d", p.o.Backup.Name, p.nextRunNumber())
	p.status.LastRun = &v1beta2.BackupRun{
		Name: name, Generation: p.o.Backup.Generation,
		Start:               metav1.NewTime(p.o.Now.UTC().Truncate(time.Second)),
		ConsecutiveFailures: p.failures(), Request: request,
	}
	p.children = append(p.children, plan.Child{Kind: plan.KindPod, Name: name, Object: p.runPod(name, t, request)})
	p.progressing = cond{metav1.ConditionTrue, ReasonRunning, "backup " + name + " started: " + why}
	p.resync = resyncRunning
}

// checkRun is what a run or the archiver calls, and what keeps it from
// running: the cluster's endpoints, the destination's Secret or claim,
// the client certificate.
func (p *planner) checkRun() (t runTarget, reason, msg string) {
	t, reason, msg = p.target()
	if reason == "" {
		reason, msg = p.checkDestination()
	}
	if reason == "" {
		reason, msg = p.checkClientTLS(t.tls)
	}
	return t, reason, msg
}

func (p *planner) block(reason, msg string) {
	p.status.Succeeded, p.status.Reason = false, msg
	p.degraded = cond{metav1.ConditionTrue, reason, msg}
	p.progressing = cond{metav1.ConditionFalse, reason, msg}
	p.resync = resyncBlocked
}

// nextDue says when the next run is due and why; zero when none ever is
// (a one-shot backup that succeeded for this generation). A final backup
// a hibernating cluster asks for (request) is due at once, then as the
// retries of any failed run.
func (p *planner) nextDue(request string) (time.Time, string) {
	b, last := p.o.Backup, p.status.LastRun
	interval := time.Duration(p.policy().BackupIntervalInSecond) * time.Second
	switch {
	case request != "" && (last == nil || last.Request != request):
		return p.o.Now, fmt.Sprintf("the final backup before EtcdCluster %s hibernates (request %s)", b.Spec.ClusterName, request)
	case request != "" && last.Succeeded:
		return time.Time{}, fmt.Sprintf("the final backup before EtcdCluster %s hibernates is taken (request %s)", b.Spec.ClusterName, request)
	case last == nil && interval == 0 && p.status.Succeeded && p.status.LastSuccessDate != nil:
		// A one-shot backup another operator took (the CoreOS backup
		// operator writes only these fields): running it again would
		// overwrite the object it stored with a snapshot of now.
		return time.Time{}, fmt.Sprintf("the one-shot backup was taken at %s, before this hook ran; it is kept as it is", p.status.LastSuccessDate.UTC().Format(time.RFC3339))
	case last == nil:
		return p.o.Now, "no backup taken yet"
	case !last.Succeeded && last.End != nil:
		backoff := min(backoffBase<<min(max(last.ConsecutiveFailures-1, 0), 10), backoffMax)
		if interval > 0 {
			backoff = min(backoff, interval)
		}
		return last.End.Add(backoff), fmt.Sprintf("retrying after %d failed runs, %s after the last", last.ConsecutiveFailures, backoff)
	case interval == 0 && last.Generation == b.Generation:
		return time.Time{}, "the one-shot backup is taken"
	case interval == 0:
		return p.o.Now, "the spec changed since the last backup"
	}
	// Periodic: one period after the last run started, so that a run's
	// own length does not shift the schedule; a schedule missed while the
	// hook was down is due now, once.
	due := last.Start.Add(interval)
	return due, fmt.Sprintf("every %s; next at %s", interval, due.UTC().Format(time.RFC3339))
}

func (p *planner) nextRunNumber() int {
	n := 0
	if last := p.status.LastRun; last != nil {
		n = runNumber(last.Name)
	}
	for name := range p.o.Pods {
		n = max(n, runNumber(name))
	}
	return n + 1
}

// runNumber is the n of "<backup>-<n>"; 0 for any other name.
func runNumber(name string) int {
	i := strings.LastIndexByte(name, '-')
	n, err := strconv.Atoi(name[i+1:])
	if i < 0 || err != nil || n < 0 {
		return 0
	}
	return n
}

func (p *planner) policy() v1beta2.BackupPolicy {
	if pol := p.o.Backup.Spec.BackupPolicy; pol != nil {
		return *pol
	}
	return v1beta2.BackupPolicy{}
}

func (p *planner) timeout() time.Duration {
	if t := p.policy().TimeoutInSecond; t > 0 {
		return time.Duration(t) * time.Second
	}
	return DefaultTimeout
}

// runTarget is what a run calls: the cluster's endpoints, and the client
// certificate when they serve TLS.
type runTarget struct {
	endpoints []string
	tls       *clientTLS
}

// target is the spec's endpoints, as given, or the client Service of the
// EtcdCluster clusterName names, with the scheme its TLS policy gives it
// (its server certificates carry the Service's name); and the client
// certificate to call them with.
func (p *planner) target() (t runTarget, reason, msg string) {
	spec := p.o.Backup.Spec
	var cluster *v1beta2.EtcdCluster
	if spec.ClusterName == "" {
		t.endpoints = spec.EtcdEndpoints
	} else {
		c, ok := p.o.Clusters[spec.ClusterName]
		if !ok {
			return t, ReasonClusterNotFound, fmt.Sprintf("EtcdCluster %q not found in namespace %s", spec.ClusterName, p.o.Backup.Namespace)
		}
		cluster = c
		t.endpoints = []string{plan.AddressesOf(c).ServiceURL()}
	}
	t.tls, reason, msg = p.clientTLSFor(t.endpoints, cluster)
	return t, reason, msg
}

// checkDestination looks at what a run mounts, the S3 Secret or the
// claim, before the run: a Pod that mounts a missing one would wait in
// ContainerCreating, and say why nowhere the hook can see.
func (p *planner) checkDestination() (reason, msg string) {
	if pvc := p.o.Backup.Spec.PVC; p.o.Backup.Spec.StorageType == v1beta2.BackupStoragePVC {
		c, ok := p.o.Claims[pvc.ClaimName]
		switch {
		case !ok:
			return ReasonClaimNotFound, fmt.Sprintf("PersistentVolumeClaim %q (spec.pvc.claimName) not found in namespace %s", pvc.ClaimName, p.o.Backup.Namespace)
		case c.DeletionTimestamp != nil:
			return ReasonClaimNotFound, fmt.Sprintf("PersistentVolumeClaim %q (spec.pvc.claimName) is being deleted", pvc.ClaimName)
		}
		return "", ""
	}
	name := p.o.Backup.Spec.S3.AWSSecret
	s, ok := p.o.Secrets[name]
	switch {
	case !ok:
		return ReasonSecretInvalid, fmt.Sprintf("Secret %q (spec.s3.awsSecret) not found in namespace %s", name, p.o.Backup.Namespace)
	case len(s.Data[report.CredentialsFile]) == 0 && s.StringData[report.CredentialsFile] == "":
		return ReasonSecretInvalid, fmt.Sprintf("Secret %q (spec.s3.awsSecret) has no key %q: it must hold the AWS shared files %q and %q", name, report.CredentialsFile, report.CredentialsFile, report.ConfigFile)
	}
	return "", ""
}

func (p *planner) finalStatus() v1beta2.BackupStatus {
	st := p.status
	if last := st.LastRun; last != nil && last.End != nil && !last.Succeeded && p.degraded.reason == ReasonAsExpected {
		p.degraded = cond{metav1.ConditionTrue, ReasonBackupFailed, fmt.Sprintf("backup %s failed: %s", last.Name, last.Reason)}
	}
	if p.progressing.reason == "" {
		p.progressing = cond{metav1.ConditionFalse, ReasonDone, "nothing to do"}
	}
	st.Conditions = nil
	for _, c := range []struct {
		t v1beta2.ConditionType
		c cond
	}{{v1beta2.ConditionProgressing, p.progressing}, {v1beta2.ConditionDegraded, p.degraded}} {
		out := v1beta2.ClusterCondition{Type: c.t, Status: c.c.status, Reason: c.c.reason, Message: c.c.message,
			LastTransitionTime: metav1.NewTime(p.o.Now.UTC().Truncate(time.Second))}
		for _, prev := range p.o.Backup.Status.Conditions {
			if prev.Type == c.t && prev.Status == out.Status && !prev.LastTransitionTime.IsZero() {
				out.LastTransitionTime = prev.LastTransitionTime
			}
		}
		st.Conditions = append(st.Conditions, out)
	}
	st.Conditions = append(st.Conditions, p.health(st)...)
	if p.ready.reason != "" {
		st.Conditions = append(st.Conditions, p.condition(ConditionBackupReady, p.ready))
	}
	return st
}
