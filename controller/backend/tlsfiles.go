package backend

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Both drivers authenticate their admin APIs with files mounted into the
// controller's container (a cert-manager Secret, say): a CA bundle that
// verifies the load balancer's certificate and a client certificate the
// controller presents. They are read again for each new connection, so a
// renewed Secret is used without a restart.

// CAPool reads the PEM bundle at path into a pool.
func CAPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// LoadClientCertificate reads the key pair from certFile and keyFile.
func LoadClientCertificate(certFile, keyFile string) (*tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	return &pair, nil
}

// ClientCertificate returns a tls.Config.GetClientCertificate that reads
// the key pair from certFile and keyFile at each handshake.
func ClientCertificate(certFile, keyFile string) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return LoadClientCertificate(certFile, keyFile)
	}
}
