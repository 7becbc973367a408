// Package gitops holds what GitOps tools need to judge etcd-hook's objects:
// the Argo CD health check (argocd-health.lua, and argocd-cm.yaml, which
// carries it for each kind) and a Flux Kustomization with health-check
// expressions (flux-kustomization.yaml). They are files for people to
// apply; this package embeds them so that tests run exactly what ships.
package gitops
