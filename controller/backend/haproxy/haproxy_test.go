package haproxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/haproxytest"
)

// pod is an HTTP server standing for one pod.
func pod(t *testing.T, name string) netip.AddrPort {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, name) }))
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
}

func instance(t *testing.T, h *haproxytest.HAProxy, opts ...Option) *Instance {
	i, err := New(h.Address(), 2*time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// flavour is one HAProxy version in one mode.
type flavour struct{ haproxytest.Flavour }

// forEachFlavour runs the test once per version and mode.
func forEachFlavour(t *testing.T, test func(t *testing.T, f flavour)) {
	haproxytest.ForEachFlavour(t, func(t *testing.T, f haproxytest.Flavour) { test(t, flavour{f}) })
}

// start runs HAProxy with the backend shop: slots, or none for dynamic
// servers.
func (f flavour) start(t *testing.T, key string, slots int) *haproxytest.HAProxy {
	return f.Start(t, key, f.Backend("shop", slots))
}

func (f flavour) instance(t *testing.T, h *haproxytest.HAProxy) *Instance {
	if f.Dynamic {
		return instance(t, h, WithDynamicServers())
	}
	return instance(t, h)
}

func apply(t *testing.T, i *Instance, desired map[netip.AddrPort]plan.State) {
	t.Helper()
	ctx := context.Background()
	cur, err := i.Servers(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range i.Apply(ctx, "shop", plan.Calculate(cur, desired)) {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := i.Servers(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(desired, got, cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
		t.Fatalf("servers after apply (-want +got):\n%s", diff)
	}
}

// get returns who answered and the SRV cookie it was given or sent.
func get(t *testing.T, h *haproxytest.HAProxy, cookie string) (string, string) {
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

func TestDrainKeepsCookieTrafficAndSendsNewClientsElsewhere(t *testing.T) {
	forEachFlavour(t, testDrainKeepsCookieTraffic)
}

func testDrainKeepsCookieTraffic(t *testing.T, f flavour) {
	h := f.start(t, "k1", 4)
	i := f.instance(t, h)
	a, b := pod(t, "a"), pod(t, "b")
	apply(t, i, map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})

	// Collect a sticky cookie for pod a.
	var cookieA string
	for n := 0; n < 10 && cookieA == ""; n++ {
		if who, c := get(t, h, ""); who == "a" {
			cookieA = c
		}
	}
	if cookieA == "" {
		t.Fatal("never routed to pod a")
	}

	apply(t, i, map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active})
	for n := 0; n < 10; n++ {
		if who, _ := get(t, h, cookieA); who != "a" {
			t.Fatalf("a request with pod a's cookie went to %q while a drains", who)
		}
		if who, _ := get(t, h, ""); who != "b" {
			t.Fatalf("a new client went to %q while a drains, want b", who)
		}
	}

	// Down: even its cookie holders go elsewhere (redispatch).
	apply(t, i, map[netip.AddrPort]plan.State{a: plan.Down, b: plan.Active})
	if who, _ := get(t, h, cookieA); who != "b" {
		t.Errorf("with pod a down, its cookie went to %q, want b", who)
	}
	// Removed: the slot is free again; a dynamic server is deleted.
	apply(t, i, map[netip.AddrPort]plan.State{b: plan.Active})
	slots, err := i.slots(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	free := 0
	for _, s := range slots {
		if s.free {
			free++
		}
	}
	if f.Dynamic {
		if len(slots) != 1 || slots[0].name != dynamicName(b) {
			t.Errorf("servers after removing a: %+v, want %s alone", slots, dynamicName(b))
		}
	} else if free != 3 {
		t.Errorf("%d free slots after removing a, want 3", free)
	}
}

func TestCookiesHoldAcrossRestartsAndReplicas(t *testing.T) {
	forEachFlavour(t, testCookiesHold)
}

func testCookiesHold(t *testing.T, f flavour) {
	h1, h2 := f.start(t, "shared", 4), f.start(t, "shared", 4)
	instance := f.instance
	a, b := pod(t, "a"), pod(t, "b")
	want := map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active}
	// The two replicas fill their slots in a different order.
	apply(t, instance(t, h1), map[netip.AddrPort]plan.State{a: plan.Active})
	apply(t, instance(t, h1), map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})
	apply(t, instance(t, h2), map[netip.AddrPort]plan.State{b: plan.Active})
	apply(t, instance(t, h2), map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})

	var cookieA string
	for n := 0; n < 10 && cookieA == ""; n++ {
		if who, c := get(t, h1, ""); who == "a" {
			cookieA = c
		}
	}
	if who, _ := get(t, h2, cookieA); who != "a" {
		t.Fatalf("replica 2 sent replica 1's cookie for a to %q", who)
	}

	// A restart forgets every runtime change; the plan puts them back,
	// the drain included, and the cookie still leads to a.
	apply(t, instance(t, h1), want)
	if err := h1.Restart(); err != nil {
		t.Fatal(err)
	}
	got, err := instance(t, h1).Servers(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("after a restart HAProxy still has %v", got)
	}
	apply(t, instance(t, h1), want)
	if who, _ := get(t, h1, cookieA); who != "a" {
		t.Errorf("after restart and repair, a's cookie went to %q", who)
	}
	if who, _ := get(t, h1, ""); who != "b" {
		t.Errorf("after restart and repair, a new client went to %q, want b (a drains)", who)
	}
}

func TestErrors(t *testing.T) {
	haproxytest.ForEachVersion(t, testErrors)
}

func testErrors(t *testing.T, v haproxytest.Version) {
	h := v.Start(t, "k", haproxytest.Backend{Name: "shop", Slots: 1})
	i := instance(t, h)
	ctx := context.Background()
	a, b := pod(t, "a"), pod(t, "b")
	errs := i.Apply(ctx, "shop", plan.Calculate(nil, map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active}))
	if errs[0] != nil {
		t.Errorf("first add: %v", errs[0])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "no free server-template slot") {
		t.Errorf("second add into a full backend: %v", errs[1])
	}
	if _, err := i.Servers(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "show servers state nope") {
		t.Errorf("unknown backend: %v", err)
	}
	down, _ := New("unix:///nonexistent/admin.sock", time.Second)
	if _, err := down.Servers(ctx, "shop"); err == nil {
		t.Error("an unreachable instance answered")
	}
	// Dynamic servers on a version without them: refused, naming both.
	_, err := instance(t, h, WithDynamicServers()).Servers(ctx, "shop")
	switch {
	case v.AtLeast(3, 0) && err != nil:
		t.Errorf("dynamic mode on %s: %v", v.Series, err)
	case !v.AtLeast(3, 0) && (err == nil || !strings.Contains(err.Error(), `mode "dynamic" needs HAProxy 3.0 or later, and this process runs `+v.Series)):
		t.Errorf("dynamic mode on %s: %v, want it refused naming the version", v.Series, err)
	}
}

// A pass reads the backend once and sends its changes in one request: two
// Runtime API connections (HAProxy counts them in CumConns). An Apply
// without a read of its own pass reads the slots itself.
func TestAPassIsTwoRuntimeAPIRequests(t *testing.T) {
	forEachFlavour(t, testAPassIsTwoRequests)
}

func testAPassIsTwoRequests(t *testing.T, f flavour) {
	h := f.start(t, "k", 4)
	i := f.instance(t, h)
	a, b := pod(t, "a"), pod(t, "b")
	apply(t, i, map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})
	ctx := context.Background()
	conns := func() int {
		info, err := i.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(info["CumConns"])
		if err != nil {
			t.Fatalf("CumConns %q: %v", info["CumConns"], err)
		}
		return n
	}
	pass := func(desired map[netip.AddrPort]plan.State, read bool) int {
		before := conns()
		cur := map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active}
		if read {
			var err error
			if cur, err = i.Servers(ctx, "shop"); err != nil {
				t.Fatal(err)
			}
		}
		for _, err := range i.Apply(ctx, "shop", plan.Calculate(cur, desired)) {
			if err != nil {
				t.Fatal(err)
			}
		}
		return conns() - before - 1 // the second Info is counted too
	}
	if n := pass(map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active}, true); n != 2 {
		t.Errorf("a drain pass took %d Runtime API requests, want 2", n)
	}
	// Apply again without a read: it must not use the slots of the pass
	// before (consumed), and reads them itself.
	if n := pass(map[netip.AddrPort]plan.State{a: plan.Down, b: plan.Active}, false); n != 2 {
		t.Errorf("an Apply without a read took %d Runtime API requests, want 2 (a read and the change)", n)
	}
	got, err := i.Servers(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if got[a] != plan.Down || got[b] != plan.Active {
		t.Errorf("servers %v, want a down and b active", got)
	}
}
