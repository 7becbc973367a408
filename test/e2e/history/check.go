package history

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Operation is one recorded operation. Call and Return are nanoseconds
// since the history began; an operation whose outcome is unknown returns
// at the end of time, so that it may take effect at any point after its
// call, or never.
type Operation struct {
	Client int
	Input  Input
	Output Output
	Call   int64
	Return int64
}

// never is the return time of an operation whose outcome is unknown.
const never = math.MaxInt64

// Verdict is what Check found.
type Verdict struct {
	Operations int
	Unknown    int // writes whose outcome the client never learnt
	Refused    int // writes refused with NOSPACE: applied in their call, or not at all
	// Result is porcupine's: Ok, Illegal, or Unknown when the search ran
	// out of time.
	Result porcupine.CheckResult
	// Visualization is the HTML file porcupine drew of the history, when
	// it is not Ok.
	Visualization string
}

// Err is nil when the history is linearizable, and says where to look
// when it is not, or could not be told.
func (v Verdict) Err() error {
	switch v.Result {
	case porcupine.Ok:
		return nil
	case porcupine.Illegal:
		return fmt.Errorf("the history of %d operations (%d of unknown outcome) is not linearizable; porcupine's drawing of it: %s", v.Operations, v.Unknown, v.Visualization)
	default:
		return fmt.Errorf("linearizability of %d operations (%d of unknown outcome) not decided in time; porcupine's drawing: %s", v.Operations, v.Unknown, v.Visualization)
	}
}

// Check asks porcupine whether ops are linearizable, giving up after
// timeout. When they are not, it draws the history into dir.
func Check(ops []Operation, timeout time.Duration, dir string) Verdict {
	history := make([]porcupine.Operation, 0, len(ops))
	v := Verdict{Operations: len(ops)}
	for _, op := range ops {
		if op.Output.Unknown {
			v.Unknown++
		}
		if op.Output.Refused {
			v.Refused++
		}
		history = append(history, porcupine.Operation{ClientId: op.Client, Input: op.Input, Output: op.Output, Call: op.Call, Return: op.Return})
	}
	sort.SliceStable(history, func(i, j int) bool { return history[i].Call < history[j].Call })
	result, info := porcupine.CheckOperationsVerbose(registerModel, history, timeout)
	v.Result = result
	if result != porcupine.Ok && dir != "" {
		path := filepath.Join(dir, "linearizability.html")
		if err := os.MkdirAll(dir, 0o755); err == nil && porcupine.VisualizePath(registerModel, info, path) == nil {
			v.Visualization = path
		}
	}
	return v
}
