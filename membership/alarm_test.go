package membership

import "testing"

func TestParseAlarm(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		in     string
		want   Alarm
		ok     bool
	}{
		{"NOSPACE", "as etcd 3.4 to 3.6 list it, trailing space included", "memberID:9829954754940738069 alarm:NOSPACE ", Alarm{9829954754940738069, AlarmNoSpace}, true},
		{"CORRUPT", "", "memberID:1 alarm:CORRUPT", Alarm{1, AlarmCorrupt}, true},
		{"no leader", "Status lists other errors beside alarms", "etcdserver: no leader", Alarm{}, false},
		{"NONE", "not an alarm", "memberID:1 alarm:NONE ", Alarm{}, false},
		{"no member", "", "alarm:NOSPACE", Alarm{}, false},
		{"bad member", "", "memberID:x alarm:NOSPACE", Alarm{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseAlarm(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s (%s): ParseAlarm(%q) = %+v, %v; want %+v, %v", tt.name, tt.reason, tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
