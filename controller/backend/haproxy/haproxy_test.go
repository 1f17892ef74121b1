package haproxy_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy/instancetest"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/tcpfront"
)

func TestDrainKeepsCookieTrafficAndSendsNewClientsElsewhere(t *testing.T) {
	instancetest.ForEachFlavour(t, testDrainKeepsCookieTraffic)
}

func testDrainKeepsCookieTraffic(t *testing.T, f instancetest.Flavour) {
	h := f.StartShop(t, "k1", 4)
	i := f.Instance(t, h)
	a, b := instancetest.Pod(t, "a"), instancetest.Pod(t, "b")
	instancetest.Apply(t, i, map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})

	// Collect a sticky cookie for pod a.
	var cookieA string
	for n := 0; n < 10 && cookieA == ""; n++ {
		if who, c := instancetest.Get(t, h, ""); who == "a" {
			cookieA = c
		}
	}
	if cookieA == "" {
		t.Fatal("never routed to pod a")
	}

	instancetest.Apply(t, i, map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active})
	for n := 0; n < 10; n++ {
		if who, _ := instancetest.Get(t, h, cookieA); who != "a" {
			t.Fatalf("a request with pod a's cookie went to %q while a drains", who)
		}
		if who, _ := instancetest.Get(t, h, ""); who != "b" {
			t.Fatalf("a new client went to %q while a drains, want b", who)
		}
	}

	// Down: even its cookie holders go elsewhere (redispatch).
	instancetest.Apply(t, i, map[netip.AddrPort]plan.State{a: plan.Down, b: plan.Active})
	if who, _ := instancetest.Get(t, h, cookieA); who != "b" {
		t.Errorf("with pod a down, its cookie went to %q, want b", who)
	}
	// Removed: the slot is free again; a dynamic server is deleted.
	instancetest.Apply(t, i, map[netip.AddrPort]plan.State{b: plan.Active})
	slots, err := i.SlotsForTest(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	free := 0
	for _, s := range slots {
		if s.Free {
			free++
		}
	}
	if f.Dynamic {
		if len(slots) != 1 || slots[0].Name != haproxy.DynamicName(b) {
			t.Errorf("servers after removing a: %+v, want %s alone", slots, haproxy.DynamicName(b))
		}
	} else if free != 3 {
		t.Errorf("%d free slots after removing a, want 3", free)
	}
}

func TestCookiesHoldAcrossRestartsAndReplicas(t *testing.T) {
	instancetest.ForEachFlavour(t, testCookiesHold)
}

func testCookiesHold(t *testing.T, f instancetest.Flavour) {
	h1, h2 := f.StartShop(t, "shared", 4), f.StartShop(t, "shared", 4)
	instance := f.Instance
	a, b := instancetest.Pod(t, "a"), instancetest.Pod(t, "b")
	want := map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active}
	// The two replicas fill their slots in a different order.
	instancetest.Apply(t, instance(t, h1), map[netip.AddrPort]plan.State{a: plan.Active})
	instancetest.Apply(t, instance(t, h1), map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})
	instancetest.Apply(t, instance(t, h2), map[netip.AddrPort]plan.State{b: plan.Active})
	instancetest.Apply(t, instance(t, h2), map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})

	var cookieA string
	for n := 0; n < 10 && cookieA == ""; n++ {
		if who, c := instancetest.Get(t, h1, ""); who == "a" {
			cookieA = c
		}
	}
	if who, _ := instancetest.Get(t, h2, cookieA); who != "a" {
		t.Fatalf("replica 2 sent replica 1's cookie for a to %q", who)
	}

	// A restart forgets every runtime change; the plan puts them back,
	// the drain included, and the cookie still leads to a.
	instancetest.Apply(t, instance(t, h1), want)
	if err := h1.Restart(); err != nil {
		t.Fatal(err)
	}
	got, err := backend.Read(context.Background(), instance(t, h1), "shop")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("after a restart HAProxy still has %v", got)
	}
	instancetest.Apply(t, instance(t, h1), want)
	if who, _ := instancetest.Get(t, h1, cookieA); who != "a" {
		t.Errorf("after restart and repair, a's cookie went to %q", who)
	}
	if who, _ := instancetest.Get(t, h1, ""); who != "b" {
		t.Errorf("after restart and repair, a new client went to %q, want b (a drains)", who)
	}
}

func TestErrors(t *testing.T) {
	haproxytest.ForEachVersion(t, testErrors)
}

func testErrors(t *testing.T, v haproxytest.Version) {
	h := v.Start(t, "k", haproxytest.Backend{Name: "shop", Slots: 1})
	i := instancetest.Instance(t, h)
	ctx := context.Background()
	a, b := instancetest.Pod(t, "a"), instancetest.Pod(t, "b")
	errs := instancetest.ApplyPass(ctx, i, "shop", plan.Calculate(nil, map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active}))
	if errs[0] != nil {
		t.Errorf("first add: %v", errs[0])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "no free server-template slot") {
		t.Errorf("second add into a full backend: %v", errs[1])
	}
	if _, err := backend.Read(ctx, i, "nope"); err == nil || !strings.Contains(err.Error(), "show servers state nope") {
		t.Errorf("unknown backend: %v", err)
	}
	down, _ := haproxy.New("unix:///nonexistent/admin.sock", time.Second)
	if _, err := backend.Read(ctx, down, "shop"); err == nil {
		t.Error("an unreachable instance answered")
	}
	// Dynamic servers on a version without them: refused, naming both.
	_, err := backend.Read(ctx, instancetest.Instance(t, h, haproxy.WithDynamicServers()), "shop")
	switch {
	case v.AtLeast(3, 0) && err != nil:
		t.Errorf("dynamic mode on %s: %v", v.Series, err)
	case !v.AtLeast(3, 0) && (err == nil || !strings.Contains(err.Error(), `mode "dynamic" needs HAProxy 3.0 or later, and this process runs `+v.Series)):
		t.Errorf("dynamic mode on %s: %v, want it refused naming the version", v.Series, err)
	}
}

// A pass reads the backend and sends its changes on one interactive
// Runtime API connection. An Apply without a read of its own pass reads
// the slots itself, on its own connection. The instance reaches HAProxy
// through a relay that counts its connections: HAProxy's own CumConns
// also counts whatever reaches the frontends' loopback ports, which other
// tests running at the same time may have used before.
func TestAPassIsOneRuntimeAPIConnection(t *testing.T) {
	instancetest.ForEachFlavour(t, testAPassIsOneConnection)
}

func testAPassIsOneConnection(t *testing.T, f instancetest.Flavour) {
	h := f.StartShop(t, "k", 4)
	relay, err := tcpfront.StartRelayTo("unix", h.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relay.Close)
	var opts []haproxy.Option
	if f.Dynamic {
		opts = append(opts, haproxy.WithDynamicServers())
	}
	i := instancetest.New(t, "tcp://"+relay.Addr(), opts...)
	a, b := instancetest.Pod(t, "a"), instancetest.Pod(t, "b")
	instancetest.Apply(t, i, map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})
	ctx := context.Background()
	// pass runs one pass (Begin, Apply, Close) to desired and returns the
	// connections it opened.
	pass := func(desired map[netip.AddrPort]plan.State) int {
		before := relay.Accepted()
		for _, err := range instancetest.Converge(ctx, i, "shop", desired) {
			if err != nil {
				t.Fatal(err)
			}
		}
		return relay.Accepted() - before
	}
	if n := pass(map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active}); n != 1 {
		t.Errorf("a drain pass took %d Runtime API connections, want 1", n)
	}
	if n := pass(map[netip.AddrPort]plan.State{a: plan.Down, b: plan.Active}); n != 1 {
		t.Errorf("a pass taking a server down took %d Runtime API connections, want 1", n)
	}
	got, err := backend.Read(ctx, i, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if got[a] != plan.Down || got[b] != plan.Active {
		t.Errorf("servers %v, want a down and b active", got)
	}
	// A slot removed and one added in one pass: slot mode waits for the
	// new addresses on the same connection (from 3.0 they land a moment
	// after their answer).
	c := instancetest.Pod(t, "c")
	if n := pass(map[netip.AddrPort]plan.State{b: plan.Active, c: plan.Active}); n != 1 {
		t.Errorf("a pass adding and removing servers took %d Runtime API connections, want 1", n)
	}
}

// A pass's changes go to the process it read, or nowhere: HAProxy
// restarted between the read and the Apply (a crash, a restart; a reload
// starts a new worker too), the Apply fails every change rather than
// write slots it read of one process to the next, and the next pass,
// which reads the new process, converges.
func TestAPassNeverWritesToAProcessItDidNotRead(t *testing.T) {
	instancetest.ForEachFlavour(t, testAPassStaysOnItsProcess)
}

func testAPassStaysOnItsProcess(t *testing.T, f instancetest.Flavour) {
	h := f.StartShop(t, "k", 4)
	i := f.Instance(t, h)
	a, b := instancetest.Pod(t, "a"), instancetest.Pod(t, "b")
	instancetest.Apply(t, i, map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})
	ctx := context.Background()
	p, err := i.Begin(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Restart(); err != nil { // no saved state: the new process starts empty
		t.Fatal(err)
	}
	desired := map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active}
	errs := p.Apply(ctx, plan.Calculate(p.Servers(), desired))
	p.Close()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if len(errs) == 0 || failed != len(errs) {
		t.Fatalf("an Apply after its process was replaced: %d of %d changes failed, want all (%v)", failed, len(errs), errs)
	}
	if got, err := backend.Read(ctx, i, "shop"); err != nil || len(got) != 0 {
		t.Fatalf("the new process holds %v (%v) after the failed Apply, want nothing written to it", got, err)
	}
	instancetest.Apply(t, i, desired)
}

// A pass holds one Runtime API connection until it is closed, applied or
// not: HAProxy serves 10 at once by default, and a held one is one fewer
// for the other passes. Fifteen read-only passes one after another, each
// on an Instance of its own with a 500 ms timeout, all get their answer
// (a pass that kept its connection would leave the eleventh waiting past
// its timeout).
func TestAClosedPassGivesItsConnectionBack(t *testing.T) {
	h := haproxytest.Start(t, "k", haproxytest.Backend{Name: "shop", Slots: 4})
	ctx := context.Background()
	for n := range 15 {
		i, err := haproxy.New(h.Address(), 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := backend.Read(ctx, i, "shop"); err != nil {
			t.Fatalf("reader %d (after %v): %v", n+1, time.Since(start).Round(time.Millisecond), err)
		}
	}
}
