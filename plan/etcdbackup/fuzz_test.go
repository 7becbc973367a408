package etcdbackup

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// FuzzPlan checks the backup planner's invariants on arbitrary states:
// at most one run in flight, no run started while anything blocks it, and
// a run's recorded outcome is never lost by dropping its Pod first.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add([]byte{1, 7, 0x21, 0x13, 0x42})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		flags := next()
		b := newBackup(int64(next()%3) * 60)
		now := t0.Add(time.Duration(next()) * time.Minute)
		o := observe(b, now)
		if flags&1 != 0 {
			delete(o.Secrets, "aws")
		}
		if flags&2 != 0 {
			o.SpecErrors = field.ErrorList{field.Required(field.NewPath("spec"), "x")}
		}
		if flags&4 != 0 {
			n := int(next() % 6)
			end := metav1.NewTime(t0.Add(time.Duration(next()) * time.Minute))
			run := &v1beta2.BackupRun{Name: fmt.Sprintf("nightly-%d", n), Generation: 1, Start: metav1.NewTime(t0), ConsecutiveFailures: int(next() % 4)}
			if flags&8 != 0 {
				run.End, run.Succeeded = &end, flags&16 != 0
			}
			b.Status.LastRun = run
		}
		for range int(next() % 4) {
			n := int(next() % 6)
			name := fmt.Sprintf("nightly-%d", n)
			switch next() % 3 {
			case 0:
				o.Pods[name] = runPodAt(name, t0, corev1.PodRunning, nil)
			case 1:
				o.Pods[name] = succeededRun(name, t0)
			case 2:
				o.Pods[name] = failedRun(name, t0, "boom")
			}
		}
		d := Plan(o)

		active, started := 0, 0
		for _, c := range d.Children {
			pod, existing := o.Pods[c.Name]
			if !existing {
				started++
				active++
				continue
			}
			if !finished(pod) {
				active++
			}
		}
		if active > 1 {
			t.Fatalf("%d runs in flight in the answer: %v", active, d.Children)
		}
		blocked := flags&1 != 0 || flags&2 != 0
		if started > 0 && blocked && (b.Status.LastRun == nil || b.Status.LastRun.End != nil) {
			t.Fatalf("a run started while the Secret is missing or the spec invalid")
		}
		// A finished Pod whose outcome the request's status does not hold
		// yet stays in the answer: dropping it would lose the outcome.
		if last := d.Status.LastRun; last != nil {
			if pod, ok := o.Pods[last.Name]; ok && finished(pod) && (b.Status.LastRun == nil || b.Status.LastRun.Name != last.Name || b.Status.LastRun.End == nil) {
				kept := false
				for _, c := range d.Children {
					kept = kept || c.Name == last.Name
				}
				if !kept {
					t.Fatalf("the Pod of %s was dropped in the answer that first records it", last.Name)
				}
			}
		}
	})
}
