//go:build tools

// Package tools pins promtool for "make test-monitoring". mk/monitoring.mk
// builds it from this module with "go build", so every machine checks and
// unit-tests the alerting rules of manifests/monitoring with the same
// Prometheus release.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
