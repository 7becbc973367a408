//go:build tools

// Package tools pins controller-gen, which generates the EtcdCluster CRD under
// manifests/crd from the kubebuilder markers in api/. mk/tools.mk builds it
// from this module with "go build", so the version is fixed by go.mod and
// go.sum here rather than by whatever happens to be on the PATH.
package tools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
