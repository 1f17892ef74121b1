package reconcile

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/endpoints"
	"github.com/stickydrain/stickydrain/controller/plan"
)

type fakeInstance struct {
	backend.Instance
	id string
}

func (f *fakeInstance) ID() string { return f.id }

func TestInstancePoolKeepsOneInstancePerAddressUntilReset(t *testing.T) {
	p := newInstancePool()
	made := 0
	create := func(a string) (backend.Instance, error) {
		made++
		if a == "bad" {
			return nil, errors.New("bad address")
		}
		return &fakeInstance{id: a}, nil
	}
	first, err := p.get([]string{"a", "b"}, create)
	if err != nil || len(first) != 2 || first[0].ID() != "a" || first[1].ID() != "b" {
		t.Fatalf("get = %v, %v", first, err)
	}
	again, _ := p.get([]string{"b", "a"}, create)
	if again[0] != first[1] || again[1] != first[0] || made != 2 {
		t.Errorf("a second get made new instances (%d made) or lost the order", made)
	}
	if _, err := p.get([]string{"a", "bad"}, create); err == nil {
		t.Error("an address the driver refuses gave no error")
	}
	p.reset()
	after, _ := p.get([]string{"a"}, create)
	if after[0] == first[0] {
		t.Error("reset kept the old instance")
	}
}

func TestDrainLedger(t *testing.T) {
	l := newDrainLedger()
	u := upstreamRef{LB: "edge", Upstream: "shop"}
	a1, a2 := netip.MustParseAddrPort("198.18.0.1:80"), netip.MustParseAddrPort("198.18.0.2:80")
	pod := func(name string, state plan.State, terminating bool) endpoints.Endpoint {
		return endpoints.Endpoint{PodNamespace: "shop", PodName: name, State: state, Terminating: terminating}
	}
	t0 := time.Unix(1000, 0)

	// Nothing drains: no oldest drain.
	if oldest := l.observe(u, map[netip.AddrPort]endpoints.Endpoint{a1: pod("p1", plan.Active, false), a2: pod("p2", plan.Active, false)}, t0); !oldest.IsZero() {
		t.Errorf("oldest drain %v with none under way", oldest)
	}
	// p2 begins to drain at t0+1s; seen again later, its start stays.
	d := map[netip.AddrPort]endpoints.Endpoint{a1: pod("p1", plan.Active, false), a2: pod("p2", plan.Draining, true)}
	if oldest := l.observe(u, d, t0.Add(time.Second)); !oldest.Equal(t0.Add(time.Second)) {
		t.Errorf("oldest drain %v, want %v", oldest, t0.Add(time.Second))
	}
	if oldest := l.observe(u, d, t0.Add(5*time.Second)); !oldest.Equal(t0.Add(time.Second)) {
		t.Errorf("a drain seen again moved its start to %v", oldest)
	}
	if since, ok := l.since(u, a2); !ok || !since.Equal(t0.Add(time.Second)) {
		t.Errorf("since = %v %v", since, ok)
	}
	// Still desired: nothing is gone.
	if gone := l.forgetGone(u, d); len(gone) != 0 {
		t.Errorf("forgetGone with every server desired: %v", gone)
	}
	// p2 goes: it is gone once, with its pod; its drain start is forgotten.
	d = map[netip.AddrPort]endpoints.Endpoint{a1: pod("p1", plan.Active, false)}
	gone := l.forgetGone(u, d)
	if len(gone) != 1 || gone[0].addr != a2 || gone[0].pod.PodName != "p2" {
		t.Errorf("gone = %+v, want p2 at %s", gone, a2)
	}
	if _, ok := l.since(u, a2); ok {
		t.Error("a gone server's drain start is kept")
	}
	if gone := l.forgetGone(u, d); len(gone) != 0 {
		t.Errorf("a server was gone twice: %v", gone)
	}
	// The upstream emptied: forgotten.
	l.forgetGone(u, nil)
	if _, ok := l.pods[u]; ok {
		t.Error("an empty upstream is kept")
	}

	// Events: sent when more instances applied it than the last said.
	k := announcement{u, a2, api.ReasonDraining}
	for _, c := range []struct {
		answered int
		send     bool
	}{{1, true}, {1, false}, {2, true}, {1, false}} {
		if got := l.tell(k, c.answered); got != c.send {
			t.Errorf("tell(%d) = %v, want %v", c.answered, got, c.send)
		}
	}
	// Removed forgets the server's announcements: it may come back.
	if !l.tell(announcement{u, a2, api.ReasonRemoved}, 2) {
		t.Error("Removed not told")
	}
	if !l.tell(k, 1) {
		t.Error("a Draining after Removed (the address back with another pod) was not told")
	}

	// Servers left on an instance.
	hk := heldKey{"tcp://127.0.0.1:1", u}
	if had := l.left(hk, 3); had != 0 {
		t.Errorf("left first = %d", had)
	}
	if had := l.left(hk, 0); had != 3 {
		t.Errorf("left then = %d, want 3", had)
	}
}

func TestOwnershipIndex(t *testing.T) {
	o := newOwnershipIndex()
	a, b := types.NamespacedName{Namespace: "shop", Name: "a"}, types.NamespacedName{Namespace: "blog", Name: "b"}
	ups := []upstreamRef{{LB: "edge", Upstream: "shop"}}
	o.set(a, ups)
	o.set(b, ups)
	ups[0].Upstream = "changed" // the index keeps its own copy
	if got := o.held(a); len(got) != 1 || got[0].Upstream != "shop" {
		t.Errorf("held = %v", got)
	}
	if !o.has(a) || !slices.Equal(o.services(), []types.NamespacedName{b, a}) {
		t.Errorf("services = %v", o.services())
	}
	o.set(a, nil) // holds nothing: out
	if o.has(a) || len(o.held(a)) != 0 || !slices.Equal(o.services(), []types.NamespacedName{b}) {
		t.Errorf("after holding nothing: has %v, services %v", o.has(a), o.services())
	}
}

// Passes on one instance are bounded across every Service, served in the
// order they came; another instance has its own bound, and a pass that
// cannot begin before its context ends says so.
func TestPassLimiterBoundsPassesPerInstance(t *testing.T) {
	l := newPassLimiter(2)
	ctx := context.Background()
	a1, err1 := l.begin(ctx, "a")
	_, err2 := l.begin(ctx, "a")
	b1, err3 := l.begin(ctx, "b")
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	b1()
	third := make(chan struct{})
	go func() {
		done, err := l.begin(ctx, "a")
		if err == nil {
			done()
		}
		close(third)
	}()
	select {
	case <-third:
		t.Fatal("a third pass on instance a began while two were open")
	case <-time.After(100 * time.Millisecond):
	}
	a1()
	select {
	case <-third:
	case <-time.After(5 * time.Second):
		t.Fatal("the third pass did not begin once one ended")
	}
	l2 := newPassLimiter(1)
	hold, _ := l2.begin(ctx, "a")
	defer hold()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l2.begin(short, "a"); err == nil || !strings.Contains(err.Error(), "every one of its 1 passes is taken") {
		t.Errorf("a pass that could not begin: %v", err)
	}
}
