package v1beta2

// EtcdSettings are etcd flags the hook renders for each etcd release line.
type EtcdSettings struct {
}
