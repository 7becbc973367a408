package pemcert

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// ErrNoCertificate: the data holds no PEM CERTIFICATE block.
var ErrNoCertificate = errors.New("holds no PEM certificate")

// First parses the first certificate of PEM data.
func First(data []byte) (*x509.Certificate, error) {
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return nil, ErrNoCertificate
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("the certificate does not parse: %w", err)
		}
		return cert, nil
	}
}
