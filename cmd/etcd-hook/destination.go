package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"strings"
	"time"

	"github.com/etcdhook/etcd-hook/agent"
)

// destinationFlags are what the backup and archive modes share: the
// cluster to read, the client certificate to read it with, and the store
// to write to (S3, or a mounted claim).
type destinationFlags struct {
	endpoints                  string
	s3Path, s3Endpoint, awsDir string
	pathStyle                  bool
	dir, file, volume          string
	tlsFiles                   agent.ClientTLSFiles
}

func (d *destinationFlags) register(fs *flag.FlagSet, pathHelp string) {
	fs.StringVar(&d.endpoints, "endpoints", "", "comma-separated client URLs of the cluster's members")
	fs.StringVar(&d.s3Path, "s3-path", "", pathHelp)
	fs.StringVar(&d.s3Endpoint, "s3-endpoint", "", "the S3 store's URL; empty for AWS S3")
	fs.BoolVar(&d.pathStyle, "s3-force-path-style", false, "address the bucket in the path rather than the host name")
	fs.StringVar(&d.awsDir, "aws-dir", "/etc/etcd-backup/aws", `directory holding the AWS shared files "credentials" and "config" (the mounted awsSecret)`)
	fs.StringVar(&d.dir, "dir", "", "a volume destination instead of S3: the directory the claim is mounted at")
	fs.StringVar(&d.file, "file", "etcd.backup", "with --dir, the backup's path within it")
	fs.StringVar(&d.volume, "volume", "", "with --dir, the claim's name, for the location in the result")
	// etcdctl's names, as the CoreOS operator's users know them.
	fs.StringVar(&d.tlsFiles.Cert, "cert", "", "client certificate for members that serve TLS (https endpoints); with --key and --cacert")
	fs.StringVar(&d.tlsFiles.Key, "key", "", "the client certificate's private key")
	fs.StringVar(&d.tlsFiles.CA, "cacert", "", "the CA the members' server certificates are checked against")
	fs.StringVar(&d.tlsFiles.Secret, "tls-secret", "", "the Secret mounted with --cert, --key and --cacert, named when a file is missing")
}

// endpointList is --endpoints split, blanks dropped.
func (d *destinationFlags) endpointList() []string {
	var eps []string
	for _, e := range strings.Split(d.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return eps
}

// clientTLS is the client certificate, or nil without one.
func (d *destinationFlags) clientTLS() (*tls.Config, error) {
	if d.tlsFiles.IsZero() {
		return nil, nil
	}
	return agent.LoadClientTLS(d.tlsFiles, time.Now())
}

// store is the destination and the backup's key in it.
func (d *destinationFlags) store() (agent.Store, string, error) {
	switch {
	case d.dir != "" && d.s3Path != "":
		return nil, "", errors.New("--dir and --s3-path name two destinations; give one")
	case d.dir != "":
		files, err := agent.NewFileStore(d.dir, d.volume)
		if err != nil {
			return nil, "", err
		}
		return files, d.file, nil
	}
	profile, err := agent.LoadAWSProfile(d.awsDir)
	if err != nil {
		return nil, "", err
	}
	cfg := agent.S3Config{Path: d.s3Path, Endpoint: d.s3Endpoint, ForcePathStyle: d.pathStyle, Profile: profile}
	s3, err := agent.NewS3Store(cfg)
	if err != nil {
		return nil, "", err
	}
	return s3, cfg.Key(), nil
}
