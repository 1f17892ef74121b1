// Package envoygateway keeps sessions on draining pods behind Envoy Gateway.
//
// Envoy Gateway already hands Envoy a terminating, still-serving endpoint as
// DRAINING, and renders a route rule's sessionPersistence as Envoy's
// stateful_session filter. But it leaves the rule's cluster with Envoy's
// default common_lb_config.override_host_status (UNKNOWN, HEALTHY,
// DEGRADED): a session whose cookie names a DRAINING endpoint is sent
// elsewhere, and the session is lost. For every sticky rule of an allowed,
// opted-in workload on a configured Gateway, the controller keeps one JSON
// patch in the Gateway's EnvoyPatchPolicy (stickydrain-<gateway>) that adds
// DRAINING to that set; the webhook's preStop wait does the rest. No Envoy
// or Envoy Gateway API is called.
//
// The plan (Plan) is pure: it decides from the routes and what it is told
// of their namespaces, backends and health checks. The Reconciler reads
// the cluster and keeps the policy in step.
package envoygateway

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/tenancy"
)

// KindHTTPRoute is the kind of the routes whose rules can be sticky:
// Envoy Gateway (1.9) renders sessionPersistence on HTTPRoute rules only
// (it never reads a GRPCRoute rule's).
const KindHTTPRoute = "HTTPRoute"

// Route is what the plan reads of one HTTPRoute attached to the Gateway.
type Route struct {
	Kind      string
	Namespace string
	Name      string
	// Labels are the route's, which health-check policies may select by.
	Labels map[string]string
	Rules  []Rule
}

// Key is the route's namespace and name.
func (r Route) Key() types.NamespacedName {
	return types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
}

// Rule is one rule of a route.
type Rule struct {
	// Sticky: the rule has sessionPersistence.
	Sticky   bool
	Backends []Backend
}

// Backend is one backendRef of a rule.
type Backend struct {
	// Group and Kind as the backendRef gives them: a Service is group ""
	// and kind "" or "Service".
	Group, Kind     string
	Namespace, Name string
}

// IsService reports whether the backend is a Kubernetes Service.
func (b Backend) IsService() bool {
	return b.Group == "" && (b.Kind == "" || b.Kind == "Service")
}

func (b Backend) String() string {
	if b.IsService() {
		return "Service " + b.Namespace + "/" + b.Name
	}
	return cmp.Or(b.Kind, "Service") + "." + b.Group + " " + b.Namespace + "/" + b.Name
}

// Cluster is the name Envoy Gateway gives the cluster of a route's rule:
// <kind, lower-cased>/<namespace>/<name>/rule/<index>.
func Cluster(kind, namespace, name string, rule int) string {
	return fmt.Sprintf("%s/%s/%s/rule/%d", strings.ToLower(kind), namespace, name, rule)
}

// Input is what the plan decides from.
type Input struct {
	Gateway types.NamespacedName
	// Routes are the routes with a parentRef to Gateway.
	Routes []Route
	// Allowed decides whether a route's namespace may have its rules kept
	// (tenancy.Policy.Route).
	Allowed func(route types.NamespacedName) tenancy.Verdict
	// OptedIn reports whether a Service's pods carry the drain (at least
	// one endpoint's pod was injected by the webhook).
	OptedIn func(svc types.NamespacedName) bool
	// HealthChecked names the BackendTrafficPolicy giving the route an
	// active health check, "" when none does.
	HealthChecked func(r Route) string
	// AllowHealthChecked keeps a health-checked rule anyway
	// (activeHealthChecks: allow).
	AllowHealthChecked bool
}

// Outcome is the plan's decision on one sticky rule.
type Outcome struct {
	Route   types.NamespacedName
	Kind    string
	Rule    int
	Cluster string
	// Kept: the rule's cluster gets DRAINING in its override set.
	Kept bool
	// Reason is an Event reason: api.ReasonStickyThroughDrains when kept
	// without a cost, else why it is not kept, or the cost of keeping it
	// (api.ReasonActiveHealthCheck with Kept).
	Reason  string
	Message string
}

// Plan decides, for every sticky rule of the routes, whether its cluster
// gets DRAINING in its override set. Outcomes are sorted by cluster.
func Plan(in Input) []Outcome {
	var out []Outcome
	for _, r := range in.Routes {
		var verdict *tenancy.Verdict
		hc, hcDone := "", false
		for i, rule := range r.Rules {
			if !rule.Sticky {
				continue
			}
			o := Outcome{Route: r.Key(), Kind: r.Kind, Rule: i, Cluster: Cluster(r.Kind, r.Namespace, r.Name, i)}
			if verdict == nil {
				v := in.Allowed(r.Key())
				verdict = &v
			}
			if !verdict.Allowed {
				o.Reason, o.Message = api.ReasonRouteNotAllowed, verdict.Message
				out = append(out, o)
				continue
			}
			if b, ok := firstNotOptedIn(rule.Backends, in.OptedIn); ok {
				o.Reason = api.ReasonBackendNotOptedIn
				if !b.IsService() {
					o.Message = fmt.Sprintf("%s rule %d: backend %s is not a Service: stickydrain keeps sessions only on pods it drains", r.Kind, i, b)
				} else {
					o.Message = fmt.Sprintf("%s rule %d: no pod of backend %s carries the drain (label its pods or namespace %s=%s): its sessions move when a pod terminates", r.Kind, i, b, api.OptInLabel, api.LabelEnabled)
				}
				if len(rule.Backends) == 0 {
					o.Message = fmt.Sprintf("%s rule %d has no backend", r.Kind, i)
				}
				out = append(out, o)
				continue
			}
			if !hcDone {
				hc, hcDone = in.HealthChecked(r), true
			}
			if hc != "" {
				o.Reason = api.ReasonActiveHealthCheck
				if in.AllowHealthChecked {
					o.Kept = true
					o.Message = fmt.Sprintf("%s rule %d: kept sticky through drains although BackendTrafficPolicy %s checks its backends actively (activeHealthChecks: allow): Envoy also keeps a session on an endpoint failing that check (envoy issue 23213)", r.Kind, i, hc)
				} else {
					o.Message = fmt.Sprintf("%s rule %d: not kept sticky through drains: BackendTrafficPolicy %s checks its backends actively, and Envoy would also keep sessions on an endpoint failing that check (envoy issue 23213); remove the active check or have the operator set activeHealthChecks: allow", r.Kind, i, hc)
				}
				out = append(out, o)
				continue
			}
			o.Kept, o.Reason = true, api.ReasonStickyThroughDrains
			o.Message = fmt.Sprintf("%s rule %d: sessions stay on a terminating pod until its drain ends (cluster %s, EnvoyPatchPolicy %s)", r.Kind, i, o.Cluster, PolicyName(in.Gateway.Name))
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b Outcome) int { return strings.Compare(a.Cluster, b.Cluster) })
	// The policy is one object every tenant of the Gateway shares: each
	// namespace keeps at most api.MaxStickyRulesPerNamespace rules in it,
	// the first by cluster name, so that one tenant cannot make it too
	// large for the API server and every tenant's update of it fail.
	kept, total := map[string]int{}, 0
	for i := range out {
		o := &out[i]
		if !o.Kept {
			continue
		}
		if kept[o.Route.Namespace]++; kept[o.Route.Namespace] > api.MaxStickyRulesPerNamespace {
			o.Kept, o.Reason = false, api.ReasonStickyRuleLimit
			o.Message = fmt.Sprintf("%s rule %d: not kept sticky through drains: namespace %s has more than %d sticky rules on Gateway %s (the first %d by cluster name are kept; they share one EnvoyPatchPolicy with every other tenant)",
				o.Kind, o.Rule, o.Route.Namespace, api.MaxStickyRulesPerNamespace, in.Gateway, api.MaxStickyRulesPerNamespace)
			continue
		}
		if total++; total > api.MaxStickyRulesPerGateway {
			o.Kept, o.Reason = false, api.ReasonStickyRuleLimit
			o.Message = fmt.Sprintf("%s rule %d: not kept sticky through drains: Gateway %s has more than %d sticky rules in all (the first %d by cluster name are kept); split the routes over more Gateways",
				o.Kind, o.Rule, in.Gateway, api.MaxStickyRulesPerGateway, api.MaxStickyRulesPerGateway)
		}
	}
	return out
}

func firstNotOptedIn(bs []Backend, optedIn func(types.NamespacedName) bool) (Backend, bool) {
	if len(bs) == 0 {
		return Backend{}, true
	}
	for _, b := range bs {
		if !b.IsService() || !optedIn(types.NamespacedName{Namespace: b.Namespace, Name: b.Name}) {
			return b, true
		}
	}
	return Backend{}, false
}

// OverrideHostStatuses is the override set a kept rule's cluster gets:
// Envoy's default (UNKNOWN, HEALTHY, DEGRADED) and DRAINING.
var OverrideHostStatuses = []string{"UNKNOWN", "HEALTHY", "DEGRADED", "DRAINING"}

// The EnvoyPatchPolicy's API.
const (
	PolicyGroup   = "gateway.envoyproxy.io"
	PolicyVersion = "v1alpha1"
	PolicyKind    = "EnvoyPatchPolicy"
	// ClusterType is the xDS type of the resources the patches name.
	ClusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	// OverridePath is where the patch adds the override set (Envoy
	// Gateway's JSON patches read xDS in proto field names).
	OverridePath = "/common_lb_config/override_host_status"
)

// PolicyName is the name of the EnvoyPatchPolicy kept for a Gateway.
func PolicyName(gateway string) string { return "stickydrain-" + gateway }

// Patches are the EnvoyPatchPolicy's jsonPatches for the kept rules, in the
// order of the outcomes.
func Patches(outs []Outcome) []any {
	statuses := make([]any, len(OverrideHostStatuses))
	for i, s := range OverrideHostStatuses {
		statuses[i] = s
	}
	var ps []any
	for _, o := range outs {
		if !o.Kept {
			continue
		}
		ps = append(ps, map[string]any{
			"type": ClusterType,
			"name": o.Cluster,
			"operation": map[string]any{
				"op":    "add",
				"path":  OverridePath,
				"value": map[string]any{"statuses": slices.Clone(statuses)},
			},
		})
	}
	return ps
}
