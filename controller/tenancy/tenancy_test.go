package tenancy

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/drivers"
)

const rules = `
loadBalancers:
  - name: edge
    type: haproxy
    instances: {static: ["tcp://127.0.0.1:1"]}
    allowedNamespaces:
      names: [shop]
      selector: {matchLabels: {tenant: web}}
    listedUpstreamsOnly: false
    upstreams:
      - {name: checkout, owner: shop/checkout}
      - {name: reports, allowedNamespaces: {names: [finance]}}
    allowedCIDRs: [198.18.0.0/16]
  - name: closed
    type: haproxy
    instances: {static: ["tcp://127.0.0.1:2"]}
  - name: open
    type: nginx-plus
    instances: {static: ["http://127.0.0.1:3/api"]}
    allowedNamespaces: {all: true}
    listedUpstreamsOnly: false
    allowEndpointsWithoutPods: true
    allowedCIDRs: [198.18.0.0/15, "fd00::/64"]
  - name: listed
    type: haproxy
    instances: {static: ["tcp://127.0.0.1:4"]}
    allowedNamespaces: {names: [shop, evil]}
    upstreams:
      - {name: web}
      - {name: cart, allowedNamespaces: {names: [shop]}}
envoyGateway:
  gateways:
    - {namespace: gw, name: public, allowedNamespaces: {names: [shop], selector: {matchLabels: {tenant: web}}}}
    - {namespace: gw, name: closed}
`

func policy(t *testing.T) *Policy {
	t.Helper()
	cfg, err := config.Parse([]byte(rules), drivers.New())
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClaim(t *testing.T) {
	p := policy(t)
	web := map[string]string{"tenant": "web"}
	tests := []struct {
		lb, upstream, ns, name string
		labels                 map[string]string
		want                   Reason // "" allowed
		rule                   string
	}{
		{"edge", "shop", "shop", "shop", nil, "", "loadBalancers[edge].allowedNamespaces"},
		{"edge", "shop", "blog", "blog", web, "", "loadBalancers[edge].allowedNamespaces"},
		{"edge", "shop", "evil", "shop", nil, NamespaceNotAllowed, "loadBalancers[edge].allowedNamespaces"},
		{"edge", "shop", "evil", "shop", map[string]string{"tenant": "other"}, NamespaceNotAllowed, "loadBalancers[edge].allowedNamespaces"},
		{"edge", "checkout", "shop", "checkout", nil, "", "loadBalancers[edge].upstreams[checkout].owner"},
		// Pinned: the owner's own namespace, another Service, is refused too.
		{"edge", "checkout", "shop", "checkout-v2", nil, Pinned, "loadBalancers[edge].upstreams[checkout].owner"},
		{"edge", "checkout", "evil", "checkout", web, Pinned, "loadBalancers[edge].upstreams[checkout].owner"},
		// An upstream's rule replaces the load balancer's.
		{"edge", "reports", "finance", "reports", nil, "", "loadBalancers[edge].upstreams[reports].allowedNamespaces"},
		{"edge", "reports", "shop", "reports", nil, NamespaceNotAllowed, "loadBalancers[edge].upstreams[reports].allowedNamespaces"},
		{"closed", "shop", "shop", "shop", web, NoRule, "loadBalancers[closed].allowedNamespaces"},
		{"open", "any", "anyone", "x", nil, "", "loadBalancers[open].allowedNamespaces"},
		{"nope", "shop", "shop", "shop", nil, UnknownLoadBalancer, "loadBalancers"},
		// listedUpstreamsOnly (true unless set false): the load balancer's
		// rule covers the listed upstreams only, never the operator's
		// other backends.
		{"listed", "web", "evil", "web", nil, "", "loadBalancers[listed].allowedNamespaces"},
		{"listed", "cart", "shop", "cart", nil, "", "loadBalancers[listed].upstreams[cart].allowedNamespaces"},
		{"listed", "cart", "evil", "cart", nil, NamespaceNotAllowed, "loadBalancers[listed].upstreams[cart].allowedNamespaces"},
		{"listed", "admin", "shop", "admin", nil, NotListed, "loadBalancers[listed].listedUpstreamsOnly"},
		{"listed", "stats", "evil", "x", nil, NotListed, "loadBalancers[listed].listedUpstreamsOnly"},
	}
	for _, tt := range tests {
		v := p.Claim(tt.lb, tt.upstream, types.NamespacedName{Namespace: tt.ns, Name: tt.name}, tt.labels)
		if v.Allowed != (tt.want == "") || v.Reason != tt.want || v.Rule != tt.rule {
			t.Errorf("%s/%s from %s/%s: %+v, want reason %q rule %s", tt.lb, tt.upstream, tt.ns, tt.name, v, tt.want, tt.rule)
		}
		if !v.Allowed && (v.Message == "" || !strings.Contains(v.Message, tt.rule[len("loadBalancers"):])) {
			t.Errorf("%s/%s from %s/%s: message %q does not name the rule %s", tt.lb, tt.upstream, tt.ns, tt.name, v.Message, tt.rule)
		}
	}
	if !p.NeedsNamespaceLabels() {
		t.Error("a selector needs namespace labels")
	}
}

func TestEndpoint(t *testing.T) {
	p := policy(t)
	a := netip.MustParseAddr
	pod := func(ns string, ips ...string) Endpoint {
		e := Endpoint{Addr: a("198.18.0.5"), PodNamespace: ns, PodName: "web-0", PodAddrs: []netip.Addr{}}
		for _, ip := range ips {
			e.PodAddrs = append(e.PodAddrs, a(ip))
		}
		return e
	}
	finished := func(e Endpoint, phase corev1.PodPhase) Endpoint { e.PodPhase = phase; return e }
	unread := func(e Endpoint) Endpoint { e.PodNotVerified = true; return e }
	tests := []struct {
		name string
		lb   string
		e    Endpoint
		want Reason
	}{
		{"own pod", "edge", pod("shop", "198.18.0.5"), ""},
		{"own pod, namespace implied", "edge", pod("", "198.18.0.5"), ""},
		{"own pod, second address", "edge", pod("shop", "fd00::5", "198.18.0.5"), ""},
		{"no pod", "edge", Endpoint{Addr: a("198.18.0.5")}, WithoutPod},
		{"pod of another namespace", "edge", pod("bank", "198.18.0.5"), PodInOtherNamespace},
		{"pod does not exist", "edge", Endpoint{Addr: a("198.18.0.5"), PodName: "web-0"}, NotPodAddress},
		{"another pod's address", "edge", pod("shop", "198.18.0.6"), NotPodAddress},
		{"pod without an address yet", "edge", pod("shop"), NotPodAddress},
		{"pod succeeded, its own address", "edge", finished(pod("shop", "198.18.0.5"), "Succeeded"), PodFinished},
		{"pod failed, its own address", "edge", finished(pod("", "198.18.0.5"), "Failed"), PodFinished},
		{"pod running, its own address", "edge", finished(pod("shop", "198.18.0.5"), "Running"), ""},
		{"pod finished, in another namespace", "edge", finished(pod("bank", "198.18.0.5"), "Succeeded"), PodInOtherNamespace},
		{"pod not read this pass", "edge", Endpoint{Addr: a("198.18.0.5"), PodName: "web-0", PodNotVerified: true}, PodNotVerified},
		{"pod not read, whatever its addresses say", "edge", unread(pod("shop", "198.18.0.5")), PodNotVerified},
		{"pod finished, allowed without pods", "open", finished(Endpoint{Addr: a("198.19.0.5"), PodName: "web-0", PodAddrs: []netip.Addr{a("198.19.0.5")}}, "Succeeded"), ""},
		{"outside the CIDRs, even a pod's", "edge", Endpoint{Addr: a("169.254.169.254"), PodNamespace: "shop", PodName: "web-0", PodAddrs: []netip.Addr{a("169.254.169.254")}}, OutsideCIDRs},
		{"no pod, allowed", "open", Endpoint{Addr: a("198.19.1.1")}, ""},
		{"no pod, IPv6 CIDR", "open", Endpoint{Addr: a("fd00::1")}, ""},
		{"no pod, outside the CIDRs", "open", Endpoint{Addr: a("10.0.0.1")}, OutsideCIDRs},
		{"closed load balancer still checks pods", "closed", Endpoint{Addr: a("10.0.0.1")}, WithoutPod},
	}
	for _, tt := range tests {
		v := p.Endpoint(tt.lb, "shop", tt.e)
		if v.Allowed != (tt.want == "") || v.Reason != tt.want {
			t.Errorf("%s: %+v, want %q", tt.name, v, tt.want)
		}
		if !v.Allowed && (v.Message == "" || !strings.Contains(v.Message, tt.e.Addr.String())) {
			t.Errorf("%s: message %q does not name the address", tt.name, v.Message)
		}
	}
}

func TestRoute(t *testing.T) {
	p := policy(t)
	if !p.NeedsNamespaceLabels() {
		t.Error("a Gateway's selector needs namespace labels")
	}
	web := map[string]string{"tenant": "web"}
	tests := []struct {
		gw, ns string
		labels map[string]string
		want   Reason // "" allowed
		rule   string
	}{
		{"public", "shop", nil, "", "envoyGateway.gateways[gw/public].allowedNamespaces"},
		{"public", "blog", web, "", "envoyGateway.gateways[gw/public].allowedNamespaces"},
		{"public", "evil", map[string]string{"tenant": "other"}, NamespaceNotAllowed, "envoyGateway.gateways[gw/public].allowedNamespaces"},
		{"closed", "shop", web, NoRule, "envoyGateway.gateways[gw/closed].allowedNamespaces"},
		{"other", "shop", nil, NoRule, "envoyGateway.gateways"},
	}
	for _, tt := range tests {
		v := p.Route(types.NamespacedName{Namespace: "gw", Name: tt.gw}, types.NamespacedName{Namespace: tt.ns, Name: "r"}, tt.labels)
		if v.Allowed != (tt.want == "") || v.Reason != tt.want || v.Rule != tt.rule {
			t.Errorf("route %s/r on gw/%s: %+v, want reason %q rule %s", tt.ns, tt.gw, v, tt.want, tt.rule)
		}
		if !v.Allowed && !strings.Contains(v.Message, "gw/"+tt.gw) {
			t.Errorf("route %s/r on gw/%s: message %q does not name the Gateway", tt.ns, tt.gw, v.Message)
		}
	}
}
