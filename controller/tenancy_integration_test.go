package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/backend/nginxplus"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/framework"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/must"
	emulator "github.com/stickydrain/stickydrain/test/nginxplus"
)

// TestTenancy: only the namespaces the operator allows map onto a load
// balancer, only onto their own pods, whatever order Services come in —
// on a real HAProxy and on the NGINX Plus API emulator (test/nginxplus,
// not NGINX Plus). A watcher reads both load balancers all along and
// fails the test on any server that is not an allowed pod.
func TestTenancy(t *testing.T) {
	c, _ := clusterWithPods(t)
	h := haproxytest.Start(t, "k", haproxytest.Backend{Name: "shop", Slots: 8}, haproxytest.Backend{Name: "checkout", Slots: 8})
	emu := emulator.New(emulator.Options{Upstreams: []emulator.Upstream{{Name: "shop", Zone: "shop"}}})
	srv := httptest.NewServer(emu.Handler())
	t.Cleanup(srv.Close)
	plus, err := nginxplus.New(srv.URL+"/api", config.LoadBalancer{Name: "plus", Type: nginxplus.Type, Timeout: config.Duration{Duration: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	configFor := func(edgeNamespaces, checkoutOwner string) string {
		return fmt.Sprintf(`
loadBalancers:
  - name: edge
    type: haproxy
    instances: {static: [%q]}
    allowedNamespaces: {names: [%s]}
    upstreams:
      - {name: shop}
      - {name: checkout, owner: %s}
    allowedCIDRs: [198.18.0.0/15]
  - name: plus
    type: nginx-plus
    instances: {static: [%q]}
    allowedNamespaces: {selector: {matchLabels: {tenant: web}}}
    upstreams: [{name: shop}]
resync: 2s
`, h.Address(), edgeNamespaces, checkoutOwner, srv.URL+"/api")
	}
	ctl := startController(t, c, asControllerServiceAccount(t, c), configFor("shop, blog", "shop/checkout"))
	configPath := ctl.args[slices.Index(ctl.args, "--config")+1]
	edge, err := haproxy.New(h.Address(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k := c.Client
	for ns, labels := range map[string]map[string]string{"shop": {"tenant": "web"}, "blog": nil, "evil": nil} {
		must.OK(t, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}))
	}

	// What both load balancers hold, read all along: nothing but the pods
	// of a Service allowed there may ever appear.
	read := func() (edgeShop, edgeCheckout, plusShop map[netip.AddrPort]plan.State) {
		edgeShop, _ = backend.Read(ctx, edge, "shop")
		edgeCheckout, _ = backend.Read(ctx, edge, "checkout")
		plusShop, _ = backend.Read(ctx, plus, "shop")
		return
	}
	var (
		mu      sync.Mutex
		allowed = map[string]map[netip.Addr]bool{"edge/shop": {}, "edge/checkout": {}, "plus/shop": {}}
		bad     []string
	)
	allow := func(u string, addrs ...netip.Addr) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range addrs {
			allowed[u][a] = true
		}
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			es, ec, ps := read()
			mu.Lock()
			for u, m := range map[string]map[netip.AddrPort]plan.State{"edge/shop": es, "edge/checkout": ec, "plus/shop": ps} {
				for a := range m {
					if !allowed[u][a.Addr()] {
						bad = append(bad, fmt.Sprintf("%s held %s at %s", u, a, time.Now().Format(time.TimeOnly)))
					}
				}
			}
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		stopWatch()
		<-watched
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			t.Errorf("servers that no allowed Service owns reached a load balancer:\n%s", strings.Join(bad[:min(len(bad), 20)], "\n"))
		}
	})

	tn := tenants{t, ctx, k}
	service, pod, events := tn.service, tn.pod, tn.warned
	slice := func(ns, service, name string, eps ...discoveryv1.Endpoint) {
		t.Helper()
		must.OK(t, k.Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
				discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "someone.example"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
			Endpoints:   eps,
		}))
	}
	endpoint := func(addr string, target *corev1.ObjectReference) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, TargetRef: target, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	}
	logEventsIfFailed(t, k)
	holds := func(m map[netip.AddrPort]plan.State, want ...netip.Addr) bool {
		if len(m) != len(want) {
			return false
		}
		for _, a := range want {
			if m[netip.AddrPortFrom(a, 8080)] != plan.Active {
				return false
			}
		}
		return true
	}

	// 1. A namespace nobody allowed claims edge/shop and plus/shop first,
	// with a selector-less Service and a hand-written slice (the issue's
	// report: 198.18.250.250 became a server of both HAProxy instances).
	service("evil", "web", "edge/shop,plus/shop", nil)
	slice("evil", "web", "web-1", endpoint("198.18.250.250", nil))
	must.Eventually(t, ctx, 50*time.Millisecond, "UpstreamNotAllowed on evil/web naming edge's rule", func() bool {
		return events("evil", "web", "UpstreamNotAllowed", "loadBalancers[edge].allowedNamespaces allows names shop, blog")
	})
	must.Eventually(t, ctx, 50*time.Millisecond, "UpstreamNotAllowed on evil/web naming plus' rule", func() bool {
		return events("evil", "web", "UpstreamNotAllowed", "loadBalancers[plus].allowedNamespaces allows selector tenant=web")
	})

	// 2. The owner comes after: its pods, and only they, become servers.
	shopA, shopB := pod("shop", "web-a", "web"), pod("shop", "web-b", "web")
	allow("edge/shop", shopA, shopB)
	allow("plus/shop", shopA, shopB)
	service("shop", "web", "edge/shop,plus/shop", map[string]string{"app": "web"})
	must.Eventually(t, ctx, 50*time.Millisecond, "shop's two pods, and nothing else, active on edge/shop and plus/shop", func() bool {
		es, _, ps := read()
		return holds(es, shopA, shopB) && holds(ps, shopA, shopB)
	})

	// 3. The owner's namespace adds a hand-written slice: no Pod, another
	// Pod's name for a foreign address, another namespace's Pod, an
	// address outside the pod network (a database's; the API server
	// itself refuses link-local ones such as the metadata service).
	slice("shop", "web", "web-extra",
		endpoint("198.18.250.250", nil),
		endpoint("198.18.250.251", &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web-a"}),
		endpoint("198.18.250.252", &corev1.ObjectReference{Kind: "Pod", Namespace: "blog", Name: "web-a"}),
		endpoint("10.0.0.1", nil))
	for _, want := range []string{
		"endpoint 198.18.250.250 names no Pod",
		"endpoint 198.18.250.251 is not an address of Pod shop/web-a (it has " + shopA.String() + ")",
		"endpoint 198.18.250.252 names Pod blog/web-a, outside the Service's namespace shop",
		"endpoint 10.0.0.1 is outside loadBalancers[edge].allowedCIDRs (198.18.0.0/15)",
	} {
		must.Eventually(t, ctx, 50*time.Millisecond, "EndpointNotAllowed: "+want, func() bool { return events("shop", "web", "EndpointNotAllowed", want) })
	}

	// 3b. A targetRef without a namespace names a Pod of the Service's
	// namespace: the pod becomes a server, and the Events on it land in
	// that namespace, never in default.
	shopC := pod("shop", "web-c", "other")
	allow("edge/shop", shopC)
	allow("plus/shop", shopC)
	slice("shop", "web", "web-no-namespace", discoveryv1.Endpoint{Addresses: []string{shopC.String()},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: "web-c"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}})
	podEvents := func(ns string) (n int) {
		var evs eventsv1.EventList
		must.OK(t, k.List(ctx, &evs, client.InNamespace(ns)))
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Pod" && e.Regarding.Name == "web-c" {
				n++
			}
		}
		return n
	}
	must.Eventually(t, ctx, 50*time.Millisecond, "the Draining Events on shop/web-c, in namespace shop", func() bool {
		var evs eventsv1.EventList
		if k.List(ctx, &evs, client.InNamespace("shop")) != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "web-c" && e.Regarding.Namespace == "shop" && e.Reason == "Draining" {
				return true
			}
		}
		return false
	})
	if n := podEvents("default"); n != 0 {
		t.Errorf("%d Events on Pod web-c in namespace default; want none", n)
	}
	must.OK(t, k.Delete(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-no-namespace"}}))
	must.Eventually(t, ctx, 50*time.Millisecond, "shop/web-c gone from edge/shop and plus/shop", func() bool {
		es, _, ps := read()
		return holds(es, shopA, shopB) && holds(ps, shopA, shopB)
	})
	if n := podEvents("default"); n != 0 {
		t.Errorf("%d Events on Pod web-c in namespace default; want none", n)
	}

	// 4. The namespace nobody allowed claims again, after the owner.
	service("evil", "web-2", "edge/shop", map[string]string{"app": "web"})
	must.Eventually(t, ctx, 50*time.Millisecond, "UpstreamNotAllowed on evil/web-2", func() bool {
		return events("evil", "web-2", "UpstreamNotAllowed", "namespace evil may not map onto edge/shop")
	})

	// 5. Pinning: blog is allowed on edge, but edge/checkout is pinned to
	// shop/checkout. blog claims it first, and again while the owner's
	// Service is deleted and re-created.
	blogA := pod("blog", "blog-a", "blog")
	service("blog", "checkout", "edge/checkout", map[string]string{"app": "blog"})
	must.Eventually(t, ctx, 50*time.Millisecond, "UpstreamNotAllowed (pinned) on blog/checkout", func() bool {
		return events("blog", "checkout", "UpstreamNotAllowed", "upstream edge/checkout is pinned to Service shop/checkout")
	})
	allow("edge/checkout", shopA, shopB)
	for round := 0; round < 2; round++ {
		service("shop", "checkout", "edge/checkout", map[string]string{"app": "web"})
		must.Eventually(t, ctx, 50*time.Millisecond, "shop's pods on edge/checkout", func() bool { _, ec, _ := read(); return holds(ec, shopA, shopB) })
		must.OK(t, k.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "checkout"}}))
		must.Eventually(t, ctx, 50*time.Millisecond, "edge/checkout emptied while its owner is away", func() bool { _, ec, _ := read(); return len(ec) == 0 })
		time.Sleep(3 * time.Second) // a resync and more: blog must not take it
		if _, ec, _ := read(); len(ec) != 0 {
			t.Fatalf("edge/checkout holds %v while its pinned owner is deleted", ec)
		}
	}

	// 6. Every refusal was counted.
	ctl.expectMetrics(t,
		`stickydrain_controller_refusals_total{lb="edge",reason="NamespaceNotAllowed"}`,
		`stickydrain_controller_refusals_total{lb="plus",reason="NamespaceNotAllowed"}`,
		`stickydrain_controller_refusals_total{lb="edge",reason="Pinned"}`,
		`stickydrain_controller_refusals_total{lb="edge",reason="WithoutPod"}`,
		`stickydrain_controller_refusals_total{lb="edge",reason="NotPodAddress"}`,
		`stickydrain_controller_refusals_total{lb="edge",reason="PodInOtherNamespace"}`,
		`stickydrain_controller_refusals_total{lb="edge",reason="OutsideCIDRs"}`,
		`stickydrain_controller_refusals_total{lb="plus",reason="WithoutPod"}`,
	)

	// 7. The operator withdraws shop from edge in a configuration edit
	// while shop/web has servers there, and in the same edit pins
	// edge/checkout to blog/checkout instead: the withdrawal is held, not
	// applied silently — edge/shop keeps its servers, shop/web is told
	// why, the refusal is counted — while the rest of the edit applies at
	// once: blog's pod becomes edge/checkout's server. Once shop/web is
	// unmapped from edge (its servers leave on purpose), the withdrawal
	// applies by itself.
	allow("edge/checkout", blogA)
	must.OK(t, os.WriteFile(configPath, []byte(configFor("blog", "blog/checkout")), 0o644))
	must.Eventually(t, ctx, 50*time.Millisecond, "ConfigurationChangeRefused on shop/web", func() bool {
		return events("shop", "web", "ConfigurationChangeRefused", "every server of shop/web out of edge/shop (namespace shop may not map onto edge/shop:")
	})
	must.Eventually(t, ctx, 50*time.Millisecond, "blog's pod on edge/checkout while the withdrawal is held", func() bool {
		_, ec, _ := read()
		return holds(ec, blogA)
	})
	time.Sleep(6 * time.Second) // the watcher checks every 5s: a second look
	if es, _, _ := read(); !holds(es, shopA, shopB) {
		t.Errorf("edge/shop holds %v after a refused configuration change; want shop's pods still", es)
	}
	ctl.expectMetrics(t, `stickydrain_controller_config_changes_total{result="revoking"} 1`,
		`stickydrain_controller_config_held{reason="revoking"} 1`) // held, for as long as it is
	// 7b. The controller restarts while the change is held (a new pod of a
	// rollout, a node drain): it starts on the configuration it last
	// applied, not on the file, and holds the file's change again. Users
	// keep their sessions on shop's pods all along: no server leaves.
	alice := newUser()
	if code, _ := alice.do(t, "POST", h.URL()+"/login?user=alice"); code != http.StatusOK {
		t.Fatalf("alice's login through edge: %d", code)
	}
	served, failed := 0, []string{}
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	trafficDone := make(chan struct{})
	go func() {
		defer close(trafficDone)
		for trafficCtx.Err() == nil {
			resp, err := alice.c.Get(h.URL() + "/app/")
			switch {
			case err != nil:
				failed = append(failed, err.Error())
			case resp.StatusCode != http.StatusOK:
				failed = append(failed, resp.Status)
			default:
				served++
			}
			if resp != nil {
				resp.Body.Close()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	ctl.stop()
	ctl.start()
	must.Eventually(t, ctx, 50*time.Millisecond, "the restarted controller holding the change", func() bool {
		body, err := framework.ScrapeGuarded(ctx, ctl.c, ctl.metricsPort)
		return err == nil && hasSeries(body, `stickydrain_controller_config_held{reason="revoking"} 1`)
	})
	time.Sleep(6 * time.Second) // passes of the restarted controller, and another look at the file
	stopTraffic()
	<-trafficDone
	if es, _, _ := read(); !holds(es, shopA, shopB) {
		t.Errorf("edge/shop holds %v after a restart onto a held configuration change; want shop's pods still", es)
	}
	if len(failed) > 0 || served == 0 {
		t.Errorf("alice through edge during the restart: %d requests served in her session, %d not: %v", served, len(failed), failed[:min(len(failed), 5)])
	}
	if log, _ := os.ReadFile(ctl.logPath); !strings.Contains(string(log), "starting on the configuration last applied") {
		t.Errorf("the restarted controller did not say it started on the configuration last applied")
	}
	var web corev1.Service
	must.OK(t, k.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "web"}, &web))
	web.Annotations["stickydrain.io/upstreams"] = "plus/shop"
	must.OK(t, k.Update(ctx, &web))
	must.Eventually(t, ctx, 50*time.Millisecond, "edge/shop emptied once shop/web is unmapped from it", func() bool { es, _, _ := read(); return len(es) == 0 })
	must.Eventually(t, ctx, 50*time.Millisecond, "the held configuration applied", func() bool {
		body, err := framework.ScrapeGuarded(ctx, ctl.c, ctl.metricsPort)
		return err == nil && strings.Contains(body, `stickydrain_controller_config_changes_total{result="applied"} 1`)
	})
	ctl.expectMetrics(t, `stickydrain_controller_config_held{reason="revoking"} 0`, `stickydrain_controller_config_held{reason="invalid"} 0`)
	if _, _, ps := read(); !holds(ps, shopA, shopB) {
		t.Errorf("plus/shop holds %v after shop/web left edge; want shop's pods still", ps)
	}
	// A Namespace's labels are the operator's word too, read as they
	// change: plus takes shop away at once.
	var ns corev1.Namespace
	must.OK(t, k.Get(ctx, client.ObjectKey{Name: "shop"}, &ns))
	ns.Labels = map[string]string{"tenant": "none"}
	must.OK(t, k.Update(ctx, &ns))
	must.Eventually(t, ctx, 50*time.Millisecond, "plus/shop emptied after shop lost its label", func() bool { _, _, ps := read(); return len(ps) == 0 })
	// The pinned upstream is the operator's word: it stays blog's.
	service("shop", "checkout", "edge/checkout", map[string]string{"app": "web"})
	must.Eventually(t, ctx, 50*time.Millisecond, "UpstreamNotAllowed (pinned to blog) on shop/checkout", func() bool {
		return events("shop", "checkout", "UpstreamNotAllowed", "upstream edge/checkout is pinned to Service blog/checkout")
	})
	if _, ec, _ := read(); !holds(ec, blogA) || len(ec) != 1 {
		t.Errorf("edge/checkout holds %v after shop/checkout claimed it; want blog's pod alone", ec)
	}
	if es, _, _ := read(); len(es) != 0 {
		t.Errorf("edge/shop holds %v after shop's withdrawal", es)
	}
}
