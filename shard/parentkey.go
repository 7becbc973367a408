package shard

import (
	"encoding/json"
	"errors"
)

// ParentKey returns the key a sync request is owned by: its parent's UID,
// or namespace/name for a request with no UID (a fixture written by
// hand). It reads the request's top-level object without decoding the
// children (Metacontroller sorts the keys, so they come before the
// parent), then decodes the parent's metadata alone.
//
// A request it cannot read has no key, and is answered where it arrived:
// the handler there gives the client its 4xx.
func ParentKey(body []byte) (string, error) {
	raw, err := topLevelValue(body, "parent")
	if err != nil {
		return "", err
	}
	var parent struct {
		Metadata struct {
			UID       string `json:"uid"`
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &parent); err != nil {
		return "", err
	}
	m := parent.Metadata
	switch {
	case m.UID != "":
		return m.UID, nil
	case m.Name != "":
		return m.Namespace + "/" + m.Name, nil
	}
	return "", errors.New("the parent has neither a UID nor a name")
}

var errNotAnObject = errors.New("the request is not a JSON object")

// topLevelValue returns the raw value of key in the JSON object body, or
// an error when body is not an object or has no such key. It skips every
// other value by its brackets and strings alone: a well-formed body is
// read once, without allocating, and a malformed one may be read wrong,
// which only sends it to the wrong replica, whose decoder refuses it.
func topLevelValue(body []byte, key string) ([]byte, error) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, errNotAnObject
	}
	i++
	for {
		i = skipSpace(body, i)
		if i >= len(body) {
			return nil, errNotAnObject
		}
		if body[i] == '}' {
			return nil, errors.New("the request has no " + key)
		}
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
		if i >= len(body) || body[i] != '"' {
			return nil, errNotAnObject
		}
		end := skipString(body, i)
		name := body[i+1 : max(i+1, end-1)]
		i = skipSpace(body, end)
		if i >= len(body) || body[i] != ':' {
			return nil, errNotAnObject
		}
		start := skipSpace(body, i+1)
		i = skipValue(body, start)
		if string(name) == key {
			return body[start:i], nil
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string that opens at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the value that starts at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\n' && b[i] != '\t' && b[i] != '\r' {
		i++
	}
	return i
}
