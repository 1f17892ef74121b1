package nginxplus

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/nginxplus"
)

// These tests run against the NGINX Plus API emulator (test/nginxplus),
// not NGINX Plus.

var (
	a = netip.MustParseAddrPort("198.18.0.1:8080")
	b = netip.MustParseAddrPort("198.18.0.2:8080")
)

func emulator(t *testing.T, opts nginxplus.Options, wrap func(http.Handler) http.Handler) (*nginxplus.Emulator, string) {
	e := nginxplus.New(opts)
	h := e.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return e, srv.URL + "/api"
}

func lb(o *config.NGINXPlusOptions) config.LoadBalancer {
	return config.LoadBalancer{Name: "edge", Type: Type, Timeout: config.Duration{Duration: 2 * time.Second}, NGINXPlus: o}
}

func converge(t *testing.T, n *Instance, upstream string, desired map[netip.AddrPort]plan.State) {
	t.Helper()
	ctx := context.Background()
	p, err := n.Begin(ctx, upstream)
	if err != nil {
		t.Fatal(err)
	}
	target := p.(backend.Normalizer).Normalize(desired)
	errs := p.Apply(ctx, plan.Calculate(p.Servers(), target))
	p.Close()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := backend.Read(ctx, n, upstream)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(target, got, cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
		t.Fatalf("after apply (-want +got):\n%s", diff)
	}
}

// applyPass applies changes on p and closes it.
func applyPass(ctx context.Context, p backend.Pass, changes []plan.Change) []error {
	defer p.Close()
	return p.Apply(ctx, changes)
}

// apply makes changes in a pass of its own; each change fails with
// Begin's error when the read does.
func apply(ctx context.Context, n *Instance, upstream string, changes []plan.Change) []error {
	p, err := n.Begin(ctx, upstream)
	if err != nil {
		errs := make([]error, len(changes))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer p.Close()
	return p.Apply(ctx, changes)
}

func TestHTTPUpstreamLifecycle(t *testing.T) {
	e, url := emulator(t, nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop"}}}, nil)
	n, err := New(url, lb(nil))
	if err != nil {
		t.Fatal(err)
	}
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})
	before := e.Requests()
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active})
	t.Logf("API calls for one drain, reads included: %d", e.Requests()-before)
	if s := e.Servers(false, "shop"); !s[0].Drain || s[0].Down {
		t.Errorf("emulator holds %+v, want drain: true", s[0])
	}
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Down, b: plan.Active})
	// Leaving drain needs a delete and an add (drain=false cannot be sent).
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active})
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})
	converge(t, n, "shop", map[netip.AddrPort]plan.State{b: plan.Active})
	if s := e.Servers(false, "shop"); len(s) != 1 || s[0].Server != b.String() {
		t.Errorf("after removal: %+v", s)
	}
}

// A pass reads the servers (and /nginx, at most every 5 s); its drain then
// reads the IDs again, by address, and sends one PATCH: 3 API calls. The
// second read is the price of never patching by an ID a reload moved.
func TestADrainIsAReadByAddressAndOnePATCH(t *testing.T) {
	e, url := emulator(t, nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop"}}}, nil)
	n, _ := New(url, lb(nil))
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})
	ctx := context.Background()
	before := e.Requests()
	p, err := n.Begin(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range applyPass(ctx, p, plan.Calculate(p.Servers(), map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active})) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if calls := e.Requests() - before; calls != 3 {
		t.Errorf("a drain took %d API calls, want 3 (the pass's GET servers, the write's GET servers, PATCH; /nginx was read by the pass before)", calls)
	}
	if s := e.Servers(false, "shop"); !s[0].Drain {
		t.Errorf("emulator holds %+v, want drain: true", s[0])
	}
}

// A scale-down removing two servers reads the IDs once: each DELETE's
// answer (the servers left) serves the next: the pass's read, one read,
// two DELETEs.
func TestRemovalsReadTheIDsOnce(t *testing.T) {
	e, url := emulator(t, nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop"}}}, nil)
	n, _ := New(url, lb(nil))
	c := netip.MustParseAddrPort("198.18.0.3:8080")
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active, c: plan.Active})
	ctx := context.Background()
	before := e.Requests()
	p, err := n.Begin(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range applyPass(ctx, p, plan.Calculate(p.Servers(), map[netip.AddrPort]plan.State{c: plan.Active})) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if calls := e.Requests() - before; calls != 4 {
		t.Errorf("removing two servers took %d API calls, want 4 (the pass's read, one read of the IDs, two DELETEs)", calls)
	}
	if s := e.Servers(false, "shop"); len(s) != 1 || s[0].Server != c.String() {
		t.Errorf("emulator holds %+v, want c alone", s)
	}
}

// When the ID read earlier went stale (the server was removed and added
// again by someone else between the read and the write), the drain looks
// the ID up again instead of failing.
func TestADrainSurvivesAStaleID(t *testing.T) {
	e, url := emulator(t, nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop"}}}, nil)
	n, _ := New(url, lb(nil))
	other, _ := New(url, lb(nil))
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Active})
	ctx := context.Background()
	p, err := n.Begin(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	converge(t, other, "shop", map[netip.AddrPort]plan.State{})
	converge(t, other, "shop", map[netip.AddrPort]plan.State{a: plan.Active})
	for _, err := range applyPass(ctx, p, plan.Calculate(p.Servers(), map[netip.AddrPort]plan.State{a: plan.Draining})) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if s := e.Servers(false, "shop"); len(s) != 1 || !s[0].Drain {
		t.Errorf("emulator holds %+v, want one server, drain: true", s)
	}
}

// A reload renumbers the servers (NGINX Plus reads its state file again
// from ID 0), so an ID read before it may name another server after it.
// Servers are found by address at the write, never by an ID from the
// pass's read: a reload between the pass's read and its write changes
// nothing, the drain lands on b and c is never touched.
func TestADrainFindsTheServerByAddressAfterARenumbering(t *testing.T) {
	e, url := emulator(t, nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop", State: true}}}, nil)
	n, _ := New(url, lb(nil))
	other, _ := New(url, lb(nil))
	c := netip.MustParseAddrPort("198.18.0.3:8080")
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active, c: plan.Active})
	ctx := context.Background()
	p, err := n.Begin(ctx, "shop") // IDs a 0, b 1, c 2
	if err != nil {
		t.Fatal(err)
	}
	converge(t, other, "shop", map[netip.AddrPort]plan.State{b: plan.Active, c: plan.Active})
	e.Reload() // b 0, c 1: ID 1, read as b's, is now c's
	for _, err := range applyPass(ctx, p, plan.Calculate(p.Servers(), map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Draining, c: plan.Active})) {
		if err != nil {
			t.Errorf("the drain of b after a renumbering: %v", err)
		}
	}
	for _, s := range e.Servers(false, "shop") {
		switch s.Server {
		case b.String():
			if !s.Drain {
				t.Errorf("b is %+v, want draining", s)
			}
		case c.String():
			if s.Drain || s.Down {
				t.Errorf("c is %+v: the drain of b landed on it", s)
			}
		}
	}
}

// reloadBeforeNextWrite wraps the emulator's API so that a reload happens
// just before the next PATCH or DELETE is served: the one instant where an
// ID read by address can still name another server.
type reloadBeforeNextWrite struct {
	e     *nginxplus.Emulator
	armed bool
	mu    sync.Mutex
}

func (r *reloadBeforeNextWrite) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		fire := r.armed && (req.Method == http.MethodPatch || req.Method == http.MethodDelete)
		if fire {
			r.armed = false
		}
		r.mu.Unlock()
		if fire {
			r.e.Reload()
		}
		h.ServeHTTP(w, req)
	})
}

func (r *reloadBeforeNextWrite) arm() { r.mu.Lock(); r.armed = true; r.mu.Unlock() }

// A reload between the write's own read and the write: a PATCH never
// carries the address, so c is never moved onto b's; the answer names c,
// the pass reports it, and the next pass puts c back. A DELETE by the
// moved ID deletes c: it is added back at once, as it was (draining), and
// reported; b goes at the next pass.
func TestAWriteRacingARenumberingIsRepaired(t *testing.T) {
	c := netip.MustParseAddrPort("198.18.0.3:8080")
	ctx := context.Background()
	// start: a 0, b 1, c 2 (c in state cState); a deleted by another
	// writer (b 1, c 2); the next write is preceded by a reload (b 0, c 1).
	start := func(t *testing.T, cState plan.State) (*nginxplus.Emulator, *Instance, *reloadBeforeNextWrite) {
		rl := &reloadBeforeNextWrite{}
		e, url := emulator(t, nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop", State: true}}}, rl.wrap)
		rl.e = e
		n, _ := New(url, lb(nil))
		other, _ := New(url, lb(nil))
		converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active, c: cState})
		converge(t, other, "shop", map[netip.AddrPort]plan.State{b: plan.Active, c: cState})
		rl.arm()
		return e, n, rl
	}
	find := func(e *nginxplus.Emulator, addr netip.AddrPort) (nginxplus.Server, bool) {
		for _, s := range e.Servers(false, "shop") {
			if s.Server == addr.String() {
				return s, true
			}
		}
		return nginxplus.Server{}, false
	}
	t.Run("patch", func(t *testing.T) {
		e, n, _ := start(t, plan.Active)
		p, err := n.Begin(ctx, "shop")
		if err != nil {
			t.Fatal(err)
		}
		errs := applyPass(ctx, p, plan.Calculate(p.Servers(), map[netip.AddrPort]plan.State{b: plan.Draining, c: plan.Active}))
		if len(errs) != 1 || errs[0] == nil || !strings.Contains(errs[0].Error(), c.String()) {
			t.Errorf("a drain of b racing a renumbering returned %v; want an error naming %s, the server the ID named", errs, c)
		}
		if _, ok := find(e, c); !ok {
			t.Fatalf("c is gone: the PATCH moved it to b's address (%+v)", e.Servers(false, "shop"))
		}
		if len(e.Servers(false, "shop")) != 2 {
			t.Errorf("servers after the race: %+v, want b and c", e.Servers(false, "shop"))
		}
		converge(t, n, "shop", map[netip.AddrPort]plan.State{b: plan.Draining, c: plan.Active})
	})
	t.Run("delete", func(t *testing.T) {
		e, n, _ := start(t, plan.Draining)
		p, err := n.Begin(ctx, "shop")
		if err != nil {
			t.Fatal(err)
		}
		errs := applyPass(ctx, p, plan.Calculate(p.Servers(), map[netip.AddrPort]plan.State{c: plan.Draining}))
		if len(errs) != 1 || errs[0] == nil || !strings.Contains(errs[0].Error(), c.String()) {
			t.Errorf("a removal of b racing a renumbering returned %v; want an error naming %s, the server deleted by mistake", errs, c)
		}
		if s, ok := find(e, c); !ok || !s.Drain {
			t.Errorf("c after the race: %+v (present %v); want it added back, draining", s, ok)
		}
		converge(t, n, "shop", map[netip.AddrPort]plan.State{c: plan.Draining})
	})
}

func TestStreamUpstreamsMarkDrainsDown(t *testing.T) {
	e, url := emulator(t, nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "tcp", Zone: "tcp", Stream: true}}}, nil)
	n, _ := New(url, lb(nil))
	converge(t, n, "tcp", map[netip.AddrPort]plan.State{a: plan.Active})
	converge(t, n, "tcp", map[netip.AddrPort]plan.State{a: plan.Draining})
	if s := e.Servers(true, "tcp"); len(s) != 1 || !s[0].Down {
		t.Errorf("stream server %+v, want down (no drain in stream)", s)
	}
}

func TestRestartIsDetectedAndRepaired(t *testing.T) {
	e, url := emulator(t, nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop"}}}, nil)
	n, _ := New(url, lb(nil))
	n.checkEvery = 0 // read /nginx on every pass
	want := map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active}
	converge(t, n, "shop", want)
	e.Restart()
	converge(t, n, "shop", want)
	if n.Restarts() != 1 {
		t.Errorf("restarts seen %d, want 1", n.Restarts())
	}
	if s := e.Servers(false, "shop"); len(s) != 2 {
		t.Errorf("after repair: %+v", s)
	}
}

func TestVersionNegotiation(t *testing.T) {
	_, url := emulator(t, nginxplus.Options{MaxVersion: 6, Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop"}}}, nil)
	n, _ := New(url, lb(nil))
	if _, err := backend.Read(context.Background(), n, "shop"); err != nil {
		t.Fatalf("negotiating against an API offering 1–6: %v", err)
	}
	if v := n.c.Version(); v != 6 {
		t.Errorf("negotiated %d, want 6", v)
	}
	pinned, _ := New(url, lb(&config.NGINXPlusOptions{APIVersion: 9}))
	if _, err := backend.Read(context.Background(), pinned, "shop"); err == nil || !strings.Contains(err.Error(), "no common API version") {
		t.Errorf("pinned 9 against 1–6: %v", err)
	}
}

func TestCredentialsFromFiles(t *testing.T) {
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth")
	hdrs := filepath.Join(dir, "headers")
	os.WriteFile(auth, []byte("controller:s3cret\n"), 0o600)
	os.WriteFile(hdrs, []byte("X-Api-Key: k1\n"), 0o600)
	_, url := emulator(t, nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop"}}}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			if !ok || u != "controller" || p != "s3cret" || r.Header.Get("X-Api-Key") != "k1" {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	n, err := New(url, lb(&config.NGINXPlusOptions{BasicAuthFile: auth, HeaderFile: hdrs}))
	if err != nil {
		t.Fatal(err)
	}
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Active})
	bare, _ := New(url, lb(nil))
	if _, err := backend.Read(context.Background(), bare, "shop"); err == nil {
		t.Error("an unauthenticated client got through")
	}
}

func TestErrors(t *testing.T) {
	e, url := emulator(t, nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop"}}}, nil)
	n, _ := New(url, lb(nil))
	ctx := context.Background()
	if _, err := backend.Read(ctx, n, "nope"); err == nil || !strings.Contains(err.Error(), "neither an http nor a stream upstream") {
		t.Errorf("unknown upstream: %v", err)
	}
	e.SetWritable(false)
	errs := apply(ctx, n, "shop", []plan.Change{{Op: plan.OpAdd, Addr: a, State: plan.Active}})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "MethodDisabled") {
		t.Errorf("write=off: %v", errs[0])
	}
	if _, err := New("http://x", lb(&config.NGINXPlusOptions{CAFile: "/nonexistent"})); err == nil || !strings.Contains(err.Error(), "nginxPlus.caFile") {
		t.Errorf("missing CA file: %v", err)
	}
}

func TestTLSWithCAFile(t *testing.T) {
	e := nginxplus.New(nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop"}}})
	srv := httptest.NewTLSServer(e.Handler())
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pemOf(srv.Certificate().Raw), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := New(srv.URL+"/api", lb(&config.NGINXPlusOptions{CAFile: ca}))
	if err != nil {
		t.Fatal(err)
	}
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Active})
	untrusting, _ := New(srv.URL+"/api", lb(nil))
	if _, err := backend.Read(context.Background(), untrusting, "shop"); err == nil {
		t.Error("an unknown certificate was accepted without caFile")
	}
}

func pemOf(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestNames(t *testing.T) {
	for _, tt := range []struct {
		answered, server string
		want             bool
	}{
		{"198.18.0.1:8080", "198.18.0.1:8080", true},
		{"", "198.18.0.1:8080", true}, // no address in the answer: nothing to check
		{"[::ffff:198.18.0.1]:8080", "198.18.0.1:8080", true},
		{"[2001:db8::1]:8080", "[2001:db8:0::1]:8080", true},
		{"198.18.0.3:8080", "198.18.0.1:8080", false},
		{"198.18.0.1:8081", "198.18.0.1:8080", false},
		{"backend.example:8080", "198.18.0.1:8080", false},
	} {
		if got := names(tt.answered, tt.server); got != tt.want {
			t.Errorf("names(%q, %q) = %v, want %v", tt.answered, tt.server, got, tt.want)
		}
	}
}

// A PATCH refused says why: NGINX Plus's code and text, or that the
// answer was not the API's (a proxy in front of it).
func TestPatchErrorsSayWhy(t *testing.T) {
	var broken atomic.Bool
	e, url := emulator(t, nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop"}}}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if broken.Load() && r.Method == http.MethodPatch {
				http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	n, _ := New(url, lb(nil))
	converge(t, n, "shop", map[netip.AddrPort]plan.State{a: plan.Active})
	e.SetWritable(false)
	_, err := n.patch(context.Background(), "http", "shop", 0, map[string]bool{"drain": true})
	if err == nil || !strings.Contains(err.Error(), "status 405, MethodDisabled") {
		t.Errorf("a PATCH with writes off: %v, want status 405, MethodDisabled", err)
	}
	e.SetWritable(true)
	broken.Store(true)
	_, err = n.patch(context.Background(), "http", "shop", 0, map[string]bool{"drain": true})
	if err == nil || !strings.Contains(err.Error(), "status 502 Bad Gateway (not an NGINX Plus API answer)") {
		t.Errorf("a PATCH answered by a broken proxy: %v", err)
	}
}
