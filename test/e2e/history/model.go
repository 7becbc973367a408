package history

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

// OpKind is what a client asked etcd.
type OpKind int

const (
	OpGet OpKind = iota
	OpPut
	OpCAS
	OpDelete
)

func (k OpKind) String() string {
	return [...]string{"get", "put", "cas", "delete"}[k]
}

// Input is one operation as asked. Values are never empty: the empty
// string is the model's absent key.
type Input struct {
	Kind  OpKind
	Key   string
	Value string // put, and the value a CAS writes
	// Expect is the value a CAS compares with; "" asks that the key be
	// absent.
	Expect string
}

// Output is what etcd answered. Unknown is a write whose outcome the
// client never learnt (an error or a timeout): it may have been applied,
// at any time from its call on, so it is recorded as never returning.
// Refused is a write etcd answered with an error it gives both for a
// write it did not apply and for one it did: NOSPACE, which etcd returns
// for the write that crosses the space quota after applying it, and for
// every write after that without applying it. Either way etcd decided
// before it answered, so the write took effect within its call or not at
// all.
type Output struct {
	Unknown bool
	Refused bool
	Value   string // get: the value read, "" when absent
	// Succeeded is whether a CAS's comparison held; Deleted whether a
	// delete removed a key.
	Succeeded bool
	Deleted   bool
	// Revision is the store's revision in the response header: the
	// revision a write was made at, when it changed the store.
	Revision int64
}

// registerModel is each key as a register, checked key by key: etcd
// keys are independent, so the history is linearizable if and only if
// each key's is, and partitions keep the search small. A refused write
// may or may not have taken effect, so the model is nondeterministic:
// porcupine follows every value the register may hold.
var registerModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{""} },
	Step: func(state, input, output any) []any {
		value, in, out := state.(string), input.(Input), output.(Output)
		ok, next := step(value, in, out)
		switch {
		case out.Refused && in.Kind != OpGet:
			// Applied (as if it had succeeded unknown) or not at all.
			_, applied := step(value, in, Output{Unknown: true})
			if applied == value {
				return []any{value}
			}
			return []any{value, applied}
		case ok:
			return []any{next}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		return describe(input.(Input), output.(Output))
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
}).ToModel()

// step is one operation on a register holding value ("" for absent).
func step(value string, in Input, out Output) (bool, string) {
	switch in.Kind {
	case OpGet:
		return out.Value == value, value
	case OpPut:
		return true, in.Value
	case OpCAS:
		holds := value == in.Expect
		if out.Unknown {
			if holds {
				return true, in.Value
			}
			return true, value
		}
		if out.Succeeded != holds {
			return false, value
		}
		if holds {
			return true, in.Value
		}
		return true, value
	case OpDelete:
		if out.Unknown {
			return true, ""
		}
		return out.Deleted == (value != ""), ""
	}
	return false, value
}

func describe(in Input, out Output) string {
	var b strings.Builder
	switch in.Kind {
	case OpGet:
		fmt.Fprintf(&b, "get(%s)", in.Key)
	case OpPut:
		fmt.Fprintf(&b, "put(%s, %s)", in.Key, in.Value)
	case OpCAS:
		fmt.Fprintf(&b, "cas(%s, %q → %s)", in.Key, in.Expect, in.Value)
	case OpDelete:
		fmt.Fprintf(&b, "delete(%s)", in.Key)
	}
	switch {
	case out.Unknown:
		b.WriteString(" → ?")
	case out.Refused:
		b.WriteString(" → refused (NOSPACE): applied or not")
	case in.Kind == OpGet:
		fmt.Fprintf(&b, " → %q", out.Value)
	case in.Kind == OpCAS:
		fmt.Fprintf(&b, " → %t", out.Succeeded)
	case in.Kind == OpDelete:
		fmt.Fprintf(&b, " → deleted %t", out.Deleted)
	}
	return b.String()
}
