package v1beta2

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxClusterNameLength leaves room for the longest name derived from it,
// the client Service "<name>-client", within a 63-character DNS label.
const MaxClusterNameLength = validation.DNS1035LabelMaxLength - len("-client")

var semverPattern = regexp.MustCompile(`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// Validate repeats the CRD's admission rules. The hook cannot trust that
// they ran: the CRD may be older than the hook, or the request may come from
// curl. Each error names the field, as the API server would.
func (c *EtcdCluster) Validate() field.ErrorList {
	var errs field.ErrorList
	if n := len(c.Name); n > MaxClusterNameLength {
		errs = append(errs, field.TooLong(field.NewPath("metadata", "name"), c.Name, MaxClusterNameLength))
	} else {
		for _, msg := range validation.IsDNS1035Label(c.Name) {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), c.Name, msg))
		}
	}
	errs = append(errs, c.Spec.validate(field.NewPath("spec"))...)
	return errs
}

func (s *ClusterSpec) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Size < MinSize || s.Size > MaxSize {
		errs = append(errs, field.Invalid(path.Child("size"), s.Size, fmt.Sprintf("must be between %d and %d", MinSize, MaxSize)))
	}
	if s.Version != "" && !semverPattern.MatchString(s.Version) {
		errs = append(errs, field.Invalid(path.Child("version"), s.Version, `must be a semantic version such as "3.7.3"`))
	}
	if s.Restore != nil {
		errs = append(errs, s.Restore.validate(path.Child("restore"))...)
	}
	if dr := s.DisasterRecovery; dr != nil && dr.Backup != "" {
		errs = append(errs, validateObjectName(path.Child("disasterRecovery", "backup"), dr.Backup)...)
	}
	errs = append(errs, s.TLS.validate(path.Child("TLS"))...)
	errs = append(errs, s.Auth.validate(path.Child("auth"), s.TLS)...)
	errs = append(errs, s.Etcd.validate(path.Child("etcd"), s.WithDefaults().Version)...)
	errs = append(errs, s.Housekeeping.validate(path.Child("housekeeping"), s.WithDefaults().Version)...)
	if s.Pod != nil {
		for k := range s.Pod.Labels {
			if k == "app" || k == LabelServing || strings.HasPrefix(k, "etcd_") {
				errs = append(errs, field.Invalid(path.Child("pod", "labels").Key(k), k, `"app" and "`+LabelServing+`" and labels starting with "etcd_" are reserved for the hook`))
			}
		}
		switch {
		case s.Pod.Spread != "" && s.Pod.Spread != SpreadPreferred && s.Pod.Spread != SpreadStrict:
			errs = append(errs, field.NotSupported(path.Child("pod", "spread"), s.Pod.Spread, []SpreadPolicy{SpreadPreferred, SpreadStrict}))
		case s.Pod.Spread != "" && !s.Pod.DefaultPlacement():
			errs = append(errs, field.Invalid(path.Child("pod", "spread"), s.Pod.Spread, "spec.pod.spread shapes the default placement, which spec.pod.affinity and spec.pod.topologySpreadConstraints replace: set whenUnsatisfiable in your own constraints instead"))
		}
		for _, domain := range []struct{ name, value string }{{"clusterDomain", s.Pod.ClusterDomain}, {"ClusterDomain", s.Pod.LegacyClusterDomain}} {
			if domain.value == "" {
				continue
			}
			for _, msg := range validation.IsDNS1123Subdomain(domain.value) {
				errs = append(errs, field.Invalid(path.Child("pod", domain.name), domain.value, msg))
			}
		}
	}
	return errs
}

// MaxBackupNameLength leaves room for the run suffix ("-<n>") of the Pods
// an EtcdBackup starts, whose names are DNS subdomains of at most 253.
const MaxBackupNameLength = 240

// Validate repeats the EtcdBackup CRD's admission rules, and refuses what
// the schema accepts for compatibility but this release does not serve.
func (b *EtcdBackup) Validate() field.ErrorList {
	var errs field.ErrorList
	if n := len(b.Name); n > MaxBackupNameLength {
		errs = append(errs, field.TooLong(field.NewPath("metadata", "name"), b.Name, MaxBackupNameLength))
	}
	spec, path := b.Spec, field.NewPath("spec")
	switch {
	case len(spec.EtcdEndpoints) == 0 && spec.ClusterName == "":
		errs = append(errs, field.Required(path, "name the cluster by etcdEndpoints or by clusterName"))
	case len(spec.EtcdEndpoints) > 0 && spec.ClusterName != "":
		errs = append(errs, field.Invalid(path.Child("clusterName"), spec.ClusterName, "name the cluster by etcdEndpoints or by clusterName, not both"))
	}
	for i, ep := range spec.EtcdEndpoints {
		if u, err := url.Parse(ep); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			errs = append(errs, field.Invalid(path.Child("etcdEndpoints").Index(i), ep, "must be an http(s) URL"))
		}
	}
	switch spec.StorageType {
	case BackupStorageS3:
		errs = append(errs, validateS3(path.Child("s3"), spec.S3, "storageType S3 needs spec.s3")...)
	case BackupStoragePVC:
		errs = append(errs, validatePVC(path.Child("pvc"), spec.PVC, "storageType PVC needs spec.pvc")...)
	default:
		errs = append(errs, field.NotSupported(path.Child("storageType"), spec.StorageType, []BackupStorageType{BackupStorageS3, BackupStoragePVC}))
	}
	if spec.ClientTLSSecret != "" {
		for _, msg := range validation.IsDNS1123Subdomain(spec.ClientTLSSecret) {
			errs = append(errs, field.Invalid(path.Child("clientTLSSecret"), spec.ClientTLSSecret, msg))
		}
	}
	if pol := spec.BackupPolicy; pol != nil {
		if d := pol.DeltaIntervalInSecond; d < 0 || d > 60 {
			errs = append(errs, field.Invalid(path.Child("backupPolicy", "deltaIntervalInSecond"), d, "must be 1 to 60 seconds, or unset for snapshots only"))
		}
		if pol.CompressSnapshots && !pol.Continuous() {
			errs = append(errs, field.Invalid(path.Child("backupPolicy", "compressSnapshots"), true, "is for continuous backups: set spec.backupPolicy.deltaIntervalInSecond"))
		}
	}
	if spec.Encryption != nil {
		errs = append(errs, spec.Encryption.validate(path.Child("encryption"))...)
		if !spec.BackupPolicy.Continuous() {
			errs = append(errs, field.Invalid(path.Child("encryption"), spec.Encryption.SecretName, "is for continuous backups: set spec.backupPolicy.deltaIntervalInSecond"))
		}
	}
	return errs
}

func (k *EncryptionKey) validate(path *field.Path) field.ErrorList {
	errs := validateObjectName(path.Child("secretName"), k.SecretName)
	if k.Key == "" {
		errs = append(errs, field.Required(path.Child("key"), "name the Secret's key that holds the 32-byte encryption key"))
	}
	for _, msg := range validation.IsConfigMapKey(k.Key) {
		errs = append(errs, field.Invalid(path.Child("key"), k.Key, msg))
	}
	return errs
}

// validate repeats the CoreOS operator's rule: the members' server
// certificate and the operator's client certificate come together, since a
// member that serves clients TLS and a hook without a client certificate
// (or the reverse) could never talk.
func (t *TLSPolicy) validate(path *field.Path) field.ErrorList {
	if t == nil {
		return nil
	}
	if t.Auto != nil {
		errs := t.Auto.validate(path.Child("auto"))
		if t.Static != nil {
			errs = append(errs, field.Forbidden(path.Child("auto"), "static and auto cannot be combined: static names Secrets you issue, auto has the hook issue them"))
		}
		return errs
	}
	if t.Static == nil {
		return nil
	}
	var errs field.ErrorList
	static := path.Child("static")
	if (t.OperatorSecret() == "") != (t.ServerSecret() == "") {
		errs = append(errs, field.Invalid(static.Child("operatorSecret"), t.OperatorSecret(),
			"operatorSecret and member.serverSecret are set together or not at all: members that serve clients TLS need a client certificate for the hook, and the reverse"))
	}
	for _, s := range []struct {
		path  *field.Path
		value string
	}{
		{static.Child("member", "peerSecret"), t.PeerSecret()},
		{static.Child("member", "serverSecret"), t.ServerSecret()},
		{static.Child("operatorSecret"), t.OperatorSecret()},
	} {
		if s.value == "" {
			continue
		}
		for _, msg := range validation.IsDNS1123Subdomain(s.value) {
			errs = append(errs, field.Invalid(s.path, s.value, msg))
		}
	}
	return errs
}

func validateS3(path *field.Path, s3 *S3BackupSource, missing string) field.ErrorList {
	var errs field.ErrorList
	if s3 == nil {
		return field.ErrorList{field.Required(path, missing)}
	}
	if bucket, key, ok := strings.Cut(s3.Path, "/"); !ok || bucket == "" || key == "" {
		errs = append(errs, field.Invalid(path.Child("path"), s3.Path, `must be "<bucket>/<key>"`))
	}
	if s3.AWSSecret == "" {
		errs = append(errs, field.Required(path.Child("awsSecret"), "the Secret with the AWS files credentials and config"))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(s3.AWSSecret) {
			errs = append(errs, field.Invalid(path.Child("awsSecret"), s3.AWSSecret, msg))
		}
	}
	if s3.Endpoint != "" {
		if u, err := url.Parse(s3.Endpoint); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			errs = append(errs, field.Invalid(path.Child("endpoint"), s3.Endpoint, "must be an http(s) URL"))
		}
	}
	return errs
}

func validatePVC(path *field.Path, pvc *PVCBackupSource, missing string) field.ErrorList {
	var errs field.ErrorList
	if pvc == nil {
		return field.ErrorList{field.Required(path, missing)}
	}
	for _, msg := range validation.IsDNS1123Subdomain(pvc.ClaimName) {
		errs = append(errs, field.Invalid(path.Child("claimName"), pvc.ClaimName, msg))
	}
	if p := pvc.Path; p != "" && (strings.HasPrefix(p, "/") || strings.Contains(p, "..") || strings.HasSuffix(p, "/")) {
		errs = append(errs, field.Invalid(path.Child("path"), p, "must be a file path relative to the claim's root, without \"..\""))
	}
	return errs
}

// validateObjectName checks a name of an object in the same namespace.
func validateObjectName(path *field.Path, name string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

// validate checks that exactly one source is given, and that one.
func (s *RestoreSource) validate(path *field.Path) field.ErrorList {
	n := 0
	var errs field.ErrorList
	if s.S3 != nil {
		n++
		errs = append(errs, validateS3(path.Child("s3"), s.S3, "")...)
	}
	if s.PVC != nil {
		n++
		errs = append(errs, validatePVC(path.Child("pvc"), s.PVC, "")...)
	}
	if s.Backup != nil {
		n++
		errs = append(errs, validateObjectName(path.Child("backup", "name"), s.Backup.Name)...)
	}
	if n != 1 {
		errs = append(errs, field.Invalid(path, n, "give exactly one of s3, pvc and backup"))
	}
	return errs
}

// Validate checks an EtcdRestore as the hook needs it: the CoreOS rule that
// it is named after its cluster, and one usable source.
func (r *EtcdRestore) Validate() field.ErrorList {
	var errs field.ErrorList
	spec, path := r.Spec, field.NewPath("spec")
	switch {
	case spec.EtcdCluster.Name == "":
		errs = append(errs, field.Required(path.Child("etcdCluster", "name"), "name the EtcdCluster to restore"))
	case spec.EtcdCluster.Name != r.Name:
		errs = append(errs, field.Invalid(path.Child("etcdCluster", "name"), spec.EtcdCluster.Name,
			fmt.Sprintf("must equal metadata.name %q: an EtcdRestore is named after the EtcdCluster it restores", r.Name)))
	}
	switch {
	case spec.Backup != nil:
		errs = append(errs, validateObjectName(path.Child("backup", "name"), spec.Backup.Name)...)
		if spec.S3 != nil || spec.PVC != nil {
			errs = append(errs, field.Invalid(path.Child("backup"), spec.Backup.Name, "give spec.backup, or spec.s3 or spec.pvc, not both"))
		}
	case spec.BackupStorageType == BackupStorageS3:
		errs = append(errs, validateS3(path.Child("s3"), spec.S3, "backupStorageType S3 needs spec.s3")...)
	case spec.BackupStorageType == BackupStoragePVC:
		errs = append(errs, validatePVC(path.Child("pvc"), spec.PVC, "backupStorageType PVC needs spec.pvc")...)
	default:
		errs = append(errs, field.NotSupported(path.Child("backupStorageType"), spec.BackupStorageType, []BackupStorageType{BackupStorageS3, BackupStoragePVC}))
	}
	if spec.Revision < 0 {
		errs = append(errs, field.Invalid(path.Child("revision"), spec.Revision, "must be a revision, 1 or above"))
	}
	if spec.Revision != 0 && spec.Time != nil {
		errs = append(errs, field.Invalid(path.Child("time"), spec.Time.UTC().Format(time.RFC3339), "give revision or time, not both: they name two states"))
	}
	if spec.Encryption != nil {
		errs = append(errs, spec.Encryption.validate(path.Child("encryption"))...)
	}
	return errs
}

// ChainDir is the directory, under a continuous backup's key, that holds
// its chains (agent/archive's layout): a restore source whose path runs
// through it names a chain.
const ChainDir = ".pitr/"

// Target is the state the EtcdRestore asks for along a continuous
// backup's chain, or nil when it names none (no revision, time or key):
// whether the source is a chain then depends on the source.
func (r *EtcdRestore) Target() *ChainTarget {
	if r.Spec.Revision == 0 && r.Spec.Time == nil && r.Spec.Encryption == nil {
		return nil
	}
	return &ChainTarget{Revision: r.Spec.Revision, Time: r.Spec.Time, Encryption: r.Spec.Encryption}
}

// Source is the EtcdRestore's source in the form an EtcdCluster's
// spec.restore takes.
func (r *EtcdRestore) Source() RestoreSource {
	switch {
	case r.Spec.Backup != nil:
		return RestoreSource{Backup: r.Spec.Backup}
	case r.Spec.BackupStorageType == BackupStoragePVC:
		return RestoreSource{PVC: r.Spec.PVC}
	}
	return RestoreSource{S3: r.Spec.S3}
}

// validate repeats the CRD's rules on spec.TLS.auto's durations.
func (a *AutoTLS) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	validity := a.LeafValidity()
	if a.Validity != nil && a.Validity.Duration < MinCertValidity {
		errs = append(errs, field.Invalid(path.Child("validity"), a.Validity.Duration.String(), "at least "+MinCertValidity.String()))
	}
	if r := a.RenewBefore; r != nil && (r.Duration < MinCertRenewBefore || r.Duration >= validity) {
		errs = append(errs, field.Invalid(path.Child("renewBefore"), r.Duration.String(), "at least "+MinCertRenewBefore.String()+", and shorter than validity ("+validity.String()+")"))
	}
	return errs
}
