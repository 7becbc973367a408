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
