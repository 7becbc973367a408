package e2e

import (
	"strings"
	"time"
)

// handoverWindow is how long before its log line a leadership move may
// refuse a put, and how long after: the hook logs the move once etcd has
// confirmed the new leader, and MoveLeader is bounded by the hook's etcd
// call timeout.
const (
	handoverBefore = 3 * time.Second
	handoverAfter  = time.Second
)

// putsFailedAwayFromHandovers checks the puts that failed since from
// against the leadership moves the hook logged. etcd refuses a proposal
// that reaches a member while leadership is being handed over ("raft
// proposal dropped": never applied, the client's to retry), so a rolling
// restart may fail a put in flight at that moment; any other failed put
// is a defect. It logs every failed put and returns how many are not
// explained by a handover (failures the writer did not remember count as
// unexplained).
func (s *scenario) putsFailedAwayFromHandovers(step string, from time.Time, failed int, actions []LoggedAction) int {
	t := s.t
	var moves []time.Time
	for _, a := range actions {
		if !strings.HasPrefix(a.Action, "move leadership") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, a.Time)
		if err != nil {
			t.Errorf("%s: the hook's log time %q: %v", step, a.Time, err)
			continue
		}
		moves = append(moves, at)
	}
	remembered := s.w.FailuresSince(from)
	unexplained := max(0, failed-len(remembered))
	for _, f := range remembered {
		during := false
		for _, m := range moves {
			if !f.At.Before(m.Add(-handoverBefore)) && !f.At.After(m.Add(handoverAfter)) {
				during = true
			}
		}
		why := "at a leadership handover"
		if !during {
			why = "away from any leadership handover"
			unexplained++
		}
		t.Logf("%s: put %d sent at %s failed after %s, %s: %v", step, f.N, f.At.Format("15:04:05.000"), f.Took.Round(time.Millisecond), why, f.Err)
	}
	return unexplained
}
