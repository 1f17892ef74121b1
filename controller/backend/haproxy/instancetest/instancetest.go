// Package instancetest is what the tests of the HAProxy backend and of the
// reload helper share to drive an haproxy.Instance against a real HAProxy
// (test/haproxytest): pods standing for servers, the instance of a
// flavour, a desired state applied and checked, requests with and without
// the sticky cookie.
package instancetest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/stickydrain/stickydrain/certs"
	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/haproxytest"
)

// Pod is an HTTP server standing for one pod: it answers its name.
func Pod(t testing.TB, name string) netip.AddrPort {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, name) }))
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
}

// New is the instance at addr with a 2 s timeout.
func New(t testing.TB, addr string, opts ...haproxy.Option) *haproxy.Instance {
	t.Helper()
	i, err := haproxy.New(addr, 2*time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// Instance is the instance of the HAProxy h.
func Instance(t testing.TB, h *haproxytest.HAProxy, opts ...haproxy.Option) *haproxy.Instance {
	t.Helper()
	return New(t, h.Address(), opts...)
}

// Flavour is one HAProxy version in one mode.
type Flavour struct{ haproxytest.Flavour }

// ForEachFlavour runs the test once per version and mode.
func ForEachFlavour(t *testing.T, test func(t *testing.T, f Flavour)) {
	haproxytest.ForEachFlavour(t, func(t *testing.T, f haproxytest.Flavour) { test(t, Flavour{f}) })
}

// StartShop runs HAProxy with the backend shop: slots, or none for
// dynamic servers.
func (f Flavour) StartShop(t *testing.T, key string, slots int) *haproxytest.HAProxy {
	return f.Start(t, key, f.Backend("shop", slots))
}

// Instance is the instance of h in f's mode.
func (f Flavour) Instance(t testing.TB, h *haproxytest.HAProxy) *haproxy.Instance {
	if f.Dynamic {
		return Instance(t, h, haproxy.WithDynamicServers())
	}
	return Instance(t, h)
}

// Apply brings the backend shop of i to desired, as a controller pass
// does, and checks that i then reads back exactly desired.
func Apply(t testing.TB, i *haproxy.Instance, desired map[netip.AddrPort]plan.State) {
	t.Helper()
	ctx := context.Background()
	for _, err := range Converge(ctx, i, "shop", desired) {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := backend.Read(ctx, i, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(desired, got, cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
		t.Fatalf("servers after apply (-want +got):\n%s", diff)
	}
}

// Converge runs one pass as the controller does: Begin, the changes from
// what it read to desired, Apply, Close; a failed read is its one error.
func Converge(ctx context.Context, i backend.Instance, upstream string, desired map[netip.AddrPort]plan.State) []error {
	p, err := i.Begin(ctx, upstream)
	if err != nil {
		return []error{err}
	}
	defer p.Close()
	return p.Apply(ctx, plan.Calculate(p.Servers(), desired))
}

// ApplyPass makes changes in a pass of its own (Begin, Apply, Close);
// each change fails with Begin's error when the read does.
func ApplyPass(ctx context.Context, i backend.Instance, upstream string, changes []plan.Change) []error {
	p, err := i.Begin(ctx, upstream)
	if err != nil {
		errs := make([]error, len(changes))
		for j := range errs {
			errs[j] = err
		}
		return errs
	}
	defer p.Close()
	return p.Apply(ctx, changes)
}

// Get returns who answered a GET / through h (or "status N") and the SRV
// cookie it was given or sent.
func Get(t testing.TB, h *haproxytest.HAProxy, cookie string) (string, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", h.URL()+"/", nil)
	if cookie != "" {
		req.Header.Set("Cookie", "SRV="+cookie)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	body := string(raw)
	for _, c := range resp.Cookies() {
		if c.Name == "SRV" {
			cookie = c.Value
		}
	}
	if resp.StatusCode != 200 {
		return fmt.Sprintf("status %d", resp.StatusCode), cookie
	}
	return body, cookie
}

// ClientCert signs a client certificate (ClientAuth) with the CA.
func ClientCert(t testing.TB, ca *certs.Bundle) (certPEM, keyPEM []byte) {
	t.Helper()
	c, k, err := ca.ClientCertificate("stickydrain-controller", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}
