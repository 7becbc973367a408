package membership

import "fmt"

// ActionType is the kind of membership change.
type ActionType string

const (
	ActionAddMember     ActionType = "add"
	ActionPromoteMember ActionType = "promote"
	ActionRemoveMember  ActionType = "remove"
	ActionMoveLeader    ActionType = "move-leader"

	// Housekeeping (see housekeeping.go): they leave the membership as it
	// is.
	ActionCompact     ActionType = "compact"
	ActionDefragment  ActionType = "defragment"
	ActionDisarmAlarm ActionType = "disarm-nospace"

	// The hook's write fence (alarm.go): etcd's CORRUPT alarm under
	// FenceMemberID, raised before a final backup and lifted after.
	ActionRaiseFence ActionType = "raise-fence"
	ActionLiftFence  ActionType = "lift-fence"

	// etcd's downgrade protocol (see downgrade.go): they change the cluster
	// version, never the membership.
	ActionEnableDowngrade ActionType = "downgrade-enable"
	ActionCancelDowngrade ActionType = "downgrade-cancel"
)

// Maintenance reports whether the action looks after etcd's database
// rather than changing the membership.
func (t ActionType) Maintenance() bool {
	switch t {
	case ActionCompact, ActionDefragment, ActionDisarmAlarm, ActionRaiseFence, ActionLiftFence, ActionEnableDowngrade, ActionCancelDowngrade:
		return true
	}
	return t.Auth()
}

// Action is the one membership change a sync may make.
type Action struct {
	Type ActionType
	// Name is the member the action is about.
	Name string
	// MemberID identifies the member for promote, remove and move-leader
	// (the member leadership moves to).
	MemberID uint64
	// PeerURL is the new member's peer URL, for add.
	PeerURL string
	// AsLearner adds a non-voting member, on etcd 3.4 and later.
	AsLearner bool
	// LeaderID and LeaderEndpoint say where move-leader must be sent: etcd
	// accepts it only from the current leader.
	LeaderID       uint64
	LeaderEndpoint string
	// Revision is what compact compacts the history to.
	Revision int64
	// Version is the release line a downgrade is enabled for: "3.6".
	Version string
	// Endpoint is the member defragment is sent to: a defragmentation
	// works on the database of the member that receives it.
	Endpoint string
	// User, Role and Permission are what an authentication step is about,
	// and Password a new user's (never printed).
	User, Role string
	Permission *Permission
	Password   string
	// Reason is why the planner chose this action, for logs and status.
	Reason string
	// Step is the Progressing condition's reason while the action is made.
	Step string
}

func (a Action) String() string {
	if a.Type.Auth() {
		return a.authString()
	}
	switch a.Type {
	case ActionAddMember:
		kind := "voting member"
		if a.AsLearner {
			kind = "learner"
		}
		return fmt.Sprintf("add %s %s (%s)", kind, a.Name, a.PeerURL)
	case ActionMoveLeader:
		return fmt.Sprintf("move leadership to %s (%x)", a.Name, a.MemberID)
	case ActionCompact:
		return fmt.Sprintf("compact the history to revision %d", a.Revision)
	case ActionDefragment:
		return fmt.Sprintf("defragment member %s (%x)", a.Name, a.MemberID)
	case ActionDisarmAlarm:
		return "disarm the NOSPACE alarm"
	case ActionRaiseFence:
		return fmt.Sprintf("fence off writes (raise the CORRUPT alarm as member %x)", FenceMemberID)
	case ActionLiftFence:
		return "lift the write fence (disarm the hook's CORRUPT alarm)"
	case ActionEnableDowngrade:
		return "validate and enable etcd's downgrade to " + a.Version
	case ActionCancelDowngrade:
		return "cancel etcd's downgrade"
	default:
		return fmt.Sprintf("%s member %s (%x)", a.Type, a.Name, a.MemberID)
	}
}
