package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/certs"
	"github.com/stickydrain/stickydrain/controller/envoygateway"
	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/install"
	"github.com/stickydrain/stickydrain/test/must"
	"github.com/stickydrain/stickydrain/test/peers"
)

// TestEnvoyGatewayKeepsStickyRulesOnDrainingPods runs the controller (its
// binary, with the permissions it ships with) against a real API server
// with the Gateway API and Envoy Gateway CRDs, then hands what is stored —
// routes, Services, EndpointSlices, the EnvoyPatchPolicy the controller
// keeps — to Envoy Gateway's own translators (v1.9.1, built from its
// module) and asserts on the xDS they produce. Envoy itself cannot run
// here: this checks the configuration Envoy would get, not a request
// through it.
func TestEnvoyGatewayKeepsStickyRulesOnDrainingPods(t *testing.T) {
	cluster.SkipIfShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eg, err := peers.Find(ctx, "envoy-gateway", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	c := cluster.StartT(t, cluster.Options{})
	k := c.Client
	crds, err := filepath.Glob(filepath.Join(eg.Resources, "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs in %s: %v", eg.Resources, err)
	}
	for _, f := range crds {
		if err := install.ApplyFile(ctx, c, f); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := asControllerServiceAccount(t, c)
	if err := install.ApplyFile(ctx, c, filepath.Join("..", "manifests", "envoy-gateway", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}

	create := func(o client.Object) {
		t.Helper()
		if err := k.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	createYAML := func(doc string) {
		t.Helper()
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		// The CRDs may take a moment to be served.
		must.Eventually(t, ctx, 50*time.Millisecond, "creating "+u.GetKind()+" "+u.GetName(), func() bool {
			err := k.Create(ctx, u.DeepCopy())
			if err != nil && !apierrors.IsNotFound(err) && !strings.Contains(err.Error(), "no matches for kind") {
				t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
			}
			return err == nil
		})
	}
	// blog is allowed by its label, shop by its name.
	for _, ns := range []string{"gw", "shop", "blog", "evil", "envoy-gateway-system"} {
		create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"tenant": ns}}})
	}
	// The shipped RoleBinding, in the Gateway's namespace as the operator
	// patches it: the controller writes EnvoyPatchPolicies there, and
	// nowhere else.
	raw, err := os.ReadFile(filepath.Join("..", "manifests", "envoy-gateway", "gateway-namespace.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rb unstructured.Unstructured
	if err := yaml.Unmarshal(raw, &rb.Object); err != nil {
		t.Fatal(err)
	}
	rb.SetNamespace("gw")
	if err := k.Create(ctx, &rb); err != nil {
		t.Fatal(err)
	}
	mayCreate := func(ns string) bool {
		r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:stickydrain-system:stickydrain-controller",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Group: "gateway.envoyproxy.io", Resource: "envoypatchpolicies", Namespace: ns},
		}}
		if err := k.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	// The API server's authorizer reads RoleBindings from its own cache:
	// the new one counts once it has seen it.
	must.Eventually(t, ctx, 50*time.Millisecond, "the RoleBinding in gw seen by the API server's authorizer", func() bool { return mayCreate("gw") })
	for ns, want := range map[string]bool{"gw": true, "shop": false, "envoy-gateway-system": false} {
		if got := mayCreate(ns); got != want {
			t.Errorf("the controller may create EnvoyPatchPolicies in namespace %s: %v, want %v", ns, got, want)
		}
	}
	// The certificate Envoy presents to Envoy Gateway, which its
	// translator expects in its namespace (certgen makes it at install).
	b, err := certs.Generate(certs.Options{DNSNames: []string{"envoy"}})
	if err != nil {
		t.Fatal(err)
	}
	create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "envoy-gateway-system", Name: "envoy"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": b.Cert, "tls.key": b.Key, "ca.crt": b.CACert}})

	// A Service, its pods (injected by the webhook or not) and their
	// EndpointSlice: addrs[i] is "ready", "terminating" (still serving) or
	// "unready" (failing its readiness probe, not terminating) as states[i].
	app := func(ns, name string, injected bool, addrs []string, states []string) {
		t.Helper()
		create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}}})
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{
				discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "stickydrain-test"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		}
		for i, a := range addrs {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + string(rune('a'+i))},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
			if injected {
				pod.Annotations = map[string]string{api.AnnotationStatus: api.StatusInjected}
			}
			create(pod)
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{a},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name},
				Conditions: discoveryv1.EndpointConditions{
					Ready: ptr.To(states[i] == "ready"), Serving: ptr.To(states[i] != "unready"), Terminating: ptr.To(states[i] == "terminating")},
			})
		}
		create(slice)
	}
	app("shop", "cart", true, []string{"198.18.10.1", "198.18.10.2", "198.18.10.4"}, []string{"ready", "terminating", "unready"})
	app("shop", "rpc", true, []string{"198.18.10.3"}, []string{"ready"})
	app("blog", "plain", false, []string{"198.18.11.1", "198.18.11.2"}, []string{"ready", "terminating"})
	app("evil", "cart", true, []string{"198.18.12.1", "198.18.12.2"}, []string{"ready", "terminating"})

	createYAML(`{apiVersion: gateway.networking.k8s.io/v1, kind: GatewayClass, metadata: {name: eg}, spec: {controllerName: gateway.envoyproxy.io/gatewayclass-controller}}`)
	createYAML(`{apiVersion: gateway.networking.k8s.io/v1, kind: Gateway, metadata: {namespace: gw, name: public},
  spec: {gatewayClassName: eg, listeners: [{name: http, protocol: HTTP, port: 80, allowedRoutes: {namespaces: {from: All}}}]}}`)
	route := func(kind, ns, name, svc, host string, sticky ...bool) {
		t.Helper()
		var rules []string
		for _, s := range sticky {
			r := `{backendRefs: [{name: ` + svc + `, port: 8080}]`
			if s {
				r += `, sessionPersistence: {sessionName: JSESSIONID, type: Cookie}`
			}
			rules = append(rules, r+`}`)
		}
		createYAML(`{apiVersion: gateway.networking.k8s.io/v1, kind: ` + kind + `, metadata: {namespace: ` + ns + `, name: ` + name + `},
  spec: {parentRefs: [{name: public, namespace: gw}], hostnames: [` + host + `], rules: [` + strings.Join(rules, ", ") + `]}}`)
	}
	route("HTTPRoute", "shop", "cart", "cart", "cart.example", true, false)
	route("HTTPRoute", "shop", "api", "rpc", "api.example", true)
	// Envoy Gateway does not read a GRPCRoute's sessionPersistence: left
	// alone.
	route("GRPCRoute", "shop", "grpc", "rpc", "grpc.example", true)
	route("HTTPRoute", "shop", "checked", "cart", "checked.example", true)
	route("HTTPRoute", "blog", "plain", "plain", "blog.example", true)
	route("HTTPRoute", "evil", "steal", "cart", "steal.example", true)
	createYAML(`{apiVersion: gateway.envoyproxy.io/v1alpha1, kind: BackendTrafficPolicy, metadata: {namespace: shop, name: active},
  spec: {targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: checked}],
         healthCheck: {active: {type: HTTP, http: {path: /healthz}}}}}`)
	// Another namespace's policy selecting every HTTPRoute of every
	// namespace: without a ReferenceGrant in shop it does not apply there
	// (Envoy Gateway's rule), so it takes none of shop's rules out.
	createYAML(`{apiVersion: gateway.envoyproxy.io/v1alpha1, kind: BackendTrafficPolicy, metadata: {namespace: evil, name: everyone},
  spec: {targetSelectors: [{kind: HTTPRoute, namespaces: {from: All}}],
         healthCheck: {active: {type: HTTP, http: {path: /healthz}}}}}`)
	// An EnvoyPatchPolicy of the name the controller would use for a
	// second Gateway, which the controller did not create.
	createYAML(`{apiVersion: gateway.envoyproxy.io/v1alpha1, kind: EnvoyPatchPolicy, metadata: {namespace: gw, name: stickydrain-other},
  spec: {targetRef: {group: gateway.networking.k8s.io, kind: Gateway, name: other}, type: JSONPatch,
         jsonPatches: [{type: "type.googleapis.com/envoy.config.cluster.v3.Cluster", name: mine, operation: {op: remove, path: /foo}}]}}`)

	// A sticky route on that second Gateway: nothing is kept there, and
	// the route is not told otherwise.
	createYAML(`{apiVersion: gateway.networking.k8s.io/v1, kind: HTTPRoute, metadata: {namespace: shop, name: elsewhere},
  spec: {parentRefs: [{name: other, namespace: gw}], rules: [{backendRefs: [{name: cart, port: 8080}], sessionPersistence: {sessionName: S, type: Cookie}}]}}`)

	ctrl := startController(t, c, kubeconfig, `
envoyGateway:
  gateways:
    - {namespace: gw, name: public, allowedNamespaces: {names: [shop], selector: {matchLabels: {tenant: blog}}}}
    - {namespace: gw, name: other, allowedNamespaces: {names: [shop]}}
`)
	logEventsIfFailed(t, k)

	policyGVK := schema.GroupVersionKind{Group: envoygateway.PolicyGroup, Version: envoygateway.PolicyVersion, Kind: envoygateway.PolicyKind}
	patched := func() []string {
		p := &unstructured.Unstructured{}
		p.SetGroupVersionKind(policyGVK)
		if err := k.Get(ctx, client.ObjectKey{Namespace: "gw", Name: "stickydrain-public"}, p); err != nil {
			return nil
		}
		ps, _, _ := unstructured.NestedSlice(p.Object, "spec", "jsonPatches")
		var names []string
		for _, x := range ps {
			names = append(names, x.(map[string]any)["name"].(string))
		}
		return names
	}
	waitPatched := func(want ...string) {
		t.Helper()
		must.Eventually(t, ctx, 50*time.Millisecond, "the EnvoyPatchPolicy to name "+strings.Join(want, ", "), func() bool { return slices.Equal(patched(), want) })
	}
	event := func(kind, ns, name, reason, typ, contains string) bool {
		var evs eventsv1.EventList
		if k.List(ctx, &evs, client.InNamespace(ns)) != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason && e.Type == typ && strings.Contains(e.Note, contains) {
				return true
			}
		}
		return false
	}

	// The sticky rules of allowed, opted-in workloads, and no other.
	waitPatched("httproute/shop/api/rule/0", "httproute/shop/cart/rule/0")
	for _, e := range []struct{ kind, ns, name, reason, typ, contains string }{
		{"HTTPRoute", "shop", "cart", api.ReasonStickyThroughDrains, corev1.EventTypeNormal, "rule 0"},
		{"HTTPRoute", "shop", "api", api.ReasonStickyThroughDrains, corev1.EventTypeNormal, "rule 0"},
		{"HTTPRoute", "shop", "checked", api.ReasonActiveHealthCheck, corev1.EventTypeWarning, "BackendTrafficPolicy shop/active"},
		{"HTTPRoute", "blog", "plain", api.ReasonBackendNotOptedIn, corev1.EventTypeWarning, "Service blog/plain"},
		{"HTTPRoute", "evil", "steal", api.ReasonRouteNotAllowed, corev1.EventTypeWarning, "namespace evil"},
		{"Gateway", "gw", "other", api.ReasonPolicyConflict, corev1.EventTypeWarning, "gw/stickydrain-other"},
	} {
		must.Eventually(t, ctx, 50*time.Millisecond, e.reason+" Event on "+e.kind+" "+e.ns+"/"+e.name, func() bool { return event(e.kind, e.ns, e.name, e.reason, e.typ, e.contains) })
	}

	ctrl.expectMetrics(t,
		`stickydrain_controller_envoy_gateway_rules{gateway="gw/public",outcome="kept"} 2`,
		`stickydrain_controller_envoy_gateway_rules{gateway="gw/public",outcome="ActiveHealthCheck"} 1`,
		`stickydrain_controller_envoy_gateway_rules{gateway="gw/public",outcome="BackendNotOptedIn"} 1`,
		`stickydrain_controller_envoy_gateway_rules{gateway="gw/public",outcome="RouteNotAllowed"} 1`,
		`stickydrain_controller_envoy_gateway_policy_writes_total{gateway="gw/public",result="created"}`,
		`stickydrain_controller_envoy_gateway_policy_writes_total{gateway="gw/other",result="conflict"}`,
		`stickydrain_controller_envoy_gateway_rules{gateway="gw/other",outcome="kept"} 0`,
	)
	if event("HTTPRoute", "shop", "elsewhere", api.ReasonStickyThroughDrains, corev1.EventTypeNormal, "") {
		t.Error("a route on a Gateway whose policy name is taken was told its sessions are kept")
	}

	// What Envoy Gateway makes of it.
	x := translate(t, ctx, eg.Bin, k)
	x.wantOverride(t, map[string]bool{
		"httproute/shop/cart/rule/0":    true,
		"httproute/shop/cart/rule/1":    false, // not sticky
		"httproute/shop/api/rule/0":     true,
		"httproute/shop/checked/rule/0": false, // an active health check
		"httproute/blog/plain/rule/0":   false, // not opted in
		"httproute/evil/steal/rule/0":   false, // namespace not allowed
	})
	x.wantDraining(t, "httproute/shop/cart/rule/0", "198.18.10.2", "198.18.10.1")
	// Envoy Gateway also hands a pod that fails its readiness probe (not
	// terminating) to Envoy as DRAINING: with the override set, its
	// sessions stay on it too (docs/ingress.md).
	x.wantDraining(t, "httproute/shop/cart/rule/0", "198.18.10.4", "198.18.10.1")
	x.wantDraining(t, "httproute/evil/steal/rule/0", "198.18.12.2", "198.18.12.1")
	x.wantStatefulSession(t, "httproute/shop/cart/rule/0/match/0/cart_example", "httproute/blog/plain/rule/0/match/0/blog_example")

	// The policy the controller did not create is as it was.
	other := &unstructured.Unstructured{}
	other.SetGroupVersionKind(policyGVK)
	if err := k.Get(ctx, client.ObjectKey{Namespace: "gw", Name: "stickydrain-other"}, other); err != nil {
		t.Fatal(err)
	}
	if ps, _, _ := unstructured.NestedSlice(other.Object, "spec", "jsonPatches"); len(ps) != 1 || ps[0].(map[string]any)["name"] != "mine" || other.GetLabels()[api.ManagedByLabel] != "" {
		t.Errorf("the controller changed an EnvoyPatchPolicy it did not create: %v", other.Object)
	}

	// The health check goes: the rule is kept.
	btp := &unstructured.Unstructured{}
	btp.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.envoyproxy.io", Version: "v1alpha1", Kind: "BackendTrafficPolicy"})
	btp.SetNamespace("shop")
	btp.SetName("active")
	if err := k.Delete(ctx, btp); err != nil {
		t.Fatal(err)
	}
	waitPatched("httproute/shop/api/rule/0", "httproute/shop/cart/rule/0", "httproute/shop/checked/rule/0")
	must.Eventually(t, ctx, 50*time.Millisecond, "StickyThroughDrains on shop/checked", func() bool {
		return event("HTTPRoute", "shop", "checked", api.ReasonStickyThroughDrains, corev1.EventTypeNormal, "rule 0")
	})

	// Someone deletes the policy, then empties it: both are undone.
	p := &unstructured.Unstructured{}
	p.SetGroupVersionKind(policyGVK)
	if err := k.Get(ctx, client.ObjectKey{Namespace: "gw", Name: "stickydrain-public"}, p); err != nil {
		t.Fatal(err)
	}
	if err := k.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitPatched("httproute/shop/api/rule/0", "httproute/shop/cart/rule/0", "httproute/shop/checked/rule/0")
	must.Eventually(t, ctx, 50*time.Millisecond, "emptying the policy", func() bool {
		if err := k.Get(ctx, client.ObjectKey{Namespace: "gw", Name: "stickydrain-public"}, p); err != nil {
			return false
		}
		_ = unstructured.SetNestedSlice(p.Object, []any{}, "spec", "jsonPatches")
		return k.Update(ctx, p) == nil
	})
	waitPatched("httproute/shop/api/rule/0", "httproute/shop/cart/rule/0", "httproute/shop/checked/rule/0")

	// The controller is killed; while it is down the rpc Service loses its
	// endpoints (its pods gone) and blog's pods get the drain. The
	// restarted controller takes out the one and keeps the other.
	ctrl.p.Kill()
	if err := k.Delete(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "rpc-1"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"plain-a", "plain-b"} {
		var pod corev1.Pod
		if err := k.Get(ctx, client.ObjectKey{Namespace: "blog", Name: name}, &pod); err != nil {
			t.Fatal(err)
		}
		pod.Annotations = map[string]string{api.AnnotationStatus: api.StatusInjected}
		if err := k.Update(ctx, &pod); err != nil {
			t.Fatal(err)
		}
	}
	ctrl.start()
	waitPatched("httproute/blog/plain/rule/0", "httproute/shop/cart/rule/0", "httproute/shop/checked/rule/0")

	x = translate(t, ctx, eg.Bin, k)
	x.wantOverride(t, map[string]bool{
		"httproute/shop/cart/rule/0":    true,
		"httproute/shop/checked/rule/0": true,
		"httproute/blog/plain/rule/0":   true,
		"httproute/evil/steal/rule/0":   false,
	})
	x.wantDraining(t, "httproute/blog/plain/rule/0", "198.18.11.2", "198.18.11.1")

	// The operator drops the Gateway from the configuration: its policy
	// goes (the one of gw/other, not the controller's, stays); back in
	// the configuration, it is made again.
	cfgPath := ctrl.args[slices.Index(ctrl.args, "--config")+1]
	writeConfig := func(body string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig("envoyGateway:\n  gateways:\n    - {namespace: gw, name: other, allowedNamespaces: {names: [shop]}}\n")
	must.Eventually(t, ctx, 50*time.Millisecond, "the EnvoyPatchPolicy of a Gateway no longer configured to be deleted", func() bool {
		return apierrors.IsNotFound(k.Get(ctx, client.ObjectKey{Namespace: "gw", Name: "stickydrain-public"}, p))
	})
	if err := k.Get(ctx, client.ObjectKey{Namespace: "gw", Name: "stickydrain-other"}, other); err != nil {
		t.Errorf("the EnvoyPatchPolicy the controller did not create is gone: %v", err)
	}
	writeConfig("envoyGateway:\n  gateways:\n    - {namespace: gw, name: public, allowedNamespaces: {names: [shop], selector: {matchLabels: {tenant: blog}}}}\n")
	waitPatched("httproute/blog/plain/rule/0", "httproute/shop/cart/rule/0", "httproute/shop/checked/rule/0")

	// Nothing sticky left to keep: the policy goes.
	for _, r := range []struct{ ns, name string }{{"shop", "cart"}, {"shop", "checked"}, {"blog", "plain"}} {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"})
		u.SetNamespace(r.ns)
		u.SetName(r.name)
		if err := k.Delete(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	must.Eventually(t, ctx, 50*time.Millisecond, "the EnvoyPatchPolicy to be deleted", func() bool {
		err := k.Get(ctx, client.ObjectKey{Namespace: "gw", Name: "stickydrain-public"}, p)
		return apierrors.IsNotFound(err)
	})
}

// xds is what stickydrain-eg-translate wrote.
type xds struct {
	clusters  map[string]map[string]any
	loads     map[string]map[string]any
	routes    map[string]map[string]any
	listeners []map[string]any
}

// translate hands every object Envoy Gateway would read to its
// translators, and checks that they reported no error, that
// go-control-plane's validation accepts every resource, and that every
// EnvoyPatchPolicy they applied was applied whole.
func translate(t *testing.T, ctx context.Context, bin string, k client.Client) *xds {
	t.Helper()
	var in bytes.Buffer
	for _, gvk := range []schema.GroupVersionKind{
		{Version: "v1", Kind: "Namespace"},
		{Version: "v1", Kind: "Service"},
		{Version: "v1", Kind: "Secret"},
		{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice"},
		{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "GatewayClass"},
		{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"},
		{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"},
		{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "GRPCRoute"},
		{Group: "gateway.envoyproxy.io", Version: "v1alpha1", Kind: "BackendTrafficPolicy"},
		{Group: "gateway.envoyproxy.io", Version: "v1alpha1", Kind: "EnvoyPatchPolicy"},
	} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := k.List(ctx, list); err != nil {
			t.Fatalf("listing %s: %v", gvk.Kind, err)
		}
		for _, o := range list.Items {
			if gvk.Kind == "Secret" && o.GetNamespace() != "envoy-gateway-system" {
				continue
			}
			o.SetManagedFields(nil)
			o.SetGroupVersionKind(gvk)
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			in.WriteString("---\n")
			in.Write(b)
		}
	}
	// Kept when the test fails, to run the translator on it again.
	dir, err := os.MkdirTemp("", "stickydrain-eg-translate-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the translator's input is kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, "in.yaml"), in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.Stdin = bytes.NewReader(in.Bytes())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s < %s: %v\n%s", bin, filepath.Join(dir, "in.yaml"), err, stderr.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "out.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	var res struct {
		XDS           map[string]map[string][]map[string]any `json:"xds"`
		Errors        []string                               `json:"errors"`
		Invalid       []string                               `json:"invalid"`
		PatchPolicies []struct {
			Name   string `json:"name"`
			Status struct {
				Ancestors []struct {
					Conditions []metav1.Condition `json:"conditions"`
				} `json:"ancestors"`
			} `json:"status"`
		} `json:"patchPolicies"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("reading the translator's output: %v", err)
	}
	if len(res.Errors) > 0 || len(res.Invalid) > 0 {
		t.Fatalf("Envoy Gateway's translators: errors %q, invalid resources %q", res.Errors, res.Invalid)
	}
	applied := 0
	for _, p := range res.PatchPolicies {
		for _, a := range p.Status.Ancestors {
			for _, c := range a.Conditions {
				if c.Type == "Programmed" && c.Status != metav1.ConditionTrue {
					t.Errorf("EnvoyPatchPolicy %s: %s %s: %s", p.Name, c.Type, c.Reason, c.Message)
				}
				if c.Type == "Programmed" && c.Status == metav1.ConditionTrue && p.Name == "stickydrain-public" {
					applied++
				}
			}
		}
	}
	if applied == 0 {
		t.Errorf("Envoy Gateway did not apply stickydrain-public: %+v", res.PatchPolicies)
	}
	x := &xds{clusters: map[string]map[string]any{}, loads: map[string]map[string]any{}, routes: map[string]map[string]any{}}
	gw, ok := res.XDS["gw/public"]
	if !ok {
		t.Fatalf("no xDS for Gateway gw/public: %v", res.XDS)
	}
	for _, c := range gw["type.googleapis.com/envoy.config.cluster.v3.Cluster"] {
		x.clusters[c["name"].(string)] = c
	}
	for _, l := range gw["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"] {
		x.loads[l["cluster_name"].(string)] = l
	}
	for _, rc := range gw["type.googleapis.com/envoy.config.route.v3.RouteConfiguration"] {
		vhs, _ := rc["virtual_hosts"].([]any)
		for _, vh := range vhs {
			rs, _ := vh.(map[string]any)["routes"].([]any)
			for _, r := range rs {
				r := r.(map[string]any)
				x.routes[r["name"].(string)] = r
			}
		}
	}
	x.listeners = gw["type.googleapis.com/envoy.config.listener.v3.Listener"]
	return x
}

// wantOverride checks which clusters let a session reach a DRAINING
// endpoint.
func (x *xds) wantOverride(t *testing.T, want map[string]bool) {
	t.Helper()
	for name, draining := range want {
		c, ok := x.clusters[name]
		if !ok {
			t.Errorf("no cluster %s (clusters: %v)", name, keysOf(x.clusters))
			continue
		}
		statuses, _, _ := unstructured.NestedStringSlice(c, "common_lb_config", "override_host_status", "statuses")
		got := slices.Contains(statuses, "DRAINING")
		if got != draining {
			t.Errorf("cluster %s: override_host_status %v, want DRAINING in it: %v", name, statuses, draining)
		}
		if got && !slices.Equal(statuses, envoygateway.OverrideHostStatuses) {
			t.Errorf("cluster %s: override_host_status %v, want %v", name, statuses, envoygateway.OverrideHostStatuses)
		}
	}
}

// wantDraining checks that the cluster's endpoint drain is DRAINING and
// serving is not.
func (x *xds) wantDraining(t *testing.T, cluster, drain, serving string) {
	t.Helper()
	health := map[string]string{}
	l := x.loads[cluster]
	eps, _ := l["endpoints"].([]any)
	for _, e := range eps {
		lbs, _ := e.(map[string]any)["lb_endpoints"].([]any)
		for _, lb := range lbs {
			lb := lb.(map[string]any)
			addr, _, _ := unstructured.NestedString(lb, "endpoint", "address", "socket_address", "address")
			h, _ := lb["health_status"].(string)
			health[addr] = h
		}
	}
	if health[drain] != "DRAINING" {
		t.Errorf("cluster %s: endpoint %s health %q, want DRAINING (all: %v)", cluster, drain, health[drain], health)
	}
	if h, ok := health[serving]; !ok || h == "DRAINING" {
		t.Errorf("cluster %s: endpoint %s health %q (present %v), want it serving", cluster, serving, h, ok)
	}
}

// wantStatefulSession checks that the routes carry Envoy's stateful
// session (the cookie) and that the listener has the filter.
func (x *xds) wantStatefulSession(t *testing.T, routes ...string) {
	t.Helper()
	for _, name := range routes {
		r, ok := x.routes[name]
		if !ok {
			t.Errorf("no route %s (routes: %v)", name, keysOf(x.routes))
			continue
		}
		if _, ok := r["typed_per_filter_config"].(map[string]any)["envoy.filters.http.stateful_session"]; !ok {
			t.Errorf("route %s has no stateful_session configuration: %v", name, r["typed_per_filter_config"])
		}
	}
	b, _ := json.Marshal(x.listeners)
	if !bytes.Contains(b, []byte(`"envoy.filters.http.stateful_session"`)) {
		t.Error("no listener has the stateful_session filter")
	}
}

// logEventsIfFailed logs every Event of the cluster when the test ends
// failed.
func logEventsIfFailed(t *testing.T, k client.Client) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var evs eventsv1.EventList
		_ = k.List(context.Background(), &evs)
		for _, e := range evs.Items {
			t.Logf("event %s %s/%s %s %s: %s", e.Regarding.Kind, e.Regarding.Namespace, e.Regarding.Name, e.Type, e.Reason, e.Note)
		}
	})
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
