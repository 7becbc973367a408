package membership

import (
	"slices"
	"strconv"
	"strings"
)

// Alarm types, as etcd names them.
const (
	AlarmNoSpace = "NOSPACE"
	AlarmCorrupt = "CORRUPT"
)

// Alarm is one alarm etcd holds: its type, and the member that raised it.
type Alarm struct {
	MemberID uint64
	Type     string
}

// ParseAlarm reads an alarm as etcd lists it among a member's Status
// errors: the protobuf text of an AlarmMember, such as
// "memberID:9829954754940738069 alarm:NOSPACE " (3.4 to 3.6).
func ParseAlarm(s string) (Alarm, bool) {
	var a Alarm
	haveID := false
	for _, field := range strings.Fields(s) {
		key, value, _ := strings.Cut(field, ":")
		switch key {
		case "memberID":
			id, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				return Alarm{}, false
			}
			a.MemberID, haveID = id, true
		case "alarm":
			a.Type = value
		}
	}
	if !haveID || a.Type == "" || a.Type == "NONE" {
		return Alarm{}, false
	}
	return a, true
}

// Alarms are the alarms the members that answered report, each once,
// sorted by type and member.
func (ms *Membership) Alarms() []Alarm {
	if ms == nil {
		return nil
	}
	var out []Alarm
	for _, m := range ms.Members {
		for _, e := range m.Errors {
			if a, ok := ParseAlarm(e); ok && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, func(a, b Alarm) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return compareUint(a.MemberID, b.MemberID)
	})
	return out
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// HasAlarm reports whether an alarm of the type is among alarms.
func HasAlarm(alarms []Alarm, typ string) bool {
	return slices.ContainsFunc(alarms, func(a Alarm) bool { return a.Type == typ })
}

// FenceMemberID is the member ID under which the hook raises etcd's
// CORRUPT alarm to fence off writes before a final backup (a hibernation
// through a backup). etcd then refuses every write that goes through raft
// (puts, deletes, transactions, compactions, lease grants and revokes)
// and still serves reads, Status and snapshots. etcd's own member IDs are
// hashes of a member's URLs and a time, so none is this: an alarm under it
// is the hook's fence and nothing else. The alarm is in the final backup
// too, so a cluster restored from one starts fenced until the hook lifts
// it (or a person runs "etcdctl alarm disarm").
//
// Its bytes spell "etcdhook" ("etcdhook" in ASCII, big-endian), so that
// "etcdctl alarm list" shows a recognisable hex ID.
const FenceMemberID uint64 = 0x65746364686f6f6b

// Fence is the alarm the hook raises as its fence.
var Fence = Alarm{MemberID: FenceMemberID, Type: AlarmCorrupt}

// Fenced reports whether the hook's fence is among alarms.
func Fenced(alarms []Alarm) bool {
	return slices.Contains(alarms, Fence)
}

// WithoutFence is alarms less the hook's fence: the alarms etcd itself
// raised.
func WithoutFence(alarms []Alarm) []Alarm {
	if !Fenced(alarms) {
		return alarms
	}
	return slices.DeleteFunc(slices.Clone(alarms), func(a Alarm) bool { return a == Fence })
}
