package serving

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pki is a CA and a client certificate it signed.
type pki struct {
	caPEM  []byte
	client tls.Certificate
}

func newPKI(t *testing.T, name string) pki {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, clientKey := key(), key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	clientTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	clientDER, err := x509.CreateCertificate(rand.Reader, clientTmpl, ca, &clientKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pki{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), client: tls.Certificate{Certificate: [][]byte{clientDER}, PrivateKey: clientKey}}
}

// With --client-ca-file the server answers only a client whose
// certificate the CA signs; a rotated CA file takes effect at the next
// handshake, without a restart.
func TestClientCAAnswersOnlyTheAPIServer(t *testing.T) {
	apiserver, other := newPKI(t, "apiserver"), newPKI(t, "other")
	file := filepath.Join(t.TempDir(), "client-ca.crt")
	if err := os.WriteFile(file, apiserver.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckClientCA(file); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("admitted")) }))
	// The server's own certificate is set before the options run, as
	// controller-runtime's webhook server sets its getter on the same
	// config after them (httptest would set it on a copy).
	cfg := &tls.Config{Certificates: []tls.Certificate{other.client}}
	ClientCA(file)(cfg)
	srv.Listener = tls.NewListener(srv.Listener, cfg)
	srv.Start()
	defer srv.Close()
	get := func(cert *tls.Certificate) error {
		// Only the client's side is under test: the server's certificate
		// is not verified.
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec
		if cert != nil {
			tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
		}
		c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		resp, err := c.Get("https://" + srv.Listener.Addr().String())
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := get(nil); err == nil {
		t.Error("a client without a certificate was answered")
	}
	if err := get(&other.client); err == nil {
		t.Error("a client with another CA's certificate was answered")
	}
	if err := get(&apiserver.client); err != nil {
		t.Errorf("the API server's certificate: %v", err)
	}
	// The CA rotates: the file now holds the other CA only.
	if err := os.WriteFile(file, other.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := get(&other.client); err != nil {
		t.Errorf("after the rotation, the new CA's client: %v", err)
	}
	if err := get(&apiserver.client); err == nil {
		t.Error("after the rotation, the old CA's client was still answered")
	}
	if err := os.WriteFile(file, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := get(&other.client); err == nil {
		t.Error("a client CA file without a certificate let a client in")
	}
	if err := CheckClientCA(file); err == nil {
		t.Error("CheckClientCA took a file without a certificate")
	}
}
