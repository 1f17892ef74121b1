package endpoints

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/controller/plan"
)

type cond struct{ ready, serving, terminating *bool }

var (
	t_, f_ = ptr.To(true), ptr.To(false)
)

func ep(addr string, c cond, pod string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: c.ready, Serving: c.serving, Terminating: c.terminating}}
	if pod != "" {
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: pod}
	}
	return e
}

func slice(name string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{AddressType: family, Ports: ports, Endpoints: eps}
	s.Name = name
	return s
}

var httpPort = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}}

func states(m map[netip.AddrPort]Endpoint) map[string]string {
	out := map[string]string{}
	for a, e := range m {
		out[a.String()] = e.State.String()
	}
	return out
}

func TestDesiredConditions(t *testing.T) {
	tests := []struct {
		name string
		c    cond
		opts Options
		want string // "" means not routed
	}{
		{"routes a ready endpoint active", cond{t_, t_, f_}, Options{}, "active"},
		{"drains a terminating endpoint that still serves", cond{f_, t_, t_}, Options{}, "draining"},
		{"marks a terminating endpoint that stopped serving down", cond{f_, f_, t_}, Options{}, "down"},
		{"keeps it draining when asked", cond{f_, f_, t_}, Options{KeepDrainingWhenNotServing: true}, "draining"},
		{"does not route a not-ready endpoint", cond{f_, f_, f_}, Options{}, ""},
		{"drains a not-ready endpoint when asked, as haproxy-ingress does", cond{f_, f_, f_}, Options{DrainNotReady: true}, "draining"},
		{"reads nil conditions as ready and not terminating", cond{}, Options{}, "active"},
		{"reads a nil serving as the ready value", cond{ready: f_, terminating: t_}, Options{}, "down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Desired([]discoveryv1.EndpointSlice{slice("s", discoveryv1.AddressTypeIPv4, httpPort, ep("198.18.0.1", tt.c, "p"))}, "http", tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			if tt.want != "" {
				want["198.18.0.1:8080"] = tt.want
			}
			if diff := cmp.Diff(want, states(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDesiredMergesSlices(t *testing.T) {
	ready, term := cond{t_, t_, f_}, cond{f_, t_, t_}
	slices := []discoveryv1.EndpointSlice{
		slice("a", discoveryv1.AddressTypeIPv4, httpPort, ep("198.18.0.1", ready, "p1"), ep("198.18.0.2", term, "p2")),
		// The same address in a second slice (a move in progress): the most
		// available state wins, whichever slice comes first.
		slice("b", discoveryv1.AddressTypeIPv4, httpPort, ep("198.18.0.2", ready, "p2"), ep("198.18.0.3", term, "p3")),
		slice("c", discoveryv1.AddressTypeIPv6, httpPort, ep("2001:db8::3", term, "p3")),
		slice("d", discoveryv1.AddressTypeFQDN, httpPort, ep("web.example", ready, "")),
	}
	got, err := Desired(slices, "8080", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"198.18.0.1:8080": "active", "198.18.0.2:8080": "active", "198.18.0.3:8080": "draining", "[2001:db8::3]:8080": "draining"}
	if diff := cmp.Diff(want, states(got)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if e := got[netip.MustParseAddrPort("198.18.0.3:8080")]; e.PodName != "p3" || !e.Terminating {
		t.Errorf("endpoint %+v lacks its pod or terminating flag", e)
	}
	// Reversed slice order gives the same result.
	rev := []discoveryv1.EndpointSlice{slices[3], slices[2], slices[1], slices[0]}
	again, _ := Desired(rev, "8080", Options{})
	if diff := cmp.Diff(got, again, cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
		t.Errorf("slice order changed the result:\n%s", diff)
	}
}

func TestDesiredPorts(t *testing.T) {
	two := []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}, {Name: ptr.To("admin"), Port: ptr.To[int32](9090)}}
	s := []discoveryv1.EndpointSlice{slice("a", discoveryv1.AddressTypeIPv4, two, ep("198.18.0.1", cond{}, ""))}
	if got, _ := Desired(s, "admin", Options{}); got[netip.MustParseAddrPort("198.18.0.1:9090")].State != plan.Active {
		t.Errorf("port by name: %v", states(got))
	}
	if _, err := Desired(s, "", Options{}); err == nil || !strings.Contains(err.Error(), "stickydrain.io/port") {
		t.Errorf("two ports without a choice: error %v", err)
	}
	if got, _ := Desired(s, "7000", Options{}); len(got) != 0 {
		t.Errorf("a port the slices lack gave %v", states(got))
	}
}

// TestDesiredTakesTheSlicesNamespace: a targetRef without a namespace
// names a Pod of the slice's own namespace (the Service's), as an object
// reference within a namespace does; the endpoint says so, so that the
// Events on its Pod land there and not in default.
func TestDesiredTakesTheSlicesNamespace(t *testing.T) {
	s := slice("a", discoveryv1.AddressTypeIPv4, httpPort,
		discoveryv1.Endpoint{Addresses: []string{"198.18.0.1"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-0"}},
		ep("198.18.0.2", cond{}, "web-1"),
		discoveryv1.Endpoint{Addresses: []string{"198.18.0.3"}})
	s.Namespace = "blog"
	got, err := Desired([]discoveryv1.EndpointSlice{s}, "http", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"198.18.0.1:8080": "blog/web-0", "198.18.0.2:8080": "shop/web-1", "198.18.0.3:8080": "/"}
	pods := map[string]string{}
	for a, e := range got {
		pods[a.String()] = e.PodNamespace + "/" + e.PodName
	}
	if diff := cmp.Diff(want, pods); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
