package v1beta2

// HousekeepingPolicy is the opt-in auto-pilot for etcd's database.
type HousekeepingPolicy struct {
}
