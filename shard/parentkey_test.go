package shard

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

func TestParentKey(t *testing.T) {
	tests := []struct {
		reason string
		body   string
		want   string
		err    string
	}{
		{"the UID, after children Metacontroller sorts first",
			`{"children":{"Pod.v1":{"a":{"metadata":{"uid":"child"}}}},"controller":{},"parent":{"metadata":{"name":"c","namespace":"ns","uid":"u-1"}}}`, "u-1", ""},
		{"no UID (a hand-written fixture): namespace/name",
			`{"parent":{"metadata":{"name":"c","namespace":"ns"}}}`, "ns/c", ""},
		{"whitespace everywhere",
			" \n{ \"related\" : { } ,\t\"parent\"\r\n:\n{ \"metadata\" : { \"uid\" : \"u-2\" } } }\n", "u-2", ""},
		{"strings holding quotes, braces and a key's name before the parent",
			`{"children":{"Secret.v1":{"s":{"data":{"k":"\"parent\":{\"metadata\":{\"uid\":\"wrong\"}}}]"}}}},"parent":{"metadata":{"uid":"u-3"}}}`, "u-3", ""},
		{"numbers, literals and arrays skipped",
			`{"finalizing":true,"n":-1.5e3,"x":null,"a":[1,[2,{"parent":3}],"]"],"parent":{"metadata":{"uid":"u-4"}}}`, "u-4", ""},
		{"a parent inside another key is not the parent",
			`{"related":{"parent":{"metadata":{"uid":"wrong"}}}}`, "", "has no parent"},
		{"not an object", `[1,2]`, "", "not a JSON object"},
		{"empty", ``, "", "not a JSON object"},
		{"truncated", `{"parent":{"metadata":{"uid":"u`, "", "unexpected end"},
		{"a parent with no identity", `{"parent":{"metadata":{}}}`, "", "neither a UID nor a name"},
		{"a parent that is not an object", `{"parent":"x"}`, "", "cannot unmarshal"},
	}
	for _, tt := range tests {
		got, err := ParentKey([]byte(tt.body))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: ParentKey: %v, want %q", tt.reason, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: ParentKey = %q, %v; want an error containing %q", tt.reason, got, err, tt.err)
		case got != tt.want:
			t.Errorf("%s: ParentKey = %q, want %q", tt.reason, got, tt.want)
		}
	}
}

// TestParentKeyOfCapturedRequests reads Metacontroller's own requests and
// agrees with a full decode of each.
func TestParentKeyOfCapturedRequests(t *testing.T) {
	for _, f := range testenv.CapturedRequests(t) {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var full struct {
			Parent struct {
				Metadata struct{ UID string } `json:"metadata"`
			} `json:"parent"`
		}
		if err := json.Unmarshal(body, &full); err != nil {
			t.Fatal(err)
		}
		got, err := ParentKey(body)
		if err != nil || got != full.Parent.Metadata.UID || got == "" {
			t.Errorf("%s: ParentKey = %q, %v; a full decode reads %q", filepath.Base(f), got, err, full.Parent.Metadata.UID)
		}
	}
}

// FuzzParentKey: on any input ParentKey returns; on a well-formed object
// whose top-level keys are distinct it finds the parent a full decode
// finds.
func FuzzParentKey(f *testing.F) {
	f.Add([]byte(`{"children":{},"parent":{"metadata":{"uid":"u"}}}`))
	f.Add([]byte(`{"a":"\\\"","parent":{"metadata":{"name":"n","namespace":"ns"}}}`))
	f.Add([]byte(`{"a":[{"b":"}"}],"parent":{"metadata":{"uid":"u"}},"z":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := ParentKey(body)
		if !json.Valid(body) || !distinctTopLevelKeys(body) {
			return
		}
		var full struct {
			Parent *struct {
				Metadata struct{ UID, Namespace, Name string } `json:"metadata"`
			} `json:"parent"`
		}
		if json.Unmarshal(body, &full) != nil || full.Parent == nil {
			return
		}
		m := full.Parent.Metadata
		want := m.UID
		if want == "" && m.Name != "" {
			want = m.Namespace + "/" + m.Name
		}
		if want != "" && (err != nil || got != want) {
			t.Errorf("ParentKey(%q) = %q, %v; a full decode reads %q", body, got, err, want)
		}
	})
}

// distinctTopLevelKeys reports whether body, a valid JSON object, names
// each of its keys once, exactly as written (encoding/json matches keys
// without regard to case or escapes; Metacontroller writes them plainly).
func distinctTopLevelKeys(body []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return false
	}
	for k := range top {
		if k != strings.ToLower(k) || strings.ContainsAny(k, `\`) {
			return false
		}
	}
	// A stack of the containers open: in an object, whether a key comes
	// next.
	type open struct{ object, key bool }
	var stack []open
	afterValue := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].key = true
		}
	}
	seen := map[string]bool{}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	for {
		tok, err := dec.Token()
		if err != nil {
			return true
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				afterValue()
				stack = append(stack, open{object: d == '{', key: d == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].key {
			if n == 1 {
				k := tok.(string)
				if seen[k] {
					return false
				}
				seen[k] = true
			}
			stack[n-1].key = false
			continue
		}
		afterValue()
	}
}
