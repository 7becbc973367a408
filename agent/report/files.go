package report

// The Secret an EtcdBackup's spec.s3.awsSecret names holds the AWS shared
// files under these keys, as the CoreOS operator's did: the planner checks
// that they are there, and the agent reads their "default" profile.
const (
	CredentialsFile = "credentials"
	ConfigFile      = "config"
)
