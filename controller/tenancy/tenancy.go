// Package tenancy decides who may map what onto a load balancer: which
// Services may own an upstream, and which endpoints may become its
// servers. It is the pure core of the controller's multi-tenancy: it
// decides from what it is given (the configuration, a Service's namespace
// and its labels, an endpoint and the addresses of the Pod it names) and
// reads nothing itself.
//
// The rules, in the order they are applied:
//
//	claim (a Service maps <lb>/<upstream>)
//	  upstream pinned (upstreams[].owner)    only that Service      else Pinned
//	  upstream has allowedNamespaces         its namespaces         else NamespaceNotAllowed
//	  load balancer has allowedNamespaces    its namespaces         else NamespaceNotAllowed
//	  neither                                nobody                 NoRule
//
//	route (an HTTPRoute or GRPCRoute on a Gateway of envoyGateway.gateways)
//	  gateway has allowedNamespaces          its namespaces         else NamespaceNotAllowed
//	  none                                   nobody                 NoRule
//
//	endpoint (an address of a Service that owns the upstream)
//	  allowedCIDRs set, address outside      refused                OutsideCIDRs
//	  a Pod's own address, same namespace    allowed
//	  allowEndpointsWithoutPods              allowed
//	  no Pod targetRef                       refused                WithoutPod
//	  Pod in another namespace               refused                PodInOtherNamespace
//	  address not the Pod's                  refused                NotPodAddress
package tenancy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickydrain/stickydrain/controller/config"
)

// Reason says why a claim or an endpoint was refused. Its values are the
// label values of the refusal metric: a fixed set, whatever users write.
type Reason string

// Reasons for refusing a claim.
const (
	NoRule              Reason = "NoRule"
	NamespaceNotAllowed Reason = "NamespaceNotAllowed"
	Pinned              Reason = "Pinned"
	UnknownLoadBalancer Reason = "UnknownLoadBalancer"
	// NotListed: the load balancer does not list the upstream, and only
	// listed ones are the controller's (listedUpstreamsOnly, the default).
	NotListed Reason = "NotListed"
)

// Reasons for refusing an endpoint.
const (
	OutsideCIDRs        Reason = "OutsideCIDRs"
	WithoutPod          Reason = "WithoutPod"
	PodInOtherNamespace Reason = "PodInOtherNamespace"
	NotPodAddress       Reason = "NotPodAddress"
	// PodFinished: the Pod has succeeded or failed. It keeps its
	// addresses in its status, but the network may have given them to a
	// new pod, of any namespace (why Kubernetes stopped publishing
	// finished Pods' addresses, kubernetes#109414).
	PodFinished Reason = "PodFinished"
	// PodNotVerified: the controller could not read the Pod this pass
	// (its reads of the API server are rate-limited); the endpoint is
	// tried again on a later pass.
	PodNotVerified Reason = "PodNotVerified"
)

// Reasons are every Reason, claims' then endpoints'.
func Reasons() []Reason {
	return []Reason{NoRule, NamespaceNotAllowed, Pinned, UnknownLoadBalancer, NotListed, OutsideCIDRs, WithoutPod, PodInOtherNamespace, NotPodAddress, PodFinished, PodNotVerified}
}

// Verdict is a decision: allowed, or refused for a reason, with the rule
// (the configuration field) that decided and a message for an Event.
type Verdict struct {
	Allowed bool
	Reason  Reason
	// Rule names the configuration field that decided, e.g.
	// "loadBalancers[edge].allowedNamespaces".
	Rule    string
	Message string
}

// Policy is the compiled tenancy rules of a configuration.
type Policy struct {
	lbs map[string]*lbRules
	// gateways are the Envoy Gateway Gateways' route rules; a nil rule
	// allows no namespace.
	gateways map[types.NamespacedName]*nsRule
}

type lbRules struct {
	name        string
	namespaces  *nsRule // nil: none
	upstreams   map[string]*upRule
	listedOnly  bool
	withoutPods bool
	cidrs       []netip.Prefix
}

type upRule struct {
	namespaces *nsRule
	owner      types.NamespacedName
	pinned     bool
}

type nsRule struct {
	field    string
	all      bool
	names    []string
	selector labels.Selector // nil: none
	text     string          // the rule as the operator wrote it, for messages
}

// New compiles the rules of a validated configuration.
func New(cfg *config.Config) (*Policy, error) {
	p := &Policy{lbs: map[string]*lbRules{}, gateways: map[types.NamespacedName]*nsRule{}}
	if eg := cfg.EnvoyGateway; eg != nil {
		for _, g := range eg.Gateways {
			r, err := compile("envoyGateway.gateways["+g.Namespace+"/"+g.Name+"].allowedNamespaces", g.AllowedNamespaces)
			if err != nil {
				return nil, err
			}
			p.gateways[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}] = r
		}
	}
	for _, lb := range cfg.LoadBalancers {
		f := "loadBalancers[" + lb.Name + "]"
		r := &lbRules{name: lb.Name, upstreams: map[string]*upRule{}, listedOnly: lb.ListsUpstreams(), withoutPods: lb.AllowEndpointsWithoutPods}
		var err error
		if r.namespaces, err = compile(f+".allowedNamespaces", lb.AllowedNamespaces); err != nil {
			return nil, err
		}
		for _, u := range lb.Upstreams {
			ur := &upRule{}
			if ur.namespaces, err = compile(f+".upstreams["+u.Name+"].allowedNamespaces", u.AllowedNamespaces); err != nil {
				return nil, err
			}
			if ns, name, ok := strings.Cut(u.Owner, "/"); ok {
				ur.owner, ur.pinned = types.NamespacedName{Namespace: ns, Name: name}, true
			}
			r.upstreams[u.Name] = ur
		}
		for _, c := range lb.AllowedCIDRs {
			pfx, err := netip.ParsePrefix(c)
			if err != nil {
				return nil, fmt.Errorf("%s.allowedCIDRs: %w", f, err)
			}
			r.cidrs = append(r.cidrs, pfx)
		}
		p.lbs[lb.Name] = r
	}
	return p, nil
}

func compile(field string, n *config.Namespaces) (*nsRule, error) {
	if n == nil {
		return nil, nil
	}
	r := &nsRule{field: field, all: n.All, names: n.Names}
	var parts []string
	if n.All {
		parts = append(parts, "all namespaces")
	}
	if len(n.Names) > 0 {
		parts = append(parts, "names "+strings.Join(n.Names, ", "))
	}
	if n.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(n.Selector)
		if err != nil {
			return nil, fmt.Errorf("%s.selector: %w", field, err)
		}
		r.selector = sel
		parts = append(parts, "selector "+sel.String())
	}
	r.text = strings.Join(parts, " or ")
	return r, nil
}

// NeedsNamespaceLabels reports whether any rule selects namespaces by
// label, so that a claim needs the namespace's labels.
func (p *Policy) NeedsNamespaceLabels() bool {
	for _, lb := range p.lbs {
		if lb.namespaces != nil && lb.namespaces.selector != nil {
			return true
		}
		for _, u := range lb.upstreams {
			if u.namespaces != nil && u.namespaces.selector != nil {
				return true
			}
		}
	}
	for _, g := range p.gateways {
		if g != nil && g.selector != nil {
			return true
		}
	}
	return false
}

// Route decides whether the route (an HTTPRoute or GRPCRoute), in a
// namespace with the labels nsLabels, may have its sticky rules kept on
// draining pods by the Gateway gw.
func (p *Policy) Route(gw, route types.NamespacedName, nsLabels map[string]string) Verdict {
	target := "Gateway " + gw.String()
	r, ok := p.gateways[gw]
	if !ok {
		return Verdict{Reason: NoRule, Rule: "envoyGateway.gateways", Message: fmt.Sprintf("%s is not in envoyGateway.gateways", target)}
	}
	if r == nil {
		return Verdict{Reason: NoRule, Rule: "envoyGateway.gateways[" + gw.String() + "].allowedNamespaces", Message: fmt.Sprintf(
			"%s allows no namespace: the operator has not set its allowedNamespaces in envoyGateway.gateways, so no route on it is kept sticky through drains", target)}
	}
	return r.decide(target, route, nsLabels)
}

// Claim decides whether the Service svc, in a namespace with the labels
// nsLabels, may map onto lb/upstream.
func (p *Policy) Claim(lb, upstream string, svc types.NamespacedName, nsLabels map[string]string) Verdict {
	r := p.lbs[lb]
	if r == nil {
		return Verdict{Reason: UnknownLoadBalancer, Rule: "loadBalancers", Message: fmt.Sprintf("no load balancer %q in the configuration", lb)}
	}
	target := lb + "/" + upstream
	if u := r.upstreams[upstream]; u != nil {
		field := "loadBalancers[" + lb + "].upstreams[" + upstream + "]"
		if u.pinned {
			if svc == u.owner {
				return Verdict{Allowed: true, Rule: field + ".owner"}
			}
			return Verdict{Reason: Pinned, Rule: field + ".owner", Message: fmt.Sprintf(
				"upstream %s is pinned to Service %s by %s.owner; no other Service may map onto it", target, u.owner, field)}
		}
		if u.namespaces != nil {
			return u.namespaces.decide(target, svc, nsLabels)
		}
	}
	if r.listedOnly && r.namespaces != nil {
		field := "loadBalancers[" + lb + "].listedUpstreamsOnly"
		if r.upstreams[upstream] == nil {
			return Verdict{Reason: NotListed, Rule: field, Message: fmt.Sprintf(
				"upstream %s is not listed under loadBalancers[%s].upstreams: only the listed backends are the controller's (%s, true by default); the operator lists it (a name alone will do)", target, lb, field)}
		}
	}
	if r.namespaces == nil {
		return Verdict{Reason: NoRule, Rule: "loadBalancers[" + lb + "].allowedNamespaces", Message: fmt.Sprintf(
			"load balancer %s allows no namespace: the operator has not set loadBalancers[%s].allowedNamespaces (or an upstreams[] entry for %s), so no Service may map onto it", lb, lb, upstream)}
	}
	return r.namespaces.decide(target, svc, nsLabels)
}

func (n *nsRule) decide(target string, svc types.NamespacedName, nsLabels map[string]string) Verdict {
	if n.all || slices.Contains(n.names, svc.Namespace) || (n.selector != nil && n.selector.Matches(labels.Set(nsLabels))) {
		return Verdict{Allowed: true, Rule: n.field}
	}
	return Verdict{Reason: NamespaceNotAllowed, Rule: n.field, Message: fmt.Sprintf(
		"namespace %s may not map onto %s: %s allows %s", svc.Namespace, target, n.field, n.text)}
}

// Endpoint is one address of a Service's EndpointSlices and what is known
// of the Pod its targetRef names.
type Endpoint struct {
	Addr netip.Addr
	// PodNamespace and PodName are the targetRef when it is a Pod; empty
	// when there is none (or it is not a Pod). An empty PodNamespace with
	// a PodName is the Service's namespace.
	PodNamespace, PodName string
	// PodAddrs are the addresses the Pod has (status.podIPs) as the API
	// server says; nil when the Pod was not found.
	PodAddrs []netip.Addr
	// PodPhase is the Pod's status.phase. A Pod that has finished
	// (Succeeded, Failed) owns no address, whatever PodAddrs says.
	PodPhase corev1.PodPhase
	// PodNotVerified: the Pod was not read (PodAddrs says nothing).
	PodNotVerified bool
}

// Finished reports whether a Pod in phase has finished: it runs no
// more, and the network may give its addresses to other pods.
func Finished(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

// Endpoint decides whether an endpoint of a Service in namespace ns may
// become a server of load balancer lb.
func (p *Policy) Endpoint(lb, ns string, e Endpoint) Verdict {
	r := p.lbs[lb]
	if r == nil {
		return Verdict{Reason: UnknownLoadBalancer, Rule: "loadBalancers", Message: fmt.Sprintf("no load balancer %q in the configuration", lb)}
	}
	f := "loadBalancers[" + lb + "]"
	if len(r.cidrs) > 0 && !slices.ContainsFunc(r.cidrs, func(p netip.Prefix) bool { return p.Contains(e.Addr) }) {
		return Verdict{Reason: OutsideCIDRs, Rule: f + ".allowedCIDRs", Message: fmt.Sprintf(
			"endpoint %s is outside %s.allowedCIDRs (%s)", e.Addr, f, prefixes(r.cidrs))}
	}
	podNS := e.PodNamespace
	if podNS == "" {
		podNS = ns
	}
	finished := Finished(e.PodPhase)
	ownPod := e.PodName != "" && podNS == ns && !finished && !e.PodNotVerified && slices.Contains(e.PodAddrs, e.Addr)
	rule := f + ".allowEndpointsWithoutPods"
	switch {
	case ownPod:
		return Verdict{Allowed: true}
	case r.withoutPods:
		return Verdict{Allowed: true, Rule: rule}
	}
	switch {
	case e.PodName == "":
		return Verdict{Reason: WithoutPod, Rule: rule, Message: fmt.Sprintf(
			"endpoint %s names no Pod (a selector-less Service or a hand-written EndpointSlice); %s is false", e.Addr, rule)}
	case podNS != ns:
		return Verdict{Reason: PodInOtherNamespace, Rule: rule, Message: fmt.Sprintf(
			"endpoint %s names Pod %s/%s, outside the Service's namespace %s", e.Addr, podNS, e.PodName, ns)}
	case finished:
		return Verdict{Reason: PodFinished, Rule: rule, Message: fmt.Sprintf(
			"endpoint %s names Pod %s/%s, which has finished (%s); a finished Pod's address may belong to another pod now", e.Addr, podNS, e.PodName, e.PodPhase)}
	case e.PodNotVerified:
		return Verdict{Reason: PodNotVerified, Rule: rule, Message: fmt.Sprintf(
			"endpoint %s names Pod %s/%s, which the controller could not read this pass (its reads of Pods are rate-limited); it is checked again on a later pass", e.Addr, podNS, e.PodName)}
	case e.PodAddrs == nil:
		return Verdict{Reason: NotPodAddress, Rule: rule, Message: fmt.Sprintf(
			"endpoint %s names Pod %s/%s, which does not exist", e.Addr, podNS, e.PodName)}
	default:
		return Verdict{Reason: NotPodAddress, Rule: rule, Message: fmt.Sprintf(
			"endpoint %s is not an address of Pod %s/%s (it has %s)", e.Addr, podNS, e.PodName, addrs(e.PodAddrs))}
	}
}

func prefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

func addrs(as []netip.Addr) string {
	if len(as) == 0 {
		return "none yet"
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
