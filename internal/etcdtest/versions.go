package etcdtest

// The pinned releases. They must match mk/etcd.mk (a test checks), because
// that is what puts the binaries where testenv looks for them.
const (
	Version34 = "3.4.23" // Debian's etcd-server; best effort, see testenv.BuildHint
	Version35 = "3.5.35"
	Version36 = "3.6.16"
	Version37 = "3.7.3"

	// DefaultVersion matches the go.etcd.io/etcd/client/v3 the root module
	// uses, so a test that does not care about versions exercises the pair
	// that production is most likely to run.
	DefaultVersion = Version37
)

// BuiltVersions are the releases that "make etcd-bins" always produces, and
// so the ones a version-matrix test can rely on in CI.
var BuiltVersions = []string{Version35, Version36, Version37}

func versionOrDefault(v string) string {
	if v == "" {
		return DefaultVersion
	}
	return v
}
