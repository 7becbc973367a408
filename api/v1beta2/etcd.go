package v1beta2

import (
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// EtcdSettings are etcd's own flags that keep a database healthy. The hook
// renders them for each etcd release line. A change rolls to every member,
// one at a time, like any other change of the member Pods.
type EtcdSettings struct {
	// QuotaBackendBytes is the database size at which etcd raises its
	// NOSPACE alarm and refuses writes until space is freed. 0 means the
	// default, 2 GiB (etcd's own); etcd advises 8 GiB at most.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=8589934592
	// +optional
	QuotaBackendBytes int64 `json:"quotaBackendBytes,omitempty"`

	// AutoCompactionMode is "periodic" (keep the history of the last
	// autoCompactionRetention, a duration) or "revision" (keep the last
	// autoCompactionRetention revisions). Default: periodic.
	// +kubebuilder:validation:Enum=periodic;revision
	// +optional
	AutoCompactionMode string `json:"autoCompactionMode,omitempty"`

	// AutoCompactionRetention is how much history etcd keeps: a duration
	// such as "1h" or "30m" (a bare number is hours) in periodic mode, a
	// number of revisions in revision mode. Default: "1h". "0" turns
	// compaction off, and the database then grows until NOSPACE.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	AutoCompactionRetention string `json:"autoCompactionRetention,omitempty"`
}

// Defaults of EtcdSettings, chosen in docs/etcdcluster.md, "etcd settings".
const (
	DefaultQuotaBackendBytes       int64 = 2 << 30
	DefaultAutoCompactionMode            = "periodic"
	DefaultAutoCompactionRetention       = "1h"
	// MaxQuotaBackendBytes is the largest quota etcd advises.
	MaxQuotaBackendBytes int64 = 8 << 30
)

// WithDefaults fills in the defaults; a nil receiver is all defaults.
func (e *EtcdSettings) WithDefaults() *EtcdSettings {
	out := EtcdSettings{}
	if e != nil {
		out = *e
	}
	if out.QuotaBackendBytes == 0 {
		out.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	if out.AutoCompactionMode == "" {
		out.AutoCompactionMode = DefaultAutoCompactionMode
	}
	if out.AutoCompactionRetention == "" {
		out.AutoCompactionRetention = DefaultAutoCompactionRetention
	}
	return &out
}

// validate checks what the CRD's schema cannot: the retention's form in
// each mode, and what releases before 3.3 understand (hours, periodic
// mode only).
func (e *EtcdSettings) validate(path *field.Path, version string) field.ErrorList {
	if e == nil {
		return nil
	}
	var errs field.ErrorList
	if e.QuotaBackendBytes < 0 || e.QuotaBackendBytes > MaxQuotaBackendBytes {
		errs = append(errs, field.Invalid(path.Child("quotaBackendBytes"), e.QuotaBackendBytes, fmt.Sprintf("must be between 0 (etcd's default) and %d (8 GiB, the most etcd advises)", MaxQuotaBackendBytes)))
	}
	d := e.WithDefaults()
	if d.AutoCompactionMode != "periodic" && d.AutoCompactionMode != "revision" {
		errs = append(errs, field.NotSupported(path.Child("autoCompactionMode"), d.AutoCompactionMode, []string{"periodic", "revision"}))
		return errs
	}
	retention := path.Child("autoCompactionRetention")
	_, isHours := d.RetentionHours()
	switch {
	case d.AutoCompactionMode == "revision":
		if n, err := strconv.ParseInt(d.AutoCompactionRetention, 10, 64); err != nil || n < 0 {
			errs = append(errs, field.Invalid(retention, d.AutoCompactionRetention, "in revision mode, must be a number of revisions such as \"10000\""))
		}
	case !isHours:
		if dur, err := time.ParseDuration(d.AutoCompactionRetention); err != nil || dur < 0 {
			errs = append(errs, field.Invalid(retention, d.AutoCompactionRetention, "in periodic mode, must be a duration such as \"1h\" or \"30m\", or a number of hours"))
		}
	}
	if v, ok := parseSemver(version); ok && v[0] == 3 && v[1] < 3 {
		switch {
		case d.AutoCompactionMode == "revision":
			errs = append(errs, field.Invalid(path.Child("autoCompactionMode"), d.AutoCompactionMode, "etcd "+version+" compacts periodically only: revision mode arrived in 3.3"))
		case !isHours:
			errs = append(errs, field.Invalid(retention, d.AutoCompactionRetention, "etcd "+version+" takes whole hours only: durations arrived in 3.3"))
		}
	}
	return errs
}

// RetentionHours is the periodic retention as a whole number of hours,
// the only form etcd before 3.3 reads: a bare number, or a duration of
// whole hours.
func (e *EtcdSettings) RetentionHours() (int64, bool) {
	if n, err := strconv.ParseInt(e.AutoCompactionRetention, 10, 64); err == nil {
		return n, true
	}
	if dur, err := time.ParseDuration(e.AutoCompactionRetention); err == nil && dur >= 0 && dur%time.Hour == 0 {
		return int64(dur / time.Hour), true
	}
	return 0, false
}

// parseSemver reads major and minor of a version the schema accepts.
func parseSemver(version string) ([2]int, bool) {
	m := semverPattern.FindStringSubmatch(version)
	if m == nil {
		return [2]int{}, false
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return [2]int{major, minor}, true
}
