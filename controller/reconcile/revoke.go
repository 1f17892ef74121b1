package reconcile

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/endpoints"
	"github.com/stickydrain/stickydrain/controller/tenancy"
)

// Revocation is one thing a configuration change would take out of a live
// upstream: a Service's mapping, or one of its servers.
type Revocation struct {
	Service  types.NamespacedName
	Upstream string // <lb>/<upstream>
	// Server is the address taken out, or empty when the whole mapping
	// (every server of the Service on Upstream) is.
	Server string
	Why    string

	cause revocationCause
}

// revocationCause is what in the new configuration takes it out, and so
// what of the running one must be kept to hold it (see Hold).
type revocationCause int

const (
	lbGone        revocationCause = iota // the load balancer is not in it
	claimRefused                         // its rules refuse the mapping
	serverRefused                        // its rules refuse the server's address
)

func (v Revocation) String() string {
	what := "every server of " + v.Service.String()
	if v.Server != "" {
		what = "server " + v.Server + " of " + v.Service.String()
	}
	return fmt.Sprintf("%s out of %s (%s)", what, v.Upstream, v.Why)
}

// Revoked lists what applying next would take out of live upstreams: each
// Service with endpoints, mapped onto an upstream that the running
// configuration allows it and next does not (its load balancer gone from
// next, its namespace or upstream no longer allowed), and each endpoint the
// running configuration admits and next would not (allowedCIDRs narrowed).
// A controller applies a change only when the list is empty (see
// ConfigGuard): servers leave an upstream because their pods go or their
// Service is unmapped, never because an edit of the configuration dropped
// a line. It reads from the cache, so every replica, leading or not, comes
// to the same answer.
func (r *Reconciler) Revoked(ctx context.Context, next *config.Config) ([]Revocation, error) {
	cur, curP := r.rules()
	nextP, err := tenancy.New(next)
	if err != nil {
		return nil, err
	}
	var list corev1.ServiceList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing Services to check the configuration change: %w", err)
	}
	var out []Revocation
	for i := range list.Items {
		svc := &list.Items[i]
		ann, mapped := svc.Annotations[api.AnnotationUpstreams]
		if !mapped || svc.DeletionTimestamp != nil {
			continue
		}
		ups, err := ParseUpstreams(ann, cur)
		if err != nil {
			continue // mapped onto nothing today
		}
		key := client.ObjectKeyFromObject(svc)
		sl, err := r.slicesOf(ctx, svc.Namespace, svc.Name)
		if err != nil {
			return nil, err
		}
		desired, err := endpoints.Desired(sl, svc.Annotations[api.AnnotationPort], endpoints.Options{
			DrainNotReady: cur.DrainNotReady, KeepDrainingWhenNotServing: cur.KeepDrainingWhenNotServing,
		})
		if err != nil || len(desired) == 0 {
			continue // no server today
		}
		nextUps, nextErr := ParseUpstreams(ann, next)
		for _, u := range ups {
			v, err := r.claim(ctx, curP, key, u)
			if err != nil {
				return nil, err
			}
			if !v.Allowed {
				continue
			}
			if nextErr != nil || !slices.Contains(nextUps, u) {
				out = append(out, Revocation{Service: key, Upstream: u.String(), Why: fmt.Sprintf("load balancer %q is not in the new configuration", u.LB), cause: lbGone})
				continue
			}
			nv, err := r.claim(ctx, nextP, key, u)
			if err != nil {
				return nil, err
			}
			if !nv.Allowed {
				out = append(out, Revocation{Service: key, Upstream: u.String(), Why: nv.Message, cause: claimRefused})
				continue
			}
			for a, e := range desired {
				te := tenancy.Endpoint{Addr: a.Addr(), PodNamespace: e.PodNamespace, PodName: e.PodName}
				if now := curP.Endpoint(u.LB, svc.Namespace, te); !now.Allowed && now.Reason != tenancy.NotPodAddress {
					continue // not a server today
				}
				if nv := nextP.Endpoint(u.LB, svc.Namespace, te); !nv.Allowed && nv.Reason != tenancy.NotPodAddress {
					out = append(out, Revocation{Service: key, Upstream: u.String(), Server: a.String(), Why: nv.Message, cause: serverRefused})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// RefuseRevocations reports a configuration change refused because of
// what Revoked found: an Event on each Service it would have cut.
func (r *Reconciler) RefuseRevocations(ctx context.Context, revs []Revocation) {
	seen := map[types.NamespacedName]bool{}
	for _, v := range revs {
		if seen[v.Service] {
			continue
		}
		seen[v.Service] = true
		var svc corev1.Service
		if err := r.Client.Get(ctx, v.Service, &svc); err != nil {
			continue
		}
		r.Recorder.Eventf(&svc, nil, corev1.EventTypeWarning, api.ReasonConfigurationRefused, action("Reconfigure", v.Upstream),
			"the controller refused a configuration change that would take %s; its servers are kept. To take them out on purpose, remove this Service's %s annotation first", v, api.AnnotationUpstreams)
	}
}

// Hold is next with what revs would take kept from cur, the running
// configuration, and nothing else of it: the rest of a change applies at
// once while the revoked tenants' live servers stay. What is kept, by
// what takes the servers out:
//   - a load balancer gone from next: its entry in cur, whole;
//   - a mapping next refuses: the upstream's rule in cur (its own entry,
//     or the load balancer's namespaces as an entry of its own), in
//     place of next's for that upstream alone;
//   - a server address next refuses: the load balancer's address rules
//     in cur (allowedCIDRs, allowEndpointsWithoutPods).
//
// The caller checks that the result revokes nothing (Revoked), and holds
// the whole change otherwise.
func Hold(cur, next *config.Config, revs []Revocation) *config.Config {
	out := *next
	out.LoadBalancers = make([]config.LoadBalancer, len(next.LoadBalancers))
	for i, lb := range next.LoadBalancers {
		lb.Upstreams = slices.Clone(lb.Upstreams)
		out.LoadBalancers[i] = lb
	}
	find := func(c *config.Config, name string) *config.LoadBalancer {
		for i := range c.LoadBalancers {
			if c.LoadBalancers[i].Name == name {
				return &c.LoadBalancers[i]
			}
		}
		return nil
	}
	for _, v := range revs {
		lbName, up, _ := strings.Cut(v.Upstream, "/")
		was := find(cur, lbName)
		if was == nil {
			continue // nothing to keep: Revoked's check says so
		}
		lb := find(&out, lbName)
		if lb == nil {
			keep := *was
			keep.Upstreams = slices.Clone(was.Upstreams)
			out.LoadBalancers = append(out.LoadBalancers, keep)
			continue
		}
		switch v.cause {
		case lbGone:
			// The load balancer is in next: the Service's annotation
			// names another that is not (Revoked lists it too).
		case claimRefused:
			rule := config.Upstream{Name: up, AllowedNamespaces: was.AllowedNamespaces}
			if i := slices.IndexFunc(was.Upstreams, func(u config.Upstream) bool { return u.Name == up }); i >= 0 {
				rule = was.Upstreams[i]
			}
			if rule.Owner == "" && rule.AllowedNamespaces == nil {
				rule.AllowedNamespaces = was.AllowedNamespaces // a name alone took the load balancer's
			}
			if i := slices.IndexFunc(lb.Upstreams, func(u config.Upstream) bool { return u.Name == up }); i >= 0 {
				lb.Upstreams[i] = rule
			} else {
				lb.Upstreams = append(lb.Upstreams, rule)
			}
		case serverRefused:
			lb.AllowedCIDRs, lb.AllowEndpointsWithoutPods = was.AllowedCIDRs, was.AllowEndpointsWithoutPods
		}
	}
	return &out
}
