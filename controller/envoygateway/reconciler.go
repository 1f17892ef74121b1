package envoygateway

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/tenancy"
)

// The GroupVersionKinds read as unstructured: Envoy Gateway's own API is
// not imported (its module is large; two fields of each are read).
var (
	policyGVK    = schema.GroupVersionKind{Group: PolicyGroup, Version: PolicyVersion, Kind: PolicyKind}
	btpGVK       = schema.GroupVersionKind{Group: PolicyGroup, Version: PolicyVersion, Kind: "BackendTrafficPolicy"}
	btpListGVK   = schema.GroupVersionKind{Group: PolicyGroup, Version: PolicyVersion, Kind: "BackendTrafficPolicyList"}
	gatewayGroup = gwapiv1.GroupName
)

// Index names of the routes' field indexes.
const (
	indexGateway = "stickydrain.gateway" // "<ns>/<name>" of each parent Gateway
	indexBackend = "stickydrain.backend" // "<ns>/<name>" of each Service backend
)

// Reconciler keeps one EnvoyPatchPolicy per configured Gateway in step
// with the sticky rules of the routes attached to it.
type Reconciler struct {
	Client   client.Client
	Config   *config.Config
	Recorder recorder.EventRecorder
	Metrics  *Metrics

	renew   chan event.GenericEvent
	mu      sync.Mutex
	current *config.Config
	policy  *tenancy.Policy
	// told is the last Event reason sent for each sticky rule, by its
	// cluster name; an Event is sent when it changes.
	told map[string]string
}

// Enabled reports whether a configuration asks for the Envoy Gateway
// integration.
func Enabled(c *config.Config) bool {
	return c != nil && c.EnvoyGateway != nil && len(c.EnvoyGateway.Gateways) > 0
}

// SetupWithManager registers the controller. The Gateway API and Envoy
// Gateway CRDs must be installed.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := gwapiv1.Install(mgr.GetScheme()); err != nil {
		return fmt.Errorf("adding Gateway API to the scheme: %w", err)
	}
	p, err := tenancy.New(r.Config)
	if err != nil {
		return err
	}
	r.current, r.policy = r.Config, p
	r.told = map[string]string{}
	r.renew = make(chan event.GenericEvent, 64)
	r.Metrics.gateways(nil, r.Config)
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(context.Background(), &gwapiv1.HTTPRoute{}, indexGateway, parentGateways); err != nil {
		return fmt.Errorf("indexing HTTPRoutes by Gateway: %w", err)
	}
	if err := idx.IndexField(context.Background(), &gwapiv1.HTTPRoute{}, indexBackend, serviceBackends); err != nil {
		return fmt.Errorf("indexing HTTPRoutes by backend: %w", err)
	}
	policy := &unstructured.Unstructured{}
	policy.SetGroupVersionKind(policyGVK)
	btp := &unstructured.Unstructured{}
	btp.SetGroupVersionKind(btpGVK)
	return ctrl.NewControllerManagedBy(mgr).
		Named("envoy-gateway").
		WatchesRawSource(source.Channel(r.renew, &handler.EnqueueRequestForObject{})).
		Watches(&gwapiv1.HTTPRoute{}, handler.EnqueueRequestsFromMapFunc(r.mapRoute)).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.mapSlice)).
		Watches(btp, handler.EnqueueRequestsFromMapFunc(r.all)).
		Watches(&gwapiv1.ReferenceGrant{}, handler.EnqueueRequestsFromMapFunc(r.all)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.all), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(policy, handler.EnqueueRequestsFromMapFunc(r.mapPolicy)).
		Complete(r)
}

// SetConfig replaces the configuration and queues every Gateway of the
// old and the new one (a Gateway no longer listed loses its policy).
func (r *Reconciler) SetConfig(ctx context.Context, c *config.Config) error {
	p, err := tenancy.New(c)
	if err != nil {
		return err
	}
	r.mu.Lock()
	old := r.current
	r.Metrics.gateways(old, c)
	r.current, r.policy = c, p
	r.mu.Unlock()
	keys := append(gatewayKeys(old), gatewayKeys(c)...)
	go func() {
		for _, k := range keys {
			select {
			case r.renew <- event.GenericEvent{Object: &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}

func gatewayKeys(c *config.Config) []types.NamespacedName {
	if !Enabled(c) {
		return nil
	}
	var out []types.NamespacedName
	for _, g := range c.EnvoyGateway.Gateways {
		out = append(out, types.NamespacedName{Namespace: g.Namespace, Name: g.Name})
	}
	return out
}

func (r *Reconciler) rules() (*config.Config, *tenancy.Policy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current, r.policy
}

// gateway is the configured Gateway named key, or nil.
func gateway(c *config.Config, key types.NamespacedName) *config.Gateway {
	if !Enabled(c) {
		return nil
	}
	for i, g := range c.EnvoyGateway.Gateways {
		if g.Namespace == key.Namespace && g.Name == key.Name {
			return &c.EnvoyGateway.Gateways[i]
		}
	}
	return nil
}

func (r *Reconciler) all(context.Context, client.Object) []ctrl.Request {
	cfg, _ := r.rules()
	var reqs []ctrl.Request
	for _, k := range gatewayKeys(cfg) {
		reqs = append(reqs, ctrl.Request{NamespacedName: k})
	}
	return reqs
}

func (r *Reconciler) mapRoute(_ context.Context, o client.Object) []ctrl.Request {
	cfg, _ := r.rules()
	var reqs []ctrl.Request
	for _, k := range gatewayKeys(cfg) {
		if slices.Contains(parentGateways(o), k.String()) {
			reqs = append(reqs, ctrl.Request{NamespacedName: k})
		}
	}
	// A route that left a Gateway: its rules leave the policy. The cache
	// no longer lists it under that Gateway, so every Gateway is asked
	// (routes change rarely).
	if len(reqs) == 0 {
		return r.all(context.Background(), o)
	}
	return reqs
}

// mapSlice sends the Gateways of the routes whose backends include the
// slice's Service: its pods coming and going decide whether it is opted in.
func (r *Reconciler) mapSlice(ctx context.Context, o client.Object) []ctrl.Request {
	svc := o.GetLabels()[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil
	}
	cfg, _ := r.rules()
	want := map[string]bool{}
	for _, k := range gatewayKeys(cfg) {
		want[k.String()] = true
	}
	seen := map[string]bool{}
	var reqs []ctrl.Request
	var list gwapiv1.HTTPRouteList
	if err := r.Client.List(ctx, &list, client.MatchingFields{indexBackend: o.GetNamespace() + "/" + svc}); err != nil {
		logf.FromContext(ctx).Error(err, "listing the HTTPRoutes of a Service whose endpoints changed", "service", o.GetNamespace()+"/"+svc)
		return nil
	}
	for i := range list.Items {
		for _, g := range parentGateways(&list.Items[i]) {
			if want[g] && !seen[g] {
				seen[g] = true
				ns, name, _ := strings.Cut(g, "/")
				reqs = append(reqs, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
			}
		}
	}
	return reqs
}

func (r *Reconciler) mapPolicy(_ context.Context, o client.Object) []ctrl.Request {
	if o.GetLabels()[api.ManagedByLabel] != api.ManagedByValue {
		return nil
	}
	cfg, _ := r.rules()
	for _, k := range gatewayKeys(cfg) {
		if k.Namespace == o.GetNamespace() && PolicyName(k.Name) == o.GetName() {
			return []ctrl.Request{{NamespacedName: k}}
		}
	}
	// A policy of a Gateway no longer configured: its Gateway's request
	// deletes it.
	if name, ok := strings.CutPrefix(o.GetName(), PolicyName("")); ok && name != "" {
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	}
	return nil
}

// Reconcile keeps the EnvoyPatchPolicy of one Gateway in step.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	cfg, policy := r.rules()
	gw := gateway(cfg, req.NamespacedName)
	if gw == nil {
		// Not (or no longer) configured: take away what was kept for it.
		return ctrl.Result{}, r.remove(ctx, req.NamespacedName)
	}
	routes, err := r.routes(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	btps, err := r.activeHealthChecks(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	grants, err := r.policyGrants(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	var readErr error
	unknownPods := false
	// A Service backs several rules, often: read once a pass.
	optedIn := map[types.NamespacedName]bool{}
	outs := Plan(Input{
		Gateway: req.NamespacedName,
		Routes:  routes,
		Allowed: func(route types.NamespacedName) tenancy.Verdict {
			var nsLabels map[string]string
			if policy.NeedsNamespaceLabels() {
				var ns corev1.Namespace
				if err := r.Client.Get(ctx, types.NamespacedName{Name: route.Namespace}, &ns); err != nil && !apierrors.IsNotFound(err) && readErr == nil {
					readErr = fmt.Errorf("reading Namespace %s for its labels: %w", route.Namespace, err)
				}
				nsLabels = ns.Labels
			}
			return policy.Route(req.NamespacedName, route, nsLabels)
		},
		OptedIn: func(svc types.NamespacedName) bool {
			if in, ok := optedIn[svc]; ok {
				return in
			}
			in, unknown, err := r.optedIn(ctx, svc)
			if err != nil && readErr == nil {
				readErr = err
			}
			unknownPods = unknownPods || unknown
			optedIn[svc] = in
			return in
		},
		HealthChecked: func(rt Route) string {
			return healthCheckOf(btps, rt, req.NamespacedName, grants)
		},
		AllowHealthChecked: gw.ActiveHealthChecks == config.ActiveHealthChecksAllow,
	})
	if readErr != nil {
		return ctrl.Result{}, readErr
	}
	conflict, err := r.write(ctx, req.NamespacedName, outs)
	if err != nil {
		return ctrl.Result{}, err
	}
	if conflict {
		// Nothing is kept on this Gateway: no route is told otherwise.
		r.Metrics.observe(req.NamespacedName, nil)
		return ctrl.Result{RequeueAfter: cfg.Resync.Duration}, nil
	}
	r.tell(ctx, req.NamespacedName, outs)
	r.Metrics.observe(req.NamespacedName, outs)
	if unknownPods {
		// An endpoint's pod is not in the cache yet: look again soon.
		log.V(1).Info("an endpoint's pod is not known yet; looking again soon")
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	return ctrl.Result{RequeueAfter: cfg.Resync.Duration}, nil
}

// routes lists the HTTPRoutes with a parentRef to gw. GRPCRoutes are left
// alone: Envoy Gateway (1.9) does not read a GRPCRoute rule's
// sessionPersistence, so there is no session to keep.
func (r *Reconciler) routes(ctx context.Context, gw types.NamespacedName) ([]Route, error) {
	var out []Route
	var hs gwapiv1.HTTPRouteList
	if err := r.Client.List(ctx, &hs, client.MatchingFields{indexGateway: gw.String()}); err != nil {
		return nil, fmt.Errorf("listing HTTPRoutes of Gateway %s: %w", gw, err)
	}
	for _, h := range hs.Items {
		rt := Route{Kind: KindHTTPRoute, Namespace: h.Namespace, Name: h.Name, Labels: h.Labels}
		for _, rule := range h.Spec.Rules {
			var bs []Backend
			for _, b := range rule.BackendRefs {
				bs = append(bs, backend(h.Namespace, b.BackendObjectReference))
			}
			rt.Rules = append(rt.Rules, Rule{Sticky: rule.SessionPersistence != nil, Backends: bs})
		}
		out = append(out, rt)
	}
	return out, nil
}

func backend(routeNS string, ref gwapiv1.BackendObjectReference) Backend {
	b := Backend{Namespace: routeNS, Name: string(ref.Name)}
	if ref.Group != nil {
		b.Group = string(*ref.Group)
	}
	if ref.Kind != nil {
		b.Kind = string(*ref.Kind)
	}
	if ref.Namespace != nil {
		b.Namespace = string(*ref.Namespace)
	}
	return b
}

// parentGateways are "<ns>/<name>" of the Gateways an HTTPRoute names as
// parents.
func parentGateways(o client.Object) []string {
	r, ok := o.(*gwapiv1.HTTPRoute)
	if !ok {
		return nil
	}
	var out []string
	for _, p := range r.Spec.ParentRefs {
		if p.Group != nil && string(*p.Group) != gatewayGroup {
			continue
		}
		if p.Kind != nil && string(*p.Kind) != "Gateway" {
			continue
		}
		ns := o.GetNamespace()
		if p.Namespace != nil {
			ns = string(*p.Namespace)
		}
		if k := ns + "/" + string(p.Name); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// serviceBackends are "<ns>/<name>" of the Services an HTTPRoute's rules
// send to.
func serviceBackends(o client.Object) []string {
	r, ok := o.(*gwapiv1.HTTPRoute)
	if !ok {
		return nil
	}
	var out []string
	for _, rule := range r.Spec.Rules {
		for _, ref := range rule.BackendRefs {
			if b := backend(o.GetNamespace(), ref.BackendObjectReference); b.IsService() {
				if k := b.Namespace + "/" + b.Name; !slices.Contains(out, k) {
					out = append(out, k)
				}
			}
		}
	}
	return out
}

// optedIn reports whether a pod of one of svc's endpoints carries the
// drain (the webhook's stickydrain.io/status: injected), and whether a
// pod named by an endpoint is not in the cache yet.
func (r *Reconciler) optedIn(ctx context.Context, svc types.NamespacedName) (in, unknown bool, err error) {
	var slices discoveryv1.EndpointSliceList
	if err := r.Client.List(ctx, &slices, client.InNamespace(svc.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return false, false, fmt.Errorf("listing the EndpointSlices of Service %s: %w", svc, err)
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			ref := e.TargetRef
			if ref == nil || ref.Kind != "Pod" {
				continue
			}
			var pod corev1.Pod
			err := r.Client.Get(ctx, types.NamespacedName{Namespace: cmp.Or(ref.Namespace, svc.Namespace), Name: ref.Name}, &pod)
			switch {
			case apierrors.IsNotFound(err):
				unknown = true
				continue
			case err != nil:
				return false, false, fmt.Errorf("reading Pod %s/%s: %w", svc.Namespace, ref.Name, err)
			}
			if pod.Annotations[api.AnnotationStatus] == api.StatusInjected {
				return true, unknown, nil
			}
		}
	}
	return false, unknown, nil
}

// healthCheck is one BackendTrafficPolicy with an active health check:
// what it targets.
type healthCheck struct {
	name      types.NamespacedName
	refs      []targetRef
	selectors []targetSelector
}

type targetRef struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
	Name  string `json:"name"`
}

type targetSelector struct {
	Group            *string                           `json:"group,omitempty"`
	Kind             string                            `json:"kind"`
	Namespaces       *json.RawMessage                  `json:"namespaces,omitempty"`
	MatchLabels      map[string]string                 `json:"matchLabels,omitempty"`
	MatchExpressions []metav1.LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

type btpSpec struct {
	TargetRef       *targetRef       `json:"targetRef,omitempty"`
	TargetRefs      []targetRef      `json:"targetRefs,omitempty"`
	TargetSelectors []targetSelector `json:"targetSelectors,omitempty"`
	HealthCheck     *struct {
		Active *json.RawMessage `json:"active,omitempty"`
	} `json:"healthCheck,omitempty"`
}

// activeHealthChecks lists the BackendTrafficPolicies with an active
// health check.
func (r *Reconciler) activeHealthChecks(ctx context.Context) ([]healthCheck, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(btpListGVK)
	if err := r.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing BackendTrafficPolicies: %w", err)
	}
	var out []healthCheck
	for _, item := range list.Items {
		raw, err := json.Marshal(item.Object["spec"])
		if err != nil {
			return nil, fmt.Errorf("reading BackendTrafficPolicy %s/%s: %w", item.GetNamespace(), item.GetName(), err)
		}
		var spec btpSpec
		if err := json.Unmarshal(raw, &spec); err != nil {
			return nil, fmt.Errorf("reading BackendTrafficPolicy %s/%s: %w", item.GetNamespace(), item.GetName(), err)
		}
		if spec.HealthCheck == nil || spec.HealthCheck.Active == nil {
			continue
		}
		hc := healthCheck{name: types.NamespacedName{Namespace: item.GetNamespace(), Name: item.GetName()}, refs: spec.TargetRefs, selectors: spec.TargetSelectors}
		if spec.TargetRef != nil {
			hc.refs = append(hc.refs, *spec.TargetRef)
		}
		out = append(out, hc)
	}
	return out, nil
}

// grants tells whether a ReferenceGrant in a route's namespace lets the
// BackendTrafficPolicies of another namespace select that route.
type grants func(routeNS, routeName, policyNS string) bool

// policyGrants reads the ReferenceGrants that let BackendTrafficPolicies
// refer to HTTPRoutes.
func (r *Reconciler) policyGrants(ctx context.Context) (grants, error) {
	var list gwapiv1.ReferenceGrantList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing ReferenceGrants: %w", err)
	}
	type grant struct {
		routeNS, policyNS string
		name              string // "" any route
	}
	var gs []grant
	for _, g := range list.Items {
		for _, from := range g.Spec.From {
			if string(from.Group) != PolicyGroup || string(from.Kind) != "BackendTrafficPolicy" {
				continue
			}
			for _, to := range g.Spec.To {
				if string(to.Group) != gatewayGroup || string(to.Kind) != KindHTTPRoute {
					continue
				}
				gr := grant{routeNS: g.Namespace, policyNS: string(from.Namespace)}
				if to.Name != nil {
					gr.name = string(*to.Name)
				}
				gs = append(gs, gr)
			}
		}
	}
	return func(routeNS, routeName, policyNS string) bool {
		for _, g := range gs {
			if g.routeNS == routeNS && g.policyNS == policyNS && (g.name == "" || g.name == routeName) {
				return true
			}
		}
		return false
	}, nil
}

// healthCheckOf names the BackendTrafficPolicy that checks the route's
// backends actively: one of the route's namespace targeting it (by name or
// labels), one of the Gateway's namespace targeting the Gateway, or one of
// another namespace selecting the route's kind and labels that a
// ReferenceGrant of the route's namespace lets select it (as Envoy Gateway
// decides). Without that grant another namespace's policy does not count:
// otherwise one namespace could take another's rules out.
func healthCheckOf(hcs []healthCheck, rt Route, gw types.NamespacedName, granted grants) string {
	for _, hc := range hcs {
		for _, ref := range hc.refs {
			if ref.Group != gatewayGroup {
				continue
			}
			if hc.name.Namespace == rt.Namespace && ref.Kind == rt.Kind && ref.Name == rt.Name {
				return hc.name.String()
			}
			if hc.name.Namespace == gw.Namespace && ref.Kind == "Gateway" && ref.Name == gw.Name {
				return hc.name.String()
			}
		}
		for _, s := range hc.selectors {
			if (s.Group != nil && *s.Group != gatewayGroup) || s.Kind != rt.Kind {
				continue
			}
			if hc.name.Namespace != rt.Namespace && (s.Namespaces == nil || granted == nil || !granted(rt.Namespace, rt.Name, hc.name.Namespace)) {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: s.MatchLabels, MatchExpressions: s.MatchExpressions})
			if err != nil {
				// A selector Envoy Gateway would refuse too; counted as
				// matching, to be safe.
				return hc.name.String()
			}
			if sel.Matches(labels.Set(rt.Labels)) {
				return hc.name.String()
			}
		}
	}
	return ""
}

// write makes the Gateway's EnvoyPatchPolicy hold the patches of the kept
// outcomes: created, updated, or deleted when none is kept. A policy of
// that name the controller did not create is left alone, reported, and
// conflict is true.
func (r *Reconciler) write(ctx context.Context, gw types.NamespacedName, outs []Outcome) (conflict bool, err error) {
	log := logf.FromContext(ctx)
	patches := Patches(outs)
	key := types.NamespacedName{Namespace: gw.Namespace, Name: PolicyName(gw.Name)}
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(policyGVK)
	err = r.Client.Get(ctx, key, cur)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("reading EnvoyPatchPolicy %s: %w", key, err)
	}
	if exists && cur.GetLabels()[api.ManagedByLabel] != api.ManagedByValue {
		r.Recorder.Eventf(&gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: gw.Namespace, Name: gw.Name}}, nil, corev1.EventTypeWarning, api.ReasonPolicyConflict, "Keep",
			"EnvoyPatchPolicy %s exists and was not created by stickydrain (no %s=%s label): left alone, and no route on this Gateway is kept sticky through drains until it is renamed or deleted", key, api.ManagedByLabel, api.ManagedByValue)
		r.Metrics.writes.WithLabelValues(gw.String(), "conflict").Inc()
		return true, nil
	}
	if len(patches) == 0 {
		if !exists {
			return false, nil
		}
		if err := r.Client.Delete(ctx, cur, client.Preconditions{UID: ptr.To(cur.GetUID())}); err != nil && !apierrors.IsNotFound(err) {
			r.Metrics.writes.WithLabelValues(gw.String(), "error").Inc()
			return false, fmt.Errorf("deleting EnvoyPatchPolicy %s: %w", key, err)
		}
		r.Metrics.writes.WithLabelValues(gw.String(), "deleted").Inc()
		log.Info("deleted the EnvoyPatchPolicy: no sticky rule to keep", "policy", key.String())
		return false, nil
	}
	spec := map[string]any{
		"targetRef":   map[string]any{"group": gatewayGroup, "kind": "Gateway", "name": gw.Name},
		"type":        "JSONPatch",
		"jsonPatches": patches,
	}
	if exists {
		if reflect.DeepEqual(normalize(cur.Object["spec"]), normalize(spec)) {
			return false, nil
		}
		cur.Object["spec"] = spec
		if err := r.Client.Update(ctx, cur); err != nil {
			r.Metrics.writes.WithLabelValues(gw.String(), "error").Inc()
			return false, fmt.Errorf("updating EnvoyPatchPolicy %s: %w", key, err)
		}
		r.Metrics.writes.WithLabelValues(gw.String(), "updated").Inc()
		log.Info("updated the EnvoyPatchPolicy", "policy", key.String(), "clusters", len(patches))
		return false, nil
	}
	p := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	p.SetGroupVersionKind(policyGVK)
	p.SetNamespace(key.Namespace)
	p.SetName(key.Name)
	p.SetLabels(map[string]string{api.ManagedByLabel: api.ManagedByValue})
	if err := r.Client.Create(ctx, p); err != nil {
		r.Metrics.writes.WithLabelValues(gw.String(), "error").Inc()
		return false, fmt.Errorf("creating EnvoyPatchPolicy %s: %w", key, err)
	}
	r.Metrics.writes.WithLabelValues(gw.String(), "created").Inc()
	log.Info("created the EnvoyPatchPolicy", "policy", key.String(), "clusters", len(patches))
	return false, nil
}

// remove deletes the EnvoyPatchPolicy kept for a Gateway no longer
// configured, if there is one and it is the controller's.
func (r *Reconciler) remove(ctx context.Context, gw types.NamespacedName) error {
	key := types.NamespacedName{Namespace: gw.Namespace, Name: PolicyName(gw.Name)}
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(policyGVK)
	if err := r.Client.Get(ctx, key, cur); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading EnvoyPatchPolicy %s: %w", key, err)
	}
	if cur.GetLabels()[api.ManagedByLabel] != api.ManagedByValue {
		return nil
	}
	if err := r.Client.Delete(ctx, cur, client.Preconditions{UID: ptr.To(cur.GetUID())}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting EnvoyPatchPolicy %s of a Gateway no longer configured: %w", key, err)
	}
	logf.FromContext(ctx).Info("deleted the EnvoyPatchPolicy of a Gateway no longer configured", "policy", key.String())
	return nil
}

// normalize turns a value into its JSON form, so that what was read and
// what is wanted compare alike.
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return v
	}
	return out
}

// tell records an Event on each route whose rule's outcome changed.
func (r *Reconciler) tell(_ context.Context, gw types.NamespacedName, outs []Outcome) {
	r.mu.Lock()
	var send []Outcome
	seen := map[string]bool{}
	for _, o := range outs {
		key := gw.String() + " " + o.Cluster
		seen[key] = true
		if r.told[key] != o.Reason {
			r.told[key] = o.Reason
			send = append(send, o)
		}
	}
	for k := range maps.Clone(r.told) {
		if strings.HasPrefix(k, gw.String()+" ") && !seen[k] {
			delete(r.told, k)
		}
	}
	r.mu.Unlock()
	for _, o := range send {
		obj := &gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: o.Route.Namespace, Name: o.Route.Name}}
		typ := corev1.EventTypeWarning
		if o.Reason == api.ReasonStickyThroughDrains {
			typ = corev1.EventTypeNormal
		}
		r.Recorder.Eventf(obj, nil, typ, o.Reason, "Keep", "%s", o.Message)
	}
}
