package v1beta2

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

// Defaults of EtcdSettings, chosen in the README's "etcd settings".
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
