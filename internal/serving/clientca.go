package serving

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// ClientCA makes an HTTPS server ask every client for a certificate and
// accept only one the CA bundle in file signs: the webhook then answers
// the API server alone (configured to present a client certificate to
// admission webhooks, its AdmissionConfiguration's kubeConfigFile), not
// any pod that can reach its port. The file is read again at each
// handshake when it changed, so a rotated CA takes effect without a
// restart; a file that cannot be read fails the handshake, never opens it.
func ClientCA(file string) func(*tls.Config) {
	var (
		mu   sync.Mutex
		last []byte
		pool *x509.CertPool
	)
	load := func() (*x509.CertPool, error) {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--client-ca-file: %w", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if pool != nil && bytes.Equal(b, last) {
			return pool, nil
		}
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(b) {
			return nil, errors.New("--client-ca-file " + file + ": no PEM certificate in it")
		}
		last, pool = b, p
		return p, nil
	}
	return func(c *tls.Config) {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			p, err := load()
			if err != nil {
				return nil, err
			}
			// The server's settings as they are now (its certificate
			// getter is set after the options run), with today's CAs.
			cc := c.Clone()
			cc.GetConfigForClient = nil
			cc.ClientCAs = p
			return cc, nil
		}
	}
}

// CheckClientCA reads file as ClientCA will, so that a wrong path or a
// file without a certificate is refused at start, naming the flag.
func CheckClientCA(file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--client-ca-file: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return fmt.Errorf("--client-ca-file %s: no PEM certificate in it; want the CA bundle that signs the API server's client certificate", file)
	}
	return nil
}
