//go:build tools

// Package tools pins Helm for "make test-charts". mk/charts.mk builds it from
// this module with "go build", so every machine lints and renders the chart
// with the same release.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
