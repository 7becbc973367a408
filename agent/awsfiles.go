package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/etcdhook/etcd-hook/agent/report"
)

// The S3 Secret of a CoreOS EtcdBackup holds the AWS shared files
// "credentials" and "config", and the agent reads their "default" profile.
// They are parsed here rather than by an SDK's loader: that loader also
// runs a credential_process command named in the file, which has no place
// in a backup Pod.
const profile = "default"

// AWSProfile is what the agent takes from the shared files.
type AWSProfile struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	Region          string
}

// LoadAWSProfile reads dir/credentials (required) and dir/config (optional;
// it gives the region).
func LoadAWSProfile(dir string) (AWSProfile, error) {
	var p AWSProfile
	credsPath := filepath.Join(dir, report.CredentialsFile)
	data, err := os.ReadFile(credsPath)
	if err != nil {
		return p, fmt.Errorf("the AWS credentials file: %w", err)
	}
	creds := parseINI(data)[profile]
	p.AccessKeyID, p.SecretAccessKey, p.SessionToken = creds["aws_access_key_id"], creds["aws_secret_access_key"], creds["aws_session_token"]
	for key, v := range map[string]string{"aws_access_key_id": p.AccessKeyID, "aws_secret_access_key": p.SecretAccessKey} {
		if v == "" {
			return p, fmt.Errorf("the AWS credentials file %s has no %s in its [%s] profile", credsPath, key, profile)
		}
	}
	data, err = os.ReadFile(filepath.Join(dir, report.ConfigFile))
	switch {
	case os.IsNotExist(err):
	case err != nil:
		return p, fmt.Errorf("the AWS config file: %w", err)
	default:
		sections := parseINI(data)
		// The config file names profiles "[profile x]", except default.
		for _, s := range []string{profile, "profile " + profile} {
			if r := sections[s]["region"]; r != "" {
				p.Region = r
			}
		}
	}
	return p, nil
}

// parseINI reads the AWS shared files' INI dialect: [section], key = value,
// comments after # or ;.
func parseINI(data []byte) map[string]map[string]string {
	out := map[string]map[string]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && strings.HasSuffix(line, "]"):
			section = strings.TrimSpace(line[1 : len(line)-1])
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			if out[section] == nil {
				out[section] = map[string]string{}
			}
			out[section][strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}
