// Package gitopstest judges an object as the GitOps tools do, with their
// own code where it can be had and a faithful copy of their harness where
// it cannot:
//   - kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status), which Flux,
//     kubectl wait and cli-utils use;
//   - Flux's healthCheckExprs from manifests/gitops, evaluated by cel-go
//     in the environment and order of fluxcd/pkg/runtime/cel;
//   - the Argo CD health check from manifests/gitops, run by gopher-lua
//     (the interpreter Argo CD embeds) with the libraries, input and
//     output handling of Argo CD's util/lua.
//
// Tests only: it is how the statuses the hook writes are held to what
// the tools will make of them. It imports manifests/gitops (the checks it
// runs); its tests add api/v1beta2 and internal/testenv.
package gitopstest
