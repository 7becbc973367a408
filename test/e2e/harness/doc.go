// Package harness runs the etcd hook end to end without Kubernetes.
//
// The hook is a Metacontroller webhook: on a cluster, Metacontroller POSTs the
// EtcdCluster parent and its children to it, applies the children it answers
// with, and the kubelet turns the Pods into etcd processes. The harness plays
// both roles, faithfully where the hook can tell the difference, so that the
// real hook binary is tested against real etcd processes, over real HTTP, in
// seconds, as root on one machine.
//
// # Pieces
//
//   - APIServer (apiserver.go, validation.go, controllers.go): an in-memory
//     object store with watch events. It validates and re-serialises the
//     built-in types through their Go types (unknown and empty fields drop out
//     as they do on a real API server), enforces Pod spec immutability, keeps
//     a Service's clusterIP, deletes Pods gracefully, and plays the PV binder
//     (a PVC is Bound at once), pvc-protection (a PVC in use outlives its
//     deletion), the garbage collector (ownerReferences, background policy)
//     and the disruption controller (PDB status). StorageClasses
//     (storageclass.go; Env.CreateStorageClass) are its one cluster-scoped
//     type: no namespace in their Ref, reclaimPolicy and volumeBindingMode
//     defaulted, everything but allowVolumeExpansion immutable.
//   - Claims (pvc.go), as Kubernetes 1.33+ treats them. The
//     DefaultStorageClass admission plugin gives a claim created without
//     spec.storageClassName the default class (annotation
//     storageclass.kubernetes.io/is-default-class: "true"; the newest one,
//     then by name, when several are), and leaves storageClassName "" alone.
//     A new claim is then Bound at once to a volume of its request
//     (status.capacity, status.accessModes, spec.volumeName), class or not.
//     An update may change only a Bound claim's storage request (and
//     volumeAttributesClassName), volumeName once and a storageClassName
//     that was unset: "spec: Forbidden: spec is immutable after creation
//     except resources.requests and volumeAttributesClassName for bound
//     claims"; a request may go down, to recover from a failed expansion,
//     but never to status.capacity or below: "spec.resources.requests.storage:
//     Forbidden: field can not be less than status.capacity". The
//     PersistentVolumeClaimResize admission plugin refuses a larger request
//     unless the claim's class exists and has allowVolumeExpansion: true:
//     `persistentvolumeclaims "<name>" is forbidden: only dynamically
//     provisioned pvc can be resized and the storageclass that provisions
//     the pvc must support resize`. Both are ErrInvalid, like every refusal
//     here (the plugin's is a 403 on a cluster): a Metacontroller update
//     that gets one is an ApplyError.
//   - VolumeController (volumecontroller.go; Env.Volumes): the CSI
//     external-resizer and the kubelet's volume expansion, with
//     RecoverVolumeExpansionFailure. A Bound claim whose request exceeds its
//     capacity is marked at once: condition Resizing, the new size in
//     status.allocatedResources, allocatedResourceStatuses.storage
//     ControllerResizeInProgress. After VolumeConfig.ResizeDelay (300 ms)
//     the driver has grown the volume: if its class is online (the
//     default) and a Pod the kubelet started (status.startTime, not
//     terminating nor finished) mounts the claim, or no unfinished Pod uses
//     it, status.capacity becomes the allocated size and the resize
//     conditions and status go; otherwise, and always for a class created
//     with StorageClassOptions.OfflineExpansion (parameter
//     harness.etcd-hook.dev/expansion: offline: the driver grows file
//     systems only at mount time), the claim waits:
//     {type: FileSystemResizePending, status: "True", message: "Waiting for
//     user to (re-)start a pod to finish file system resize of volume on
//     node."}, allocatedResourceStatuses.storage NodeResizePending, the
//     capacity unchanged. A waiting claim of an online class gets its
//     capacity as soon as a started Pod mounts it; of any class, when the
//     kubelet starts a new Pod that mounts it (kubelet_pods.go schedule).
//     A container restart mounts nothing again and finishes nothing. Each
//     step is a status update, so the owning parent is synced.
//   - Metacontroller (metacontroller.go: its configuration and what tests
//     call; metacontroller_queue.go: one worker per parent;
//     metacontroller_sync.go: a sync, its request and its answer applied;
//     metacontroller_related.go: the customize hook; parentcache.go;
//     metacontroller_records.go; apply.go): one CompositeController
//     with generateSelector, children pods, services, persistentvolumeclaims,
//     poddisruptionbudgets, secrets and networkpolicies (InPlace all, as in
//     manifests/metacontroller/compositecontroller.yaml: a claim's larger
//     request is merged into the live claim), a sync and a finalize hook.
//     Requests have the shape of the captured ones in
//     shared/metacontroller/captured. Children are claimed as Metacontroller
//     v4.17.2 claims them with generateSelector (metacontroller_claim.go):
//     an object of a child type in the parent's namespace whose (first)
//     controller ownerReference is the parent is a child if it carries the
//     label controller-uid=<parent uid>, and is released otherwise (the
//     parent's ownerReferences removed by an update, unless the parent is
//     being deleted); an orphan (no controller ownerReference) with that
//     label is adopted (a controller ownerReference with blockOwnerDeletion
//     added, after a fresh read shows the parent still there and not being
//     deleted) and shown to the hook as it was read, before the adoption,
//     so that an InPlace update of it in that sync is the conflict
//     Metacontroller logs and skips; objects another owner controls are
//     ignored. A failed release or adoption fails the sync before the hook
//     is called. An orphan's change syncs the parents its label selects.
//     Children the emulator creates carry the label, so they are always
//     kept; the CoreOS operator's objects (coreos.go) carry none. Only an
//     HTTP 200 applies anything; otherwise the parent is retried with an
//     exponential backoff (5 ms doubling, capped at 2 s here instead of
//     1000 s); a 429 with Retry-After waits without counting as an error.
//     On a 200: children of declared types missing from the answer are
//     deleted, the others created or updated by Metacontroller's three-way
//     merge (last-applied annotation), per update strategy (InPlace, Recreate,
//     OnDelete which is Metacontroller's default); a create the API server
//     answers AlreadyExists (the name taken by an object the parent did not
//     claim) is logged and skipped, not an error, as in Metacontroller's
//     DynamicApply (Metrics.ChildCreatesExisting); .status is replaced and
//     observedGeneration injected; resyncAfterSeconds schedules the next sync.
//     Any event on the parent (its own status update too) or on a child
//     triggers a sync, one at a time per parent, at most 5 parents at once.
//     A deleted parent gets deletionTimestamp (and a new generation) and the
//     finalize hook is called until it answers finalized: true. Child
//     operations the API server refuses are recorded as ApplyErrors and fail
//     the test at Close unless taken with TakeApplyErrors. A sync reads the
//     parent fresh, unless ControllerConfig.ParentCacheLag (or
//     SetParentCacheLag) serves it as an informer cache that lags the API
//     server would: the newest version at least that old. The status is
//     written by UID over the current one, as Metacontroller's
//     AtomicStatusUpdate does, so a status computed from a stale parent
//     replaces a newer one, as it can on a real cluster. Child types are
//     created and updated in ChildTypes order, or ControllerConfig.ApplyOrder
//     first: Metacontroller walks a Go map, so any order happens there.
//     A customize hook (ControllerConfig.CustomizeURL) relates objects of
//     the parent's namespace by names or by a label selector (not both, nor
//     a selector with a namespace, which Metacontrollers before v4.15
//     refuse), and StorageClasses cluster-wide, as Metacontroller v4.15+
//     does for a cluster-scoped resource of a namespaced parent; the
//     request's related map has the type's group, keyed by name, whenever
//     a rule asked for it, empty if nothing matched. A change of a related object syncs the
//     parents of its namespace, of a StorageClass the parents (of any
//     namespace) whose last customize answer related StorageClasses.
//     Hooks on https URLs (webhooktls.go) are verified as by Metacontroller
//     v4.16+: against the hook's caBundle (inline, secretRef or
//     configMapRef, key ca.crt by default), else the one of the first
//     endpointConfigs entry whose host (host or host:port) matches the URL,
//     else the system roots; exactly those roots, TLS 1.2 at least, a client
//     per hook. Bundles are resolved once, by NewMetacontroller, which fails
//     on one it cannot resolve or parse, as Metacontroller then refuses to
//     start the controller; a rotated CA needs a new Metacontroller. A TLS
//     failure is a failed call like any other (SyncRecord.Err, HookErrors).
//   - Kubelet (kubelet.go: what tests call; kubelet_pods.go: one worker per
//     Pod; kubelet_containers.go: container starts and exits;
//     kubelet_termination.go: termination messages; kubelet_status.go: the
//     Pod status; probes.go; podspec.go): each Pod gets its own
//     loopback address 127.0.<x>.<y> (the "pod network", never reused in a
//     run) and each container becomes a process of bin/etcd-v<tag> (see
//     podspec.go for the translation of image, command, $(VAR), volume paths
//     and listen URLs). restartPolicy, restart backoff, restartCount, the
//     readiness, liveness and startup probes (httpGet, tcpSocket, and the
//     exec probe `sh -c "[VAR=v] etcdctl [flags] endpoint status"` of the
//     CoreOS operator: probes_exec.go), in-place
//     image changes (the container restarts on the new binary with the same
//     volumes) and graceful deletion (SIGTERM, SIGKILL after the grace period)
//     behave as on a node. An image tag without a binary is an image that
//     cannot be pulled: the Pod stays Pending in ErrImagePull/ImagePullBackOff.
//     An exec probe runs the image's etcdctl as a process of the container
//     (its env, volumes, writable layer and Pod group) within the probe's
//     timeout, exit code 0 a success, its output the failure message;
//     endpoints on the Pod's loopback (etcdctl's default 127.0.0.1:2379,
//     localhost) reach what the Pod serves there, through a forwarder on
//     the host's 127.0.0.1 to the Pod's private loopback address or its IP,
//     the URL's scheme and host unchanged for TLS. A busybox image runs only
//     the CoreOS operator's check-dns init container (checkdns.go): its
//     script, recognised by its text (v0.8.0 to v0.9.4), becomes a process
//     of the test binary (Main runs it) that looks the name up through the
//     sandbox's resolver every second (two before v0.9.3) until it
//     resolves, exit 0, or, with TIMEOUT_READY=N > 0, prints "Timed out
//     waiting for DNS entry" after N failed lookups and exits 1; like a
//     shell that is a container's PID 1 it ignores SIGTERM.
//     A terminated container's message is read as the kubelet reads it, for
//     it is how a run reports (the agents write their result there): the
//     last 4096 bytes of the file behind terminationMessagePath, whatever
//     the exit code; with FallbackToLogsOnError, when that file is missing or
//     empty after a failure, the last 80 lines (2048 bytes at most) of that
//     run's log.
//     emptyDir volumes live in the Pod directory and go with the Pod; a PVC
//     maps to a directory that lives as long as the claim. Secret volumes
//     (secretvolume.go, with items, defaultMode and optional) have the
//     kubelet's AtomicWriter layout: the files in a ..<timestamp> directory,
//     ..data a symlink to it, each key (or first element of an item's path)
//     a symlink <key> -> ..data/<key>. Every SecretRefreshPeriod a changed
//     Secret is written to a new timestamped directory and a new ..data is
//     renamed over the old one, so that a reader of the key's path never
//     misses it nor reads half of an update; a Secret deleted later leaves
//     the last files (an optional one empties the volume, as on a node). A
//     subPath of a Secret volume is a copy taken at the container's start,
//     like the kubelet's bind mount, so it changes only with a restart.
//     Kubelet.VolumeDir gives a volume's host directory. Fault hooks:
//     KillContainer (kill -9), Pause/Resume (SIGSTOP/SIGCONT), Signal, and
//     Partition/Heal (partition.go): with KubeletConfig.PodGroups each Pod
//     runs under a group of its own, and nftables drops what the Pod sends
//     and what is sent to it, in a table that dies with the test binary;
//     its own loopback traffic too, so a partitioned Pod's exec probes fail
//     where on a node, inside the Pod, they would not.
//   - DNSServer (dns.go): the cluster DNS, hand-written on
//     golang.org/x/net/dns/dnsmessage. <hostname>.<subdomain>.<ns>.svc and
//     <service>.<ns>.svc (with or without .cluster.local) get A records from
//     the live Pods; unknown names get NXDOMAIN, AAAA an empty answer. A Pod
//     IP's in-addr.arpa name gets, as from CoreDNS, a PTR record
//     <hostname>.<subdomain>.<ns>.svc.cluster.local. when that name resolves
//     to the IP (the same rules, strict or not), NXDOMAIN otherwise: etcd's
//     TLS listeners match it against a caller's wildcard DNS SANs by suffix,
//     so of the wildcards only *.<subdomain>.<ns>.svc.cluster.local matches
//     it, never *.<subdomain>.<ns>.svc.
//   - The sandbox (mountns.go): Main, called from TestMain, re-executes the
//     test binary in a private mount namespace, starts the DNS server on
//     127.53.<a>.<b>:53 and bind-mounts a resolv.conf pointing at it (plus a
//     hosts file without Pod names and "hosts: files dns") over /etc. The
//     hook, every etcd and the test process itself therefore resolve Pod
//     names; the machine's own files are never touched. DNS rather than a
//     hosts file because Go caches /etc/hosts for 5 s and does not cache DNS.
//     Processes get GODEBUG=netdns=go so that even a cgo build uses Go's
//     resolver.
//   - HookProcess (hookproc.go): bin/etcd-hook --addr 127.0.0.1:<port>,
//     healthy once GET /healthz answers 200, with Kill (SIGKILL) and Restart
//     on the same port. FaultProxy (faults.go) sits between Metacontroller and
//     the hook and can answer a status (e.g. 500), delay or drop requests.
//     With Options.HookReplicas, several hooks run with --peers behind a
//     Service (service.go) that sends each request to the next replica,
//     skipping one that refuses connections, as kube-proxy does.
//   - ProcTable (processes.go): every process is tracked by pid and stopped
//     at Close. The processes are internal/testenv's: each logs to a file,
//     runs in a process group of its own with Pdeathsig=SIGKILL as a safety
//     net, and is stopped by SIGTERM, then SIGKILL to its group.
//
// # The CoreOS etcd-operator's clusters
//
// coreos.go renders the objects the CoreOS etcd-operator v0.9.4 created for
// a cluster, as it rendered them: CoreOSServices (<cluster>-client and the
// headless <cluster>), CoreOSMemberPod (check-dns, the etcd command with
// --initial-cluster-state new or existing, the exec probes, restartPolicy
// Never, an emptyDir or a claim named after the member), CoreOSTLSMemberPod
// (the same with spec.TLS.static: https URLs, the certificate flags, the
// three Secrets mounted under /etc/etcdtls, probes with the operator's
// certificate) and CoreOSMemberClaim, with the owner reference of
// CoreOSOwnerRef (controller, no blockOwnerDeletion) and no controller-uid
// label, plus the names and URLs (CoreOSMemberName, CoreOSMemberAddr,
// CoreOSPeerURL, CoreOSClientURL, CoreOSPeerURLPair, and their CoreOSTLS
// forms). The operator made a cluster of a seed Pod with state
// new, then for each further member an etcd MemberAdd of its peer URL
// followed by its Pod with state existing listing every member. Its
// Services carry service.alpha.kubernetes.io/tolerate-unready-endpoints,
// which no Kubernetes since 1.24 reads: with Options.StrictDNS a member's
// name resolves only once Ready, so check-dns waits forever unless the
// headless Service has publishNotReadyAddresses, as on such a cluster.
//
// # Using it
//
//	func TestMain(m *testing.M) { harness.Main(m) }
//
//	func TestScaleUp(t *testing.T) {
//		env := harness.New(t, harness.Options{}) // runs bin/etcd-hook
//		env.MC.CreateParent("default", "example", map[string]any{"size": 3, "version": "3.6.16"})
//		...
//		env.MC.MergePatchParentSpec("default", "example", map[string]any{"size": 5})
//		env.WaitFor(time.Minute, "5 ready members", func() (bool, string) { ... })
//	}
//
// New skips the test when the sandbox is unavailable (not root, no mount
// namespaces) and fails it instead when CI=true. Logs (hook.log, one file per
// container) live under the test's temporary directory, or under
// $ETCDHOOK_E2E_ARTIFACTS/<test> when set; on failure Close prints the last
// hook exchanges, kubelet events and the tail of every log.
// ETCDHOOK_E2E_VERBOSE=1 logs events as they happen.
//
// # Time compression and approximations
//
// Grace periods are capped at 5 s, probe periods and initial delays at 1 s
// and probe timeouts at 5 s; container restart backoff is 0 (first restart),
// then 200 ms doubling to 2 s, reset after 10 s of running; image pulls are
// retried every second. There is no scheduler, no node, no kube-proxy:
// ClusterIP Services resolve to their ready endpoints' Pod IPs instead of a
// virtual IP (no address outside 127/8 is ever dialled), PDB percentages and
// maxUnavailable are taken against the number of matching Pods, and by
// default a Pod name resolves as soon as the Pod has an IP (Options.StrictDNS
// requires a selecting headless Service, and readiness unless it publishes
// not-ready addresses, as Kubernetes does). Inside a Pod 0.0.0.0 means the
// Pod's IP, so listen URLs are bound to it; 127.0.0.1 and localhost in listen
// URLs become a second address private to the Pod. Init containers run in
// order, each to a successful exit, before the app containers (a failing one
// is restarted with the same backoff, and reported with its exit code and
// termination message); a Pod sandbox is never restarted, so they never run
// twice. Secret volumes are refreshed every second instead of about every
// minute (the kubelet's sync period plus its cache TTL), and a superseded
// timestamped directory is removed a refresh later rather than at once: with
// the kubelet's immediate removal a reader that resolved ..data just before
// the swap misses the file, rarely, and tests must not be flaky for it. A
// Secret volume that cannot be written (a missing non-optional Secret or
// key) is retried at every refresh; meanwhile the containers that mount it
// wait in CreateContainerConfigError (ContainerCreating with FailedMount on
// a node). A PVC's readOnly is not enforced, nor is its size: a claim is a
// directory. Claims are bound at creation, whatever their class (a missing
// class would leave them Pending, WaitForFirstConsumer until a Pod is
// scheduled); there are no PersistentVolume objects, and the PV
// controller's retroactive default class never matters. Volume expansion
// takes ResizeDelay (300 ms) where a driver takes seconds, and never fails
// (no ControllerResizeError, NodeResizeError or Infeasible state); the
// kubelet's online expansion of a mounted volume, which takes up to its
// volume manager's resync on a node, happens when the driver is done, so
// that an online class's claim in use by a running Pod is never seen
// FileSystemResizePending; one no Pod uses grows without a node. gRPC
// probes, exec probes other than etcdctl's endpoint status, envFrom,
// configMap/hostPath volumes, commands other than etcd, etcdctl, etcdutl
// and this project's etcd-hook (in its image, or copied into a volume), and
// busybox scripts other than check-dns are not supported and show up as
// Pod events and container errors (a failing probe, a
// CreateContainerConfigError).
//
// NetworkPolicies are stored and answered, never enforced: every process
// runs on the host's loopback in one network namespace, so a connection's
// source does not tell which Pod made it, and a fence between Pods would
// need a network namespace (and an address) per Pod. What the hook renders
// is checked instead against the real API server (test/apiserver), and the
// ports' isolation is what etcd's own TLS gives: the peer port refuses a
// client certificate (TestAutoTLS).
//
// # Imports
//
// The harness imports internal/testenv (the module root, the binaries, the
// process supervisor, the CI-or-skip rule) and nothing else of this module
// (its own tests add internal/tlstest): it emulates Kubernetes, and must
// not share code with the hook it tests.
package harness
