//go:build tools

// Package tools pins a Kubernetes release so that kube-apiserver, kubectl and kube-scheduler
// can be built from it with "go build" (mk/kube.mk). "go install pkg@version"
// refuses k8s.io/kubernetes because its go.mod carries replace directives;
// this module's replace block maps them to the published staging modules.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
