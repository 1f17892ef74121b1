package main

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/must"
)

// TestAHostileTenantCannotTakeOthersDown: a namespace the operator allowed
// onto a shared HAProxy writes everything it can at once — a Service
// mapping a backend the load balancer does not have, one with more pods
// than its backend has slots, ten thousand upstream entries, one upstream
// repeated ten thousand times, a hand-written slice naming two hundred
// pods that do not exist — while another team's two pods serve. The other
// team's servers stay active all along; a restarted HAProxy process is
// filled and marked ready although the hostile Services can never
// converge (on main it stayed unready for everyone); each hostile input
// gets its Event.
func TestAHostileTenantCannotTakeOthersDown(t *testing.T) {
	c, _ := clusterWithPods(t)
	h, err := haproxytest.RunWith(haproxytest.Options{Dir: t.TempDir(), Key: "k", Readiness: haproxytest.ReadyFilled},
		haproxytest.Backend{Name: "shop", Slots: 8}, haproxytest.Backend{Name: "small", Slots: 1},
		haproxytest.Backend{Name: "ghost", Slots: 4}, haproxytest.Backend{Name: "evil", Slots: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	startController(t, c, asControllerServiceAccount(t, c), fmt.Sprintf(`
loadBalancers:
  - name: edge
    type: haproxy
    instances: {static: [%q]}
    haproxy: {readyMap: %s}
    allowedNamespaces: {names: [shop, evil]}
    # evil's backends too (small, evil), and two no HAProxy has (a typo,
    # one not deployed yet): what the operator listed, a tenant maps.
    upstreams: [{name: shop}, {name: small}, {name: evil}, {name: nosuch}, {name: ghost}]
    allowedCIDRs: [198.18.0.0/15]
resync: 2s
`, h.Address(), h.ReadyMap))
	edge, err := haproxy.New(h.Address(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k := c.Client
	logEventsIfFailed(t, k)
	for _, ns := range []string{"shop", "evil"} {
		must.OK(t, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	tn := tenants{t, ctx, k}
	ready := func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", h.ReadyPort))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	// The hostile namespace's Warnings.
	events := func(name, reason, contains string) bool { return tn.warned("evil", name, reason, contains) }

	// The honest team.
	tn.service("shop", "web", "edge/shop", map[string]string{"app": "web"})
	shopA, shopB := tn.pod("shop", "web-a", "web"), tn.pod("shop", "web-b", "web")
	shopActive := func() bool {
		got, err := backend.Read(ctx, edge, "shop")
		return err == nil && len(got) == 2 && got[netip.AddrPortFrom(shopA, 8080)] == plan.Active && got[netip.AddrPortFrom(shopB, 8080)] == plan.Active
	}
	must.Eventually(t, ctx, 50*time.Millisecond, "shop's two pods active on edge/shop", shopActive)
	must.Eventually(t, ctx, 50*time.Millisecond, "the HAProxy process marked filled", ready)

	// The hostile one, all at once.
	many := make([]string, 10000)
	for i := range many {
		many[i] = fmt.Sprintf("edge/u%d", i)
	}
	tn.service("evil", "missing", "edge/nosuch", nil)
	tn.service("evil", "full", "edge/small", map[string]string{"app": "full"})
	tn.service("evil", "many", strings.Join(many, ","), nil)
	tn.service("evil", "repeat", strings.TrimSuffix(strings.Repeat("edge/evil,", 10000), ","), nil)
	tn.service("evil", "ghost", "edge/ghost", nil)
	for i := range 3 {
		tn.pod("evil", fmt.Sprintf("full-%d", i), "full")
	}
	ghosts := make([]discoveryv1.Endpoint, 200)
	for i := range ghosts {
		ghosts[i] = discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("198.19.%d.%d", i/250, 1+i%250)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "evil", Name: fmt.Sprintf("ghost-%d", i)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	}
	must.OK(t, k.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "ghost-1", Namespace: "evil", Labels: map[string]string{
			discoveryv1.LabelServiceName: "ghost", discoveryv1.LabelManagedBy: "someone.example"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		Endpoints:   ghosts,
	}))

	// From here on shop's servers must stay active, but while the
	// restarted process is being filled.
	var (
		mu        sync.Mutex
		lost      []string
		restarted bool
	)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			mu.Lock()
			r := restarted
			mu.Unlock()
			if !r && !shopActive() && watchCtx.Err() == nil {
				mu.Lock()
				lost = append(lost, time.Now().Format(time.TimeOnly+".000"))
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	must.Eventually(t, ctx, 50*time.Millisecond, "UpstreamCannotHold on evil/missing", func() bool { return events("missing", api.ReasonCannotHold, "nosuch") })
	must.Eventually(t, ctx, 50*time.Millisecond, "UpstreamCannotHold on evil/full", func() bool { return events("full", api.ReasonCannotHold, "no free server-template slot") })
	must.Eventually(t, ctx, 50*time.Millisecond, "BadUpstreamMapping on evil/many naming the bound", func() bool {
		return events("many", api.ReasonBadMapping, fmt.Sprintf("more than %d distinct upstreams", api.MaxUpstreams))
	})
	must.Eventually(t, ctx, 50*time.Millisecond, "EndpointNotAllowed on evil/ghost", func() bool { return events("ghost", api.ReasonEndpointNotAllowed, "") })
	// Ten thousand repetitions of one upstream are one mapping, which
	// converges (edge/evil exists, and the Service has no endpoints).
	for _, reason := range []string{api.ReasonBadMapping, api.ReasonCannotHold} {
		if events("repeat", reason, "") {
			t.Errorf("%s on evil/repeat; its repeated entry is one upstream it may map", reason)
		}
	}
	if got, err := backend.Read(ctx, edge, "ghost"); err != nil || len(got) != 0 {
		t.Errorf("edge/ghost holds %v (%v); want nothing: its pods do not exist", got, err)
	}
	if got, err := backend.Read(ctx, edge, "small"); err != nil || len(got) != 1 {
		t.Errorf("edge/small holds %v (%v); want its one slot filled", got, err)
	}

	// A new process: filled and ready although three hostile Services can
	// never converge on it.
	mu.Lock()
	restarted = true
	mu.Unlock()
	must.OK(t, h.Restart())
	restartedAt := time.Now()
	must.Eventually(t, ctx, 50*time.Millisecond, "the restarted HAProxy process marked filled", ready)
	t.Logf("the restarted process was filled and ready %s after the restart", time.Since(restartedAt).Round(10*time.Millisecond))
	if !shopActive() {
		t.Error("the restarted process was marked filled without shop's servers")
	}
	mu.Lock()
	restarted = false
	mu.Unlock()
	time.Sleep(3 * time.Second) // a resync of every Service, hostile ones included
	stopWatch()
	<-watched
	if len(lost) > 0 {
		t.Errorf("shop's servers were not both active at %d reads, from %s", len(lost), lost[0])
	}
}
