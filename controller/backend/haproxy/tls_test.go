package haproxy_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy/instancetest"

	"github.com/stickydrain/stickydrain/certs"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/proc"
)

// The Runtime API on TCP with TLS and client certificates, on the real
// HAProxy of each version under test: the controller, holding a client
// certificate of the CA HAProxy trusts, reads and changes servers; a client
// without one — plain TCP, TLS without a certificate, a certificate of
// another CA — changes nothing.
func TestTheRuntimeAPIOnTCPNeedsTheClientCertificate(t *testing.T) {
	for _, v := range haproxytest.Versions(t) {
		t.Run(v.Series, func(t *testing.T) {
			dir := t.TempDir()
			ca, err := certs.Generate(certs.Options{IPs: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"haproxy-runtime.lb.svc"}})
			if err != nil {
				t.Fatal(err)
			}
			write := func(name string, b ...[]byte) string {
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, []byte(strings.Join(strs(b), "")), 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			}
			serverPEM := write("runtime.pem", ca.Cert, ca.Key)
			caFile := write("ca.crt", ca.CACert)
			cert, key := instancetest.ClientCert(t, ca)
			certFile, keyFile := write("client.crt", cert), write("client.key", key)
			other, err := certs.Generate(certs.Options{DNSNames: []string{"x"}})
			if err != nil {
				t.Fatal(err)
			}
			otherCert, otherKey := instancetest.ClientCert(t, other)
			otherCertFile, otherKeyFile := write("other.crt", otherCert), write("other.key", otherKey)

			ports, err := proc.FreePorts(1)
			if err != nil {
				t.Fatal(err)
			}
			addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
			h, err := haproxytest.RunWith(haproxytest.Options{Dir: dir, Bin: v.Bin, Key: "k", RuntimeTCP: addr,
				RuntimeTLS: &haproxytest.RuntimeTLS{CertKey: serverPEM, CA: caFile}}, haproxytest.Backend{Name: "shop", Slots: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(h.Stop)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			server := netip.MustParseAddrPort("198.18.0.10:8080")
			want := map[netip.AddrPort]plan.State{server: plan.Active}

			good, err := haproxy.New("tcp://"+addr, 2*time.Second, haproxy.WithTLS(haproxy.TLSFiles{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}))
			if err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(instancetest.ApplyPass(ctx, good, "shop", plan.Calculate(nil, want))...); err != nil {
				t.Fatalf("with the client certificate: %v", err)
			}
			if got, err := backend.Read(ctx, good, "shop"); err != nil || got[server] != plan.Active {
				t.Fatalf("with the client certificate: servers %v, %v", got, err)
			}
			// By the Service's DNS name, as a controller finding pods does.
			named, err := haproxy.New("tcp://"+addr, 2*time.Second, haproxy.WithTLS(haproxy.TLSFiles{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "haproxy-runtime.lb.svc"}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := backend.Read(ctx, named, "shop"); err != nil {
				t.Errorf("by the server name: %v", err)
			}

			for name, c := range map[string]*haproxy.Instance{
				"plain TCP":                          instancetest.New(t, "tcp://"+addr),
				"a client certificate of another CA": instancetest.New(t, "tcp://"+addr, haproxy.WithTLS(haproxy.TLSFiles{CAFile: caFile, CertFile: otherCertFile, KeyFile: otherKeyFile})),
			} {
				err := errors.Join(instancetest.ApplyPass(ctx, c, "shop", plan.Calculate(want, map[netip.AddrPort]plan.State{server: plan.Draining}))...)
				if err == nil {
					t.Errorf("%s: a drain was applied", name)
				}
			}
			// Nothing changed it.
			if got, err := backend.Read(ctx, good, "shop"); err != nil || got[server] != plan.Active {
				t.Errorf("after the refused clients: %v, %v; want %s still active", got, err, server)
			}
			// A client that does not trust HAProxy's certificate stops
			// before it sends anything.
			if _, err := backend.Read(ctx, instancetest.New(t, "tcp://"+addr, haproxy.WithTLS(haproxy.TLSFiles{CAFile: write("other-ca.crt", other.CACert), CertFile: certFile, KeyFile: keyFile})), "shop"); err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("a server certificate of an unknown CA: %v", err)
			}
		})
	}
}

func strs(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}
