//go:build tools

// Package tools pins staticcheck for "make lint". mk/tools.mk builds it from
// this module with "go build", so every machine lints with the same release.
package tools

import (
	_ "honnef.co/go/tools/cmd/staticcheck"
)
