package history

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op builds an operation on key "k".
func op(client int, call, ret int64, in Input, out Output) Operation {
	in.Key = "k"
	return Operation{Client: client, Input: in, Output: out, Call: call, Return: ret}
}

func put(v string) Input        { return Input{Kind: OpPut, Value: v} }
func get() Input                { return Input{Kind: OpGet} }
func cas(from, to string) Input { return Input{Kind: OpCAS, Expect: from, Value: to} }
func del() Input                { return Input{Kind: OpDelete} }
func read(v string) Output      { return Output{Value: v} }

var (
	ok      = Output{}
	refused = Output{Refused: true}
)

func TestCheck(t *testing.T) {
	tests := []struct {
		reason string
		ops    []Operation
		want   porcupine.CheckResult
	}{
		{"a read after a write sees it", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, 30, get(), read("a")),
		}, porcupine.Ok},
		{"a stale read: the checker must fail it (the mutation test)", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(0, 20, 30, put("b"), ok),
			op(1, 40, 50, get(), read("a")),
		}, porcupine.Illegal},
		{"a read concurrent with a write may see either value", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(0, 20, 60, put("b"), ok),
			op(1, 30, 40, get(), read("a")),
			op(2, 30, 50, get(), read("b")),
		}, porcupine.Ok},
		{"once a newer value is read, an older one never is", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(0, 20, 100, put("b"), ok),
			op(1, 30, 40, get(), read("b")),
			op(2, 50, 60, get(), read("a")),
		}, porcupine.Illegal},
		{"a write of unknown outcome may have been applied", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, never, put("b"), Output{Unknown: true}),
			op(2, 40, 50, get(), read("b")),
		}, porcupine.Ok},
		{"a write of unknown outcome may not have been applied", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, never, put("b"), Output{Unknown: true}),
			op(2, 40, 50, get(), read("a")),
		}, porcupine.Ok},
		{"a refused write (NOSPACE) may have been applied in its call: etcd applies the one that crosses the quota", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, 30, put("b"), refused),
			op(2, 40, 50, get(), read("b")),
		}, porcupine.Ok},
		{"a refused write may not have been applied", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, 30, put("b"), refused),
			op(2, 40, 50, get(), read("a")),
		}, porcupine.Ok},
		{"a refused write never takes effect after etcd answered", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, 30, put("b"), refused),
			op(2, 40, 50, get(), read("a")),
			op(2, 60, 70, get(), read("b")),
		}, porcupine.Illegal},
		{"a refused CAS applies only on the value it expects", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, 30, cas("x", "b"), refused),
			op(2, 40, 50, get(), read("b")),
		}, porcupine.Illegal},
		{"a refused delete may have removed the key", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, 30, del(), refused),
			op(2, 40, 50, get(), read("")),
			op(2, 60, 70, get(), read("")),
		}, porcupine.Ok},
		{"a value never written is never read", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, 30, get(), read("z")),
		}, porcupine.Illegal},
		{"a CAS succeeds only on the value it expects", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, 30, cas("a", "b"), Output{Succeeded: true}),
			op(2, 40, 50, cas("a", "c"), Output{Succeeded: false}),
			op(2, 60, 70, get(), read("b")),
		}, porcupine.Ok},
		{"a CAS that reports success on another value is caught", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, 30, cas("x", "b"), Output{Succeeded: true}),
		}, porcupine.Illegal},
		{"a CAS on an absent key expects it absent", []Operation{
			op(0, 0, 10, cas("", "a"), Output{Succeeded: true}),
			op(1, 20, 30, cas("", "b"), Output{Succeeded: false}),
			op(1, 40, 50, get(), read("a")),
		}, porcupine.Ok},
		{"a delete reports whether the key was there", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, 30, del(), Output{Deleted: true}),
			op(1, 40, 50, del(), Output{Deleted: false}),
			op(2, 60, 70, get(), read("")),
		}, porcupine.Ok},
		{"a delete that removed nothing from a present key is caught", []Operation{
			op(0, 0, 10, put("a"), ok),
			op(1, 20, 30, del(), Output{Deleted: false}),
		}, porcupine.Illegal},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			v := Check(tt.ops, 10*time.Second, t.TempDir())
			if v.Result != tt.want {
				t.Errorf("%s: got %s, want %s", tt.reason, v.Result, tt.want)
			}
			if (v.Err() == nil) != (tt.want == porcupine.Ok) {
				t.Errorf("%s: Err() = %v for %s", tt.reason, v.Err(), v.Result)
			}
			if tt.want == porcupine.Illegal && !strings.HasSuffix(v.Visualization, ".html") {
				t.Errorf("%s: no drawing of the illegal history: %q", tt.reason, v.Visualization)
			}
		})
	}
}

// Keys are independent: a stale read on one key is caught among many
// legal operations on others.
func TestCheckPartitionsByKey(t *testing.T) {
	var ops []Operation
	for i := range 200 {
		o := op(i%3, int64(i*10), int64(i*10+5), put("v"+string(rune('a'+i%26))), ok)
		o.Input.Key = "k" + string(rune('0'+i%5))
		ops = append(ops, o)
	}
	if v := Check(ops, 10*time.Second, ""); v.Result != porcupine.Ok {
		t.Fatalf("legal history: %s", v.Result)
	}
	stale := ops[len(ops)-10] // a put on some key, long overwritten
	late := op(9, 100000, 100010, get(), read(stale.Input.Value))
	late.Input.Key = stale.Input.Key
	if v := Check(append(ops, late), 10*time.Second, ""); v.Result != porcupine.Illegal {
		t.Fatalf("a stale read of %s among %d operations: got %s, want Illegal", stale.Input.Key, len(ops)+1, v.Result)
	}
}

func TestCheckEvents(t *testing.T) {
	changes := []Operation{
		{Input: Input{Kind: OpPut, Key: "k", Value: "a"}, Output: Output{Revision: 5}},
		{Input: Input{Kind: OpDelete, Key: "k"}, Output: Output{Deleted: true, Revision: 6}},
		{Input: Input{Kind: OpCAS, Key: "j", Value: "b"}, Output: Output{Succeeded: true, Revision: 8}},
	}
	all := []Event{{Revision: 5, Key: "k", Value: "a"}, {Revision: 6, Key: "k", Delete: true}, {Revision: 7, Key: "j", Value: "x"}, {Revision: 8, Key: "j", Value: "b"}}
	tests := []struct {
		reason string
		events []Event
		want   string // a fragment of the error, "" for none
	}{
		{"every change, in order", all, ""},
		{"a gap", []Event{all[0], all[2], all[3]}, "no event (a gap)"},
		{"a duplicate", []Event{all[0], all[1], all[1], all[2], all[3]}, "a duplicate or out of order"},
		{"out of order", []Event{all[1], all[0], all[2], all[3]}, "a duplicate or out of order"},
		{"another value at a change's revision", []Event{all[0], all[1], all[2], {Revision: 8, Key: "j", Value: "other"}}, "the event there is"},
		{"an event before the start", append([]Event{{Revision: 2, Key: "k", Value: "old"}}, all...), "before the watch's start"},
	}
	for _, tt := range tests {
		err := CheckEvents(tt.events, 4, changes)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.reason, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want an error saying %q", tt.reason, err, tt.want)
		}
	}
}

func TestCheckReplay(t *testing.T) {
	a := []Event{{Revision: 5, Key: "k", Value: "a"}, {Revision: 7, Key: "k", Value: "b"}}
	if err := CheckReplay(a, a); err != nil {
		t.Errorf("the same events: %v", err)
	}
	if err := CheckReplay(a[:1], a); err == nil {
		t.Error("a watch that missed an event the store holds passed")
	}
	if err := CheckReplay([]Event{a[0], {Revision: 7, Key: "k", Value: "c"}}, a); err == nil {
		t.Error("a watch that saw another value passed")
	}
}
