package v1beta2

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateHousekeeping(t *testing.T) {
	off := false
	tests := []struct {
		name    string
		reason  string
		version string
		policy  *HousekeepingPolicy
		want    []string
	}{
		{"unset", "housekeeping is opt-in", "3.6.16", nil, nil},
		{"empty", "every field has a default", "3.6.16", &HousekeepingPolicy{}, nil},
		{"all set", "in range", "3.5.35", &HousekeepingPolicy{RecoverNoSpace: &off, DefragmentUnusedPercent: 99, DefragmentMinUnusedBytes: 1 << 20}, nil},
		{"etcd 3.4", "3.4 reports dbSizeInUse", "3.4.23", &HousekeepingPolicy{}, nil},
		{"percent 100", "a file is never all unused", "3.6.16", &HousekeepingPolicy{DefragmentUnusedPercent: 100},
			[]string{"spec.housekeeping.defragmentUnusedPercent: Invalid value: 100: must be between 1 and 99"}},
		{"percent negative", "the schema's minimum, repeated", "3.6.16", &HousekeepingPolicy{DefragmentUnusedPercent: -5},
			[]string{"spec.housekeeping.defragmentUnusedPercent: Invalid value: -5: must be between 1 and 99"}},
		{"tiny minimum", "a tiny database's unused share swings with every write", "3.6.16", &HousekeepingPolicy{DefragmentMinUnusedBytes: 4096},
			[]string{"spec.housekeeping.defragmentMinUnusedBytes: Invalid value: 4096: must be at least 1048576 (1 MiB)"}},
		{"etcd 3.3", "no dbSizeInUse before 3.4: every file would look all unused", "3.3.27", &HousekeepingPolicy{},
			[]string{`spec.housekeeping: Invalid value: "set": etcd 3.3.27 does not report how much of its database is in use (3.4 and later do), which housekeeping needs`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo"}, Spec: ClusterSpec{Size: 3, Version: tt.version, Housekeeping: tt.policy}}
			var got []string
			for _, e := range c.Validate() {
				got = append(got, e.Error())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s\nValidate() (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}

func TestHousekeepingDefaults(t *testing.T) {
	on, off := true, false
	tests := []struct {
		name          string
		reason        string
		policy        *HousekeepingPolicy
		want          *HousekeepingPolicy
		recover, defr bool
	}{
		{"unset", "nil stays off", nil, nil, false, false},
		{"empty", "setting the policy turns both tasks on", &HousekeepingPolicy{},
			&HousekeepingPolicy{RecoverNoSpace: &on, Defragment: &on, DefragmentUnusedPercent: 50, DefragmentMinUnusedBytes: 100 << 20}, true, true},
		{"defragmentation off", "each task turns off alone; thresholds keep what was set", &HousekeepingPolicy{Defragment: &off, DefragmentUnusedPercent: 30},
			&HousekeepingPolicy{RecoverNoSpace: &on, Defragment: &off, DefragmentUnusedPercent: 30, DefragmentMinUnusedBytes: 100 << 20}, true, false},
		{"recovery off", "", &HousekeepingPolicy{RecoverNoSpace: &off},
			&HousekeepingPolicy{RecoverNoSpace: &off, Defragment: &on, DefragmentUnusedPercent: 50, DefragmentMinUnusedBytes: 100 << 20}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.policy.WithDefaults()); diff != "" {
				t.Errorf("%s\nWithDefaults() (-want +got):\n%s", tt.reason, diff)
			}
			if got := tt.policy.RecoversNoSpace(); got != tt.recover {
				t.Errorf("%s: RecoversNoSpace() = %v, want %v", tt.reason, got, tt.recover)
			}
			if got := tt.policy.Defragments(); got != tt.defr {
				t.Errorf("%s: Defragments() = %v, want %v", tt.reason, got, tt.defr)
			}
		})
	}
}
