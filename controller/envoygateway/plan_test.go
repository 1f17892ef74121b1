package envoygateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/tenancy"
)

func TestCluster(t *testing.T) {
	if got := Cluster(KindHTTPRoute, "shop", "cart", 2); got != "httproute/shop/cart/rule/2" {
		t.Errorf("Cluster = %q", got)
	}
}

func svc(ns, name string) Backend { return Backend{Namespace: ns, Name: name} }

func TestPlan(t *testing.T) {
	gw := types.NamespacedName{Namespace: "gw", Name: "public"}
	routes := []Route{
		{Kind: KindHTTPRoute, Namespace: "shop", Name: "cart", Rules: []Rule{
			{Sticky: true, Backends: []Backend{svc("shop", "cart")}},
			{Sticky: false, Backends: []Backend{svc("shop", "cart")}}, // not sticky: no outcome
			{Sticky: true, Backends: []Backend{svc("shop", "cart"), svc("shop", "plain")}},
			{Sticky: true, Backends: []Backend{{Group: "gateway.envoyproxy.io", Kind: "Backend", Namespace: "shop", Name: "ext"}}},
			{Sticky: true},
		}},
		{Kind: KindHTTPRoute, Namespace: "shop", Name: "rpc", Rules: []Rule{{Sticky: true, Backends: []Backend{svc("shop", "rpc")}}}},
		{Kind: KindHTTPRoute, Namespace: "evil", Name: "steal", Rules: []Rule{{Sticky: true, Backends: []Backend{svc("evil", "cart")}}}},
		{Kind: KindHTTPRoute, Namespace: "shop", Name: "checked", Rules: []Rule{{Sticky: true, Backends: []Backend{svc("shop", "cart")}}}},
	}
	optedIn := map[string]bool{"shop/cart": true, "shop/rpc": true, "evil/cart": true}
	in := Input{
		Gateway: gw,
		Routes:  routes,
		Allowed: func(r types.NamespacedName) tenancy.Verdict {
			if r.Namespace == "shop" {
				return tenancy.Verdict{Allowed: true}
			}
			return tenancy.Verdict{Reason: tenancy.NamespaceNotAllowed, Message: "namespace " + r.Namespace + " may not"}
		},
		OptedIn: func(s types.NamespacedName) bool { return optedIn[s.String()] },
		HealthChecked: func(r Route) string {
			if r.Name == "checked" {
				return "shop/active"
			}
			return ""
		},
	}
	type want struct {
		cluster, reason string
		kept            bool
	}
	check := func(t *testing.T, outs []Outcome, wants []want) {
		t.Helper()
		if len(outs) != len(wants) {
			t.Fatalf("%d outcomes, want %d: %+v", len(outs), len(wants), outs)
		}
		for i, w := range wants {
			o := outs[i]
			if o.Cluster != w.cluster || o.Reason != w.reason || o.Kept != w.kept || o.Message == "" {
				t.Errorf("outcome %d: %+v, want %+v", i, o, w)
			}
		}
	}
	outs := Plan(in)
	check(t, outs, []want{
		{"httproute/evil/steal/rule/0", api.ReasonRouteNotAllowed, false},
		{"httproute/shop/cart/rule/0", api.ReasonStickyThroughDrains, true},
		{"httproute/shop/cart/rule/2", api.ReasonBackendNotOptedIn, false},
		{"httproute/shop/cart/rule/3", api.ReasonBackendNotOptedIn, false},
		{"httproute/shop/cart/rule/4", api.ReasonBackendNotOptedIn, false},
		{"httproute/shop/checked/rule/0", api.ReasonActiveHealthCheck, false},
		{"httproute/shop/rpc/rule/0", api.ReasonStickyThroughDrains, true},
	})
	for _, o := range outs {
		switch o.Cluster {
		case "httproute/shop/cart/rule/2":
			if !strings.Contains(o.Message, "Service shop/plain") {
				t.Errorf("message %q does not name the backend without the drain", o.Message)
			}
		case "httproute/shop/cart/rule/3":
			if !strings.Contains(o.Message, "is not a Service") {
				t.Errorf("message %q does not say the backend is not a Service", o.Message)
			}
		case "httproute/shop/checked/rule/0":
			if !strings.Contains(o.Message, "BackendTrafficPolicy shop/active") || !strings.Contains(o.Message, "23213") {
				t.Errorf("message %q does not name the policy and the Envoy issue", o.Message)
			}
		}
	}

	// activeHealthChecks: allow keeps it, still saying what it costs.
	in.AllowHealthChecked = true
	outs = Plan(in)
	if o := outs[len(outs)-2]; !o.Kept || o.Reason != api.ReasonActiveHealthCheck {
		t.Errorf("with allow: %+v, want kept with reason %s", o, api.ReasonActiveHealthCheck)
	}

	// The patches: one per kept rule, its cluster by name, the override
	// set Envoy's default plus DRAINING.
	ps := Patches(outs)
	b, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		Type, Name string
		Operation  struct {
			Op, Path string
			Value    struct{ Statuses []string }
		}
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
		if p.Type != ClusterType || p.Operation.Op != "add" || p.Operation.Path != "/common_lb_config/override_host_status" ||
			strings.Join(p.Operation.Value.Statuses, ",") != "UNKNOWN,HEALTHY,DEGRADED,DRAINING" {
			t.Errorf("patch %+v", p)
		}
	}
	if strings.Join(names, " ") != "httproute/shop/cart/rule/0 httproute/shop/checked/rule/0 httproute/shop/rpc/rule/0" {
		t.Errorf("patched clusters %v", names)
	}
}

func TestHealthCheckOf(t *testing.T) {
	gw := types.NamespacedName{Namespace: "gw", Name: "public"}
	rt := Route{Kind: KindHTTPRoute, Namespace: "shop", Name: "cart", Labels: map[string]string{"app": "cart"}}
	group := gatewayGroup
	other := "example.com"
	all := json.RawMessage(`{"from": "All"}`)
	granted := func(routeNS, routeName, policyNS string) bool {
		return routeNS == "shop" && routeName == "cart" && policyNS == "ops"
	}
	tests := []struct {
		name string
		hc   healthCheck
		want bool
	}{
		{"the route by name", healthCheck{name: types.NamespacedName{Namespace: "shop", Name: "p"}, refs: []targetRef{{Group: group, Kind: KindHTTPRoute, Name: "cart"}}}, true},
		{"another route", healthCheck{name: types.NamespacedName{Namespace: "shop", Name: "p"}, refs: []targetRef{{Group: group, Kind: KindHTTPRoute, Name: "other"}}}, false},
		{"a route of that name in another namespace", healthCheck{name: types.NamespacedName{Namespace: "blog", Name: "p"}, refs: []targetRef{{Group: group, Kind: KindHTTPRoute, Name: "cart"}}}, false},
		{"the Gateway", healthCheck{name: types.NamespacedName{Namespace: "gw", Name: "p"}, refs: []targetRef{{Group: group, Kind: "Gateway", Name: "public"}}}, true},
		{"by labels", healthCheck{name: types.NamespacedName{Namespace: "shop", Name: "p"}, selectors: []targetSelector{{Kind: KindHTTPRoute, MatchLabels: map[string]string{"app": "cart"}}}}, true},
		{"by other labels", healthCheck{name: types.NamespacedName{Namespace: "shop", Name: "p"}, selectors: []targetSelector{{Kind: KindHTTPRoute, MatchLabels: map[string]string{"app": "blog"}}}}, false},
		{"by labels, another group", healthCheck{name: types.NamespacedName{Namespace: "shop", Name: "p"}, selectors: []targetSelector{{Group: &other, Kind: KindHTTPRoute, MatchLabels: map[string]string{"app": "cart"}}}}, false},
		{"by labels from another namespace, without namespaces", healthCheck{name: types.NamespacedName{Namespace: "blog", Name: "p"}, selectors: []targetSelector{{Kind: KindHTTPRoute, MatchLabels: map[string]string{"app": "cart"}}}}, false},
		// Another namespace's policy selecting across namespaces counts only
		// with a ReferenceGrant of the route's namespace (as Envoy Gateway
		// applies it): without, one namespace could take another's rules out.
		{"across namespaces, granted", healthCheck{name: types.NamespacedName{Namespace: "ops", Name: "p"}, selectors: []targetSelector{{Kind: KindHTTPRoute, Namespaces: &all}}}, true},
		{"across namespaces, not granted", healthCheck{name: types.NamespacedName{Namespace: "evil", Name: "p"}, selectors: []targetSelector{{Kind: KindHTTPRoute, Namespaces: &all}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := healthCheckOf([]healthCheck{tt.hc}, rt, gw, granted)
			if (got != "") != tt.want {
				t.Errorf("healthCheckOf = %q, want a match: %v", got, tt.want)
			}
		})
	}
}

// One namespace keeps at most api.MaxStickyRulesPerNamespace rules in the
// Gateway's shared EnvoyPatchPolicy, the first by cluster name; another
// namespace's rules are kept whatever the first writes.
func TestOneNamespaceCannotFillTheSharedPolicy(t *testing.T) {
	var routes []Route
	for i := range 5000 {
		routes = append(routes, Route{Kind: KindHTTPRoute, Namespace: "evil", Name: fmt.Sprintf("r%04d", i), Rules: []Rule{{Sticky: true, Backends: []Backend{svc("evil", "cart")}}}})
	}
	routes = append(routes, Route{Kind: KindHTTPRoute, Namespace: "shop", Name: "cart", Rules: []Rule{{Sticky: true, Backends: []Backend{svc("shop", "cart")}}}})
	outs := Plan(Input{
		Gateway: types.NamespacedName{Namespace: "gw", Name: "public"}, Routes: routes,
		Allowed:       func(types.NamespacedName) tenancy.Verdict { return tenancy.Verdict{Allowed: true} },
		OptedIn:       func(types.NamespacedName) bool { return true },
		HealthChecked: func(Route) string { return "" },
	})
	kept, limited := map[string]int{}, 0
	for _, o := range outs {
		if o.Kept {
			kept[o.Route.Namespace]++
		} else if o.Reason == api.ReasonStickyRuleLimit {
			limited++
		}
	}
	if kept["evil"] != api.MaxStickyRulesPerNamespace || kept["shop"] != 1 || limited != 5000-api.MaxStickyRulesPerNamespace {
		t.Errorf("kept %v, %d refused at the limit; want evil's first %d, shop's one", kept, limited, api.MaxStickyRulesPerNamespace)
	}
	b, err := json.Marshal(Patches(outs))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 256<<10 {
		t.Errorf("the policy's patches are %d KiB", len(b)>>10)
	}
	t.Logf("the policy's patches: %d KiB for %d kept rules", len(b)>>10, kept["evil"]+kept["shop"])
}

// However many namespaces share a Gateway, its policy keeps at most
// api.MaxStickyRulesPerGateway rules, each namespace within its own bound,
// and stays well under what the API server stores even with the longest
// names.
func TestTheSharedPolicyIsBoundedWhateverTheNamespaces(t *testing.T) {
	var routes []Route
	long := strings.Repeat("n", 63)
	for ns := range 40 {
		for r := range api.MaxStickyRulesPerNamespace {
			routes = append(routes, Route{Kind: KindHTTPRoute, Namespace: fmt.Sprintf("%s%02d", long[:61], ns), Name: fmt.Sprintf("%s%04d", strings.Repeat("r", 249), r),
				Rules: []Rule{{Sticky: true, Backends: []Backend{svc("x", "y")}}}})
		}
	}
	outs := Plan(Input{
		Gateway: types.NamespacedName{Namespace: "gw", Name: "public"}, Routes: routes,
		Allowed:       func(types.NamespacedName) tenancy.Verdict { return tenancy.Verdict{Allowed: true} },
		OptedIn:       func(types.NamespacedName) bool { return true },
		HealthChecked: func(Route) string { return "" },
	})
	kept := 0
	for _, o := range outs {
		if o.Kept {
			kept++
		}
	}
	if kept != api.MaxStickyRulesPerGateway {
		t.Errorf("kept %d of %d rules; want %d", kept, len(routes), api.MaxStickyRulesPerGateway)
	}
	b, err := json.Marshal(Patches(outs))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d kept rules with the longest names: %d KiB of patches", kept, len(b)>>10)
	if len(b) > 1<<20 {
		t.Errorf("the policy's patches are %d KiB; want under 1 MiB", len(b)>>10)
	}
}
