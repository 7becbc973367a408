// Package apiserver proves the manifests under manifests/ against a real
// kube-apiserver rather than a reading of their YAML: they install with
// kubectl apply -k (client-side and server-side), every example applies,
// invalid EtcdClusters are refused at admission with the messages
// docs/troubleshooting.md lists, the printer columns show a status written
// through /status, and kubectl diff finds nothing after an apply, so the
// CRD's defaults do not fight GitOps tools.
//
// The tests start etcd (bin/etcd-v3.6.16, mk/etcd.mk) and kube-apiserver
// (bin/kube-apiserver, mk/kube.mk) on loopback, with a static admin token, a
// generated service-account key and a temporary kubeconfig, and drive them
// with bin/kubectl and plain HTTPS. Only those processes are ever signalled,
// by pid, when the test ends. Without the binaries the tests skip, unless
// CI=true, where a missing binary fails them: "make kube-bins" builds them.
//
// The tests import internal/testenv (the binaries, the processes, the
// CI-or-skip rule), internal/etcdtest (the API server's store) and
// api/v1beta2, and nothing else of this module.
//
// Nothing but tests lives here; this file exists so that the package has a
// name outside its tests.
package apiserver
