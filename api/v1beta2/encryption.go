package v1beta2

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// EncryptionKeySize is the length of a backup's encryption key: AES-256.
const EncryptionKeySize = 32

// ParseEncryptionKey reads a backup's encryption key as a Secret holds it:
// its 32 bytes as they are, or written as base64 or hex (what "kubectl
// create secret --from-literal" gets from a shell). The error says how
// long the value was, never what it holds.
func ParseEncryptionKey(data []byte) ([]byte, error) {
	if len(data) == EncryptionKeySize {
		return data, nil
	}
	text := strings.TrimSpace(string(data))
	if k, err := base64.StdEncoding.DecodeString(text); err == nil && len(k) == EncryptionKeySize {
		return k, nil
	}
	if k, err := hex.DecodeString(text); err == nil && len(k) == EncryptionKeySize {
		return k, nil
	}
	return nil, fmt.Errorf("it is %d bytes: it must be %d bytes, or them in base64 or hex", len(data), EncryptionKeySize)
}
