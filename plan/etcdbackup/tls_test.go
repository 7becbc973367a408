package etcdbackup

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/tlstest"
)

// tlsCluster is an EtcdCluster whose members serve peers and clients TLS,
// the CoreOS way.
func tlsCluster() *v1beta2.EtcdCluster {
	return &v1beta2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns}, Spec: v1beta2.ClusterSpec{
		Pod: &v1beta2.PodPolicy{ClusterDomain: "cluster.local"},
		TLS: &v1beta2.TLSPolicy{Static: &v1beta2.StaticTLS{
			Member:         &v1beta2.MemberSecret{PeerSecret: "demo-peer", ServerSecret: "demo-server"},
			OperatorSecret: "demo-operator",
		}},
	}}
}

// issuedClient is a client certificate of a test CA, issued once.
var issuedClient = func() map[string][]byte {
	ca, err := tlstest.NewCA("backup test ca")
	if err != nil {
		panic(err)
	}
	s, err := ca.IssueCluster("demo", "prod", "")
	if err != nil {
		panic(err)
	}
	return s.Client
}()

func clientSecret() *corev1.Secret {
	return &corev1.Secret{Data: maps.Clone(issuedClient)}
}

// byCluster names the cluster by clusterName.
func byCluster(c *v1beta2.EtcdCluster) func(*Observed) {
	return func(o *Observed) {
		o.Backup.Spec.EtcdEndpoints, o.Backup.Spec.ClusterName = nil, c.Name
		o.Clusters[c.Name] = c
	}
}

// tlsSummary is what a TLS case is about: whether a run starts, what it
// calls, and what it mounts for that.
type tlsSummary struct {
	NewPod     string
	Degraded   string
	Reason     string
	Endpoints  string
	Volume     *corev1.SecretVolumeSource
	Mount      *corev1.VolumeMount
	TLSArgs    []string
	LastBackup string
}

func summarizeTLS(o *Observed, d Decision) tlsSummary {
	s := tlsSummary{Reason: d.Status.Reason}
	if b := d.Status.LastBackup; b != nil {
		s.LastBackup = b.Location
	}
	for _, c := range d.Status.Conditions {
		if c.Type == v1beta2.ConditionDegraded && c.Status == metav1.ConditionTrue {
			s.Degraded = c.Reason
		}
	}
	for _, c := range d.Children {
		if _, ok := o.Pods[c.Name]; ok {
			continue
		}
		s.NewPod = c.Name
		pod := c.Object.(*corev1.Pod)
		ctr := pod.Spec.Containers[0]
		for _, a := range ctr.Args {
			switch {
			case strings.HasPrefix(a, "--endpoints="):
				s.Endpoints = strings.TrimPrefix(a, "--endpoints=")
			case strings.HasPrefix(a, "--cert="), strings.HasPrefix(a, "--key="), strings.HasPrefix(a, "--cacert="), strings.HasPrefix(a, "--tls-secret="):
				s.TLSArgs = append(s.TLSArgs, a)
			}
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == tlsVolume {
				s.Volume = v.Secret
			}
		}
		for _, m := range ctr.VolumeMounts {
			if m.Name == tlsVolume {
				s.Mount = &m
			}
		}
	}
	return s
}

func TestClientTLS(t *testing.T) {
	tlsArgs := func(secret string) []string {
		return []string{
			"--cert=/etc/etcd-backup/etcd-tls/etcd-client.crt",
			"--key=/etc/etcd-backup/etcd-tls/etcd-client.key",
			"--cacert=/etc/etcd-backup/etcd-tls/etcd-client-ca.crt",
			"--tls-secret=" + secret,
		}
	}
	mount := &corev1.VolumeMount{Name: tlsVolume, MountPath: "/etc/etcd-backup/etcd-tls", ReadOnly: true}
	const serviceURL = "https://demo-client.prod.svc.cluster.local:2379"
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   tlsSummary
	}{{
		name:   "TLS cluster by clusterName",
		reason: "the client Service over https (its server certificates carry that name), with the cluster's operatorSecret mounted optionally: this hook cannot see that Secret before the run, and a missing one must be the agent's reported failure, not a Pod stuck in ContainerCreating",
		in:     with(observe(newBackup(0), t0), byCluster(tlsCluster())),
		want: tlsSummary{NewPod: "nightly-1", Endpoints: serviceURL,
			Volume: &corev1.SecretVolumeSource{SecretName: "demo-operator", Optional: ptr(true)}, Mount: mount, TLSArgs: tlsArgs("demo-operator")},
	}, {
		name:   "TLS cluster moving between static and auto",
		reason: "while members move, the hook calls them with the operator certificate its status lists (the one every member trusts), and so does a run",
		in: with(observe(newBackup(0), t0), byCluster(changed(tlsCluster(), func(c *v1beta2.EtcdCluster) {
			c.Status.TLS = &v1beta2.TLSStatus{Certificates: []v1beta2.CertificateStatus{{Name: "peer", Secret: "demo-peer-tls"}, {Name: "operator", Secret: "demo-operator-tls"}}}
		}))),
		want: tlsSummary{NewPod: "nightly-1", Endpoints: serviceURL,
			Volume: &corev1.SecretVolumeSource{SecretName: "demo-operator-tls", Optional: ptr(true)}, Mount: mount, TLSArgs: tlsArgs("demo-operator-tls")},
	}, {
		name:   "clientTLSSecret wins",
		reason: "spec.clientTLSSecret (CoreOS) is the user's choice over the cluster's operatorSecret; the hook sees it, so its mount is not optional",
		in: with(with(observe(newBackup(0), t0), byCluster(tlsCluster())), func(o *Observed) {
			o.Backup.Spec.ClientTLSSecret = "backup-client"
			o.Secrets["backup-client"] = clientSecret()
		}),
		want: tlsSummary{NewPod: "nightly-1", Endpoints: serviceURL,
			Volume: &corev1.SecretVolumeSource{SecretName: "backup-client"}, Mount: mount, TLSArgs: tlsArgs("backup-client")},
	}, {
		name:   "https etcdEndpoints with clientTLSSecret",
		reason: "the user's URLs as given, called with the Secret",
		in: with(observe(newBackup(0), t0), func(o *Observed) {
			o.Backup.Spec.EtcdEndpoints = []string{"https://demo-client.prod.svc:2379", "https://10.0.0.7:2379"}
			o.Backup.Spec.ClientTLSSecret = "backup-client"
			o.Secrets["backup-client"] = clientSecret()
		}),
		want: tlsSummary{NewPod: "nightly-1", Endpoints: "https://demo-client.prod.svc:2379,https://10.0.0.7:2379",
			Volume: &corev1.SecretVolumeSource{SecretName: "backup-client"}, Mount: mount, TLSArgs: tlsArgs("backup-client")},
	}, {
		name:   "https etcdEndpoints without a Secret",
		reason: "a run could only fail after starting a Pod: no run, a condition saying what to set; the backup already stored stays in the status",
		in: with(observe(newBackup(0), t0), func(o *Observed) {
			o.Backup.Spec.EtcdEndpoints = []string{"http://10.0.0.6:2379", "https://demo-client.prod.svc:2379"}
			o.Backup.Status.LastBackup = &v1beta2.StoredBackup{Location: "s3://backups/demo.db"}
		}),
		want: tlsSummary{Degraded: ReasonClientTLSMissing, LastBackup: "s3://backups/demo.db",
			Reason: `etcd endpoint https://demo-client.prod.svc:2379 (spec.etcdEndpoints) serves TLS, and no client certificate is named: ` +
				`set spec.clientTLSSecret to a Secret with the keys "etcd-client.crt", "etcd-client.key" and "etcd-client-ca.crt"`},
	}, {
		name:   "TLS cluster without an operatorSecret",
		reason: "refused by the EtcdCluster's own validation, but a backup must not start a run that can only fail",
		in:     with(observe(newBackup(0), t0), byCluster(changed(tlsCluster(), func(c *v1beta2.EtcdCluster) { c.Spec.TLS.Static.OperatorSecret = "" }))),
		want: tlsSummary{Degraded: ReasonClientTLSMissing,
			Reason: `EtcdCluster "demo" (spec.clusterName) serves clients TLS at ` + serviceURL + `, and no client certificate is named (its spec.TLS names no operatorSecret): ` +
				`set spec.clientTLSSecret to a Secret with the keys "etcd-client.crt", "etcd-client.key" and "etcd-client-ca.crt"`},
	}, {
		name:   "clientTLSSecret missing",
		reason: "as with the awsSecret: a Pod mounting it would wait in ContainerCreating; no run, the Secret named",
		in: with(with(observe(newBackup(0), t0), byCluster(tlsCluster())), func(o *Observed) {
			o.Backup.Spec.ClientTLSSecret = "backup-client"
		}),
		want: tlsSummary{Degraded: ReasonSecretInvalid, Reason: `Secret "backup-client" (spec.clientTLSSecret) not found in namespace prod`},
	}, {
		name:   "clientTLSSecret lacking a key",
		reason: "the Secret and the key are named, before a run fails on the missing file",
		in: with(observe(newBackup(0), t0), func(o *Observed) {
			o.Backup.Spec.EtcdEndpoints = []string{"https://demo-client.prod.svc:2379"}
			o.Backup.Spec.ClientTLSSecret = "backup-client"
			o.Secrets["backup-client"] = clientSecret()
			delete(o.Secrets["backup-client"].Data, v1beta2.ClientKeyKey)
		}),
		want: tlsSummary{Degraded: ReasonSecretInvalid,
			Reason: `Secret "backup-client" (spec.clientTLSSecret): lacks key "etcd-client.key": it must hold "etcd-client.crt", "etcd-client.key" and "etcd-client-ca.crt"`},
	}, {
		name:   "clientTLSSecret lacking two keys",
		reason: "every missing key is named at once",
		in: with(observe(newBackup(0), t0), func(o *Observed) {
			o.Backup.Spec.ClientTLSSecret = "backup-client"
			o.Secrets["backup-client"] = &corev1.Secret{StringData: map[string]string{v1beta2.ClientKeyKey: "key"}}
		}),
		want: tlsSummary{Degraded: ReasonSecretInvalid,
			Reason: `Secret "backup-client" (spec.clientTLSSecret): lacks key "etcd-client.crt", "etcd-client-ca.crt": it must hold "etcd-client.crt", "etcd-client.key" and "etcd-client-ca.crt"`},
	}, {
		name:   "clientTLSSecret that does not parse",
		reason: "checked as the cluster's own operatorSecret is, before a run starts a Pod that could only fail",
		in: with(observe(newBackup(0), t0), func(o *Observed) {
			o.Backup.Spec.ClientTLSSecret = "backup-client"
			o.Secrets["backup-client"] = clientSecret()
			o.Secrets["backup-client"].Data[v1beta2.ClientKeyKey] = []byte("not a key")
		}),
		want: tlsSummary{Degraded: ReasonSecretInvalid,
			Reason: `Secret "backup-client" (spec.clientTLSSecret): key "etcd-client.key" does not hold the private key of "etcd-client.crt": tls: failed to find any PEM data in key input: it must hold "etcd-client.crt", "etcd-client.key" and "etcd-client-ca.crt"`},
	}, {
		name:   "plain cluster by clusterName",
		reason: "a cluster whose members serve clients plain HTTP: http, and nothing mounted",
		in:     with(observe(newBackup(0), t0), byCluster(changed(tlsCluster(), func(c *v1beta2.EtcdCluster) { c.Spec.TLS = nil }))),
		want:   tlsSummary{NewPod: "nightly-1", Endpoints: "http://demo-client.prod.svc.cluster.local:2379"},
	}, {
		name:   "peer TLS only",
		reason: "members that talk TLS to each other but serve clients plain HTTP need no client certificate",
		in: with(observe(newBackup(0), t0), byCluster(changed(tlsCluster(), func(c *v1beta2.EtcdCluster) {
			c.Spec.TLS.Static.Member.ServerSecret, c.Spec.TLS.Static.OperatorSecret = "", ""
		}))),
		want: tlsSummary{NewPod: "nightly-1", Endpoints: "http://demo-client.prod.svc.cluster.local:2379"},
	}, {
		name:   "started run not seen, TLS cluster",
		reason: "a run asked for again under the same name is the same Pod, TLS included",
		in: with(with(observe(newBackup(0), t0.Add(time.Minute)), byCluster(tlsCluster())), func(o *Observed) {
			o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-2", Generation: 1, Start: metav1.NewTime(t0)}
		}),
		want: tlsSummary{NewPod: "nightly-2", Endpoints: serviceURL,
			Volume: &corev1.SecretVolumeSource{SecretName: "demo-operator", Optional: ptr(true)}, Mount: mount, TLSArgs: tlsArgs("demo-operator")},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarizeTLS(tt.in, Plan(tt.in))
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("%s\n(-want +got):\n%s", tt.reason, d)
			}
		})
	}
}

// changed is v after f.
func changed[T any](v T, f func(T)) T { f(v); return v }

func TestRelated(t *testing.T) {
	s3 := &v1beta2.S3BackupSource{Path: "b/k", AWSSecret: "aws"}
	secrets := func(names ...string) RelatedResource {
		return RelatedResource{APIVersion: "v1", Resource: "secrets", Namespace: ns, Names: names}
	}
	cluster := RelatedResource{APIVersion: v1beta2.APIVersion, Resource: "etcdclusters", Namespace: ns, Names: []string{"demo"}}
	claim := RelatedResource{APIVersion: "v1", Resource: "persistentvolumeclaims", Namespace: ns, Names: []string{"backups"}}
	tests := []struct {
		name   string
		reason string
		spec   v1beta2.BackupSpec
		want   []RelatedResource
	}{
		{"S3", "the awsSecret, by name", v1beta2.BackupSpec{S3: s3}, []RelatedResource{secrets("aws")}},
		{"S3 and clientTLSSecret", "one rule for Secrets, naming both", v1beta2.BackupSpec{S3: s3, ClientTLSSecret: "client"}, []RelatedResource{secrets("aws", "client")}},
		{"one Secret for both", "a name is listed once", v1beta2.BackupSpec{S3: s3, ClientTLSSecret: "aws"}, []RelatedResource{secrets("aws")}},
		{"claim, clientTLSSecret and cluster", "a volume destination has no awsSecret; the cluster's operatorSecret is not known here",
			v1beta2.BackupSpec{ClusterName: "demo", PVC: &v1beta2.PVCBackupSource{ClaimName: "backups"}, ClientTLSSecret: "client"},
			[]RelatedResource{secrets("client"), claim, cluster}},
		{"nothing named", "an empty answer, not null", v1beta2.BackupSpec{}, []RelatedResource{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, Related(ns, tt.spec)); d != "" {
				t.Errorf("%s\n(-want +got):\n%s", tt.reason, d)
			}
		})
	}
}
