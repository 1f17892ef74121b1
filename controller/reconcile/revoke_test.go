package reconcile

import (
	"k8s.io/utils/ptr"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/tenancy"
)

// TestHoldKeepsWhatIsRevokedAndNothingElse: a change that withdraws one
// tenant and changes other things applies those at once; the withdrawn
// tenant's mapping, and only it, keeps its running rule.
func TestHoldKeepsWhatIsRevokedAndNothingElse(t *testing.T) {
	names := func(n ...string) *config.Namespaces { return &config.Namespaces{Names: n} }
	cur := &config.Config{LoadBalancers: []config.LoadBalancer{
		{Name: "edge", AllowedNamespaces: names("shop", "blog"), AllowedCIDRs: []string{"198.18.0.0/15"},
			Upstreams: []config.Upstream{{Name: "checkout", Owner: "shop/checkout"}}},
		{Name: "old", AllowedNamespaces: names("legacy"), Upstreams: []config.Upstream{{Name: "app"}}},
		{Name: "listed", ListedUpstreamsOnly: ptr.To(true), AllowedNamespaces: names("shop"), Upstreams: []config.Upstream{{Name: "api"}}},
	}}
	next := &config.Config{LoadBalancers: []config.LoadBalancer{
		{Name: "edge", AllowedNamespaces: names("blog"), AllowedCIDRs: []string{"198.18.0.0/24"},
			Upstreams: []config.Upstream{{Name: "checkout", Owner: "blog/checkout"}}},
		{Name: "listed", ListedUpstreamsOnly: ptr.To(true), AllowedNamespaces: names("blog"), Upstreams: []config.Upstream{{Name: "api"}}},
		{Name: "new", AllowedNamespaces: names("blog"), ListedUpstreamsOnly: ptr.To(false)},
	}}
	svc := types.NamespacedName{Namespace: "shop", Name: "web"}
	revs := []Revocation{
		{Service: svc, Upstream: "edge/shop", cause: claimRefused},
		{Service: svc, Upstream: "edge/shop", Server: "198.18.1.1:80", cause: serverRefused},
		{Service: types.NamespacedName{Namespace: "legacy", Name: "app"}, Upstream: "old/app", cause: lbGone},
		{Service: svc, Upstream: "listed/api", cause: claimRefused},
	}
	held := Hold(cur, next, revs)
	p, err := tenancy.New(held)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		lb, up string
		svc    types.NamespacedName
		want   bool
	}{
		{"edge", "shop", svc, true},   // held: shop keeps edge/shop
		{"edge", "other", svc, false}, // the withdrawal holds for no other upstream
		{"edge", "shop", types.NamespacedName{Namespace: "blog", Name: "x"}, true},
		{"edge", "checkout", types.NamespacedName{Namespace: "blog", Name: "checkout"}, true}, // the new pin applies now
		{"edge", "checkout", types.NamespacedName{Namespace: "shop", Name: "checkout"}, false},
		{"old", "app", types.NamespacedName{Namespace: "legacy", Name: "app"}, true}, // a load balancer gone is kept
		{"new", "x", types.NamespacedName{Namespace: "blog", Name: "x"}, true},       // a new one applies now
		{"listed", "api", svc, true}, // a name alone keeps its running namespaces
		{"listed", "api", types.NamespacedName{Namespace: "blog", Name: "api"}, false},
	} {
		if got := p.Claim(tc.lb, tc.up, tc.svc, nil).Allowed; got != tc.want {
			t.Errorf("%s/%s by %s: allowed %v, want %v", tc.lb, tc.up, tc.svc, got, tc.want)
		}
	}
	if got := held.LoadBalancers[0].AllowedCIDRs; len(got) != 1 || got[0] != "198.18.0.0/15" {
		t.Errorf("edge's allowedCIDRs %v; want the running ones, kept for the refused server", got)
	}
	if len(next.LoadBalancers[0].Upstreams) != 1 || next.LoadBalancers[0].AllowedCIDRs[0] != "198.18.0.0/24" || len(next.LoadBalancers) != 3 {
		t.Errorf("Hold changed the configuration it was given: %+v", next.LoadBalancers)
	}
	if again := Hold(cur, next, revs); !reflect.DeepEqual(again, held) {
		t.Errorf("Hold is not deterministic: the watcher applies it again only when it differs from what runs")
	}
}
