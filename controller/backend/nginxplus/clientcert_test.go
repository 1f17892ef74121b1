package nginxplus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/certs"
	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/nginxplus"
)

// An NGINX Plus API behind TLS with client certificates (NGINX's
// `ssl_verify_client on`), here the emulator behind Go's TLS server, which
// checks the certificate the way NGINX does: against the CA it is given.
// The controller with its client certificate reads and changes servers; a
// client without one, or with another CA's, changes nothing; a renewed
// certificate is used on the next connection without a new instance.
func TestTheAPIBehindClientCertificates(t *testing.T) {
	ca, err := certs.Generate(certs.Options{DNSNames: []string{"nginx-plus.lb"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.Generate(certs.Options{DNSNames: []string{"elsewhere"}})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.X509KeyPair(ca.Cert, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(ca.CACert)

	e := nginxplus.New(nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop"}}})
	var mu sync.Mutex
	var seen []string // the client certificates' names, one per connection
	srv := httptest.NewUnstartedServer(e.Handler())
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{serving},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clients,
		VerifyConnection: func(cs tls.ConnectionState) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, cs.PeerCertificates[0].Subject.CommonName)
			return nil
		},
	}
	srv.StartTLS()
	defer srv.Close()
	url := srv.URL + "/api"

	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := write("ca.crt", ca.CACert)
	cert, key := clientCert(t, ca, "controller-1")
	certFile, keyFile := write("tls.crt", cert), write("tls.key", key)
	opts := &config.NGINXPlusOptions{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "nginx-plus.lb"}

	n, err := New(url, lb(opts))
	if err != nil {
		t.Fatal(err)
	}
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})

	ctx := context.Background()
	drainB := []plan.Change{{Op: plan.OpSet, Addr: b, State: plan.Draining}}
	// Without a client certificate, and with one of another CA: refused at
	// the handshake, nothing changed.
	bare, err := New(url, lb(&config.NGINXPlusOptions{CAFile: caFile, ServerName: "nginx-plus.lb"}))
	if err != nil {
		t.Fatal(err)
	}
	if errs := apply(ctx, bare, "shop", drainB); errs[0] == nil {
		t.Error("a client without a certificate drained a server")
	}
	oc, ok := clientCert(t, other, "intruder")
	stranger, err := New(url, lb(&config.NGINXPlusOptions{CAFile: caFile, ServerName: "nginx-plus.lb",
		CertFile: write("other.crt", oc), KeyFile: write("other.key", ok)}))
	if err != nil {
		t.Fatal(err)
	}
	if errs := apply(ctx, stranger, "shop", drainB); errs[0] == nil {
		t.Error("a client with another CA's certificate drained a server")
	}
	got, err := backend.Read(ctx, n, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if got[b] != plan.Active {
		t.Errorf("server b is %v after the refused clients, want active", got[b])
	}

	// The Secret renewed in place: the next connection presents the new
	// certificate, with the same instance.
	cert2, key2 := clientCert(t, ca, "controller-2")
	write("tls.crt", cert2)
	write("tls.key", key2)
	srv.CloseClientConnections()
	n.http.CloseIdleConnections()
	if errs := apply(ctx, n, "shop", drainB); errs[0] != nil {
		t.Fatalf("draining with the renewed certificate: %v", errs[0])
	}
	mu.Lock()
	last := seen[len(seen)-1]
	names := strings.Join(seen, ",")
	mu.Unlock()
	if last != "controller-2" {
		t.Errorf("the connection after the renewal presented %q (all: %s), want controller-2", last, names)
	}

	// The server's name is checked: another serverName is refused.
	misnamed, err := New(url, lb(&config.NGINXPlusOptions{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "elsewhere.lb"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backend.Read(ctx, misnamed, "shop"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a certificate not naming serverName was accepted: %v", err)
	}

	// A missing key file is said at once, naming the fields.
	if _, err := New(url, lb(&config.NGINXPlusOptions{CertFile: certFile, KeyFile: filepath.Join(dir, "missing.key")})); err == nil || !strings.Contains(err.Error(), "nginxPlus.certFile, keyFile") {
		t.Errorf("a missing key file: %v", err)
	}
}

func TestInstancesBehindAServiceAreReachedOverHTTPSWithTLSSettings(t *testing.T) {
	ep := netip.MustParseAddrPort("198.18.0.9:8081")
	if got := (Driver{}).InstanceAddress(lb(nil), ep); got != "http://198.18.0.9:8081/api" {
		t.Errorf("without TLS settings: %s", got)
	}
	if got := (Driver{}).InstanceAddress(lb(&config.NGINXPlusOptions{CertFile: "/tls/tls.crt", KeyFile: "/tls/tls.key", CAFile: "/tls/ca.crt"}), ep); got != "https://198.18.0.9:8081/api" {
		t.Errorf("with a client certificate: %s", got)
	}
}

func clientCert(t *testing.T, ca *certs.Bundle, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	c, k, err := ca.ClientCertificate(cn, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}
