// Package endpoints turns a Service's EndpointSlices into the desired servers
// of its load-balancer upstreams. It is a pure function of its inputs.
package endpoints

import (
	"fmt"
	"net/netip"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/controller/plan"
)

// Options change how conditions map to states.
type Options struct {
	// DrainNotReady routes not-ready, not-terminating endpoints as draining
	// (haproxy-ingress's behaviour) instead of not at all.
	DrainNotReady bool
	// KeepDrainingWhenNotServing keeps terminating endpoints that stopped
	// serving draining instead of down.
	KeepDrainingWhenNotServing bool
}

// Endpoint is one desired server and where it came from.
type Endpoint struct {
	State plan.State
	// Pod is the endpoint's targetRef when it is a Pod (namespace/name);
	// a targetRef without a namespace names a Pod of the slice's (and
	// its Service's) namespace.
	PodNamespace, PodName string
	// PodUID is the targetRef's uid: the controller's Events on the pod
	// carry it, so that they are told apart from those of an earlier pod
	// of the same name (a StatefulSet's).
	PodUID      types.UID
	Terminating bool
}

// Desired computes the desired servers from all EndpointSlices of one
// Service, for the port named (by name or number) by port; empty port
// takes the slices' only port.
//
//	ready  serving  terminating │ state
//	───────────────────────────┼─────────────────────────────────────────
//	true   *        false       │ active
//	false  true     true        │ draining
//	false  false    true        │ down (draining with KeepDrainingWhenNotServing)
//	false  *        false       │ not routed (draining with DrainNotReady)
//	nil conditions              │ as the API says: ready, serving = true; terminating = false
//
// An address in several slices (slices split, merge, and move between
// updates) takes its most available state: active over draining over down.
// Endpoints whose slice lacks the port are left out.
func Desired(slices []discoveryv1.EndpointSlice, port string, opts Options) (map[netip.AddrPort]Endpoint, error) {
	out := map[netip.AddrPort]Endpoint{}
	for i := range slices {
		s := &slices[i]
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue // FQDN slices carry no addresses a load balancer can dial
		}
		p, ok, err := pickPort(s.Ports, port)
		if err != nil {
			return nil, fmt.Errorf("EndpointSlice %s: %w", s.Name, err)
		}
		if !ok {
			continue
		}
		for _, e := range s.Endpoints {
			ready := ptr.Deref(e.Conditions.Ready, true)
			serving := ptr.Deref(e.Conditions.Serving, ready)
			terminating := ptr.Deref(e.Conditions.Terminating, false)
			var st plan.State
			switch {
			case ready && !terminating:
				st = plan.Active
			case terminating && serving:
				st = plan.Draining
			case terminating && opts.KeepDrainingWhenNotServing:
				st = plan.Draining
			case terminating:
				st = plan.Down
			case opts.DrainNotReady:
				st = plan.Draining
			default:
				continue
			}
			ep := Endpoint{State: st, Terminating: terminating}
			if r := e.TargetRef; r != nil && r.Kind == "Pod" {
				ep.PodNamespace, ep.PodName, ep.PodUID = r.Namespace, r.Name, r.UID
				if ep.PodNamespace == "" {
					// Left empty, the Events on the Pod would go to
					// namespace default.
					ep.PodNamespace = s.Namespace
				}
			}
			for _, a := range e.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				key := netip.AddrPortFrom(ip.Unmap(), p)
				if old, ok := out[key]; ok && old.State.Rank() >= st.Rank() {
					continue
				}
				out[key] = ep
			}
		}
	}
	return out, nil
}

func pickPort(ports []discoveryv1.EndpointPort, want string) (uint16, bool, error) {
	if want == "" {
		switch len(ports) {
		case 0:
			return 0, false, nil
		case 1:
			if ports[0].Port == nil {
				return 0, false, nil
			}
			return uint16(*ports[0].Port), true, nil
		default:
			return 0, false, fmt.Errorf("the Service has %d ports; name one with the stickydrain.io/port annotation", len(ports))
		}
	}
	n, numErr := strconv.Atoi(want)
	for _, p := range ports {
		if p.Port == nil {
			continue
		}
		if ptr.Deref(p.Name, "") == want || (numErr == nil && int(*p.Port) == n) {
			return uint16(*p.Port), true, nil
		}
	}
	return 0, false, nil
}
