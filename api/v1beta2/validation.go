package v1beta2

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

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
		errs = append(errs, field.Invalid(path.Child("version"), s.Version, `must be a semantic version such as "3.6.16"`))
	}
	if s.Pod != nil {
		for k := range s.Pod.Labels {
			if k == "app" || strings.HasPrefix(k, "etcd_") {
				errs = append(errs, field.Invalid(path.Child("pod", "labels").Key(k), k, `"app" and labels starting with "etcd_" are reserved for the hook`))
			}
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
		s3 := spec.S3
		if s3 == nil {
			errs = append(errs, field.Required(path.Child("s3"), "storageType S3 needs spec.s3"))
			break
		}
		if bucket, key, ok := strings.Cut(s3.Path, "/"); !ok || bucket == "" || key == "" {
			errs = append(errs, field.Invalid(path.Child("s3", "path"), s3.Path, `must be "<bucket>/<key>"`))
		}
		if s3.AWSSecret == "" {
			errs = append(errs, field.Required(path.Child("s3", "awsSecret"), "the Secret with the AWS files credentials and config"))
		}
		if s3.Endpoint != "" {
			if u, err := url.Parse(s3.Endpoint); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
				errs = append(errs, field.Invalid(path.Child("s3", "endpoint"), s3.Endpoint, "must be an http(s) URL"))
			}
		}
	case BackupStoragePVC:
		pvc := spec.PVC
		if pvc == nil {
			errs = append(errs, field.Required(path.Child("pvc"), "storageType PVC needs spec.pvc"))
			break
		}
		for _, msg := range validation.IsDNS1123Subdomain(pvc.ClaimName) {
			errs = append(errs, field.Invalid(path.Child("pvc", "claimName"), pvc.ClaimName, msg))
		}
		if p := pvc.Path; p != "" && (strings.HasPrefix(p, "/") || strings.Contains(p, "..") || strings.HasSuffix(p, "/")) {
			errs = append(errs, field.Invalid(path.Child("pvc", "path"), p, "must be a file path relative to the claim's root, without \"..\""))
		}
	default:
		errs = append(errs, field.NotSupported(path.Child("storageType"), spec.StorageType, []BackupStorageType{BackupStorageS3, BackupStoragePVC}))
	}
	if spec.ClientTLSSecret != "" {
		errs = append(errs, field.Invalid(path.Child("clientTLSSecret"), spec.ClientTLSSecret, "TLS clusters are not served yet"))
	}
	return errs
}
