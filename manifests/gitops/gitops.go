// Package gitops holds what GitOps tools need to judge etcd-hook's objects:
// the Argo CD health check (argocd-health.lua, and argocd-cm.yaml, which
// carries it for each kind) and a Flux Kustomization with health-check
// expressions (flux-kustomization.yaml). They are files for people to
// apply; this package embeds them so that tests run exactly what ships.
package gitops

import _ "embed"

// ArgoCDHealthLua is the Argo CD health check of every etcd-hook kind.
//
//go:embed argocd-health.lua
var ArgoCDHealthLua string

// ArgoCDConfigMap is the argocd-cm snippet that installs ArgoCDHealthLua.
//
//go:embed argocd-cm.yaml
var ArgoCDConfigMap []byte

// FluxKustomization is the example Flux Kustomization with
// healthCheckExprs for every etcd-hook kind.
//
//go:embed flux-kustomization.yaml
var FluxKustomization []byte
