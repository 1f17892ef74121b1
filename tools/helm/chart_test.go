package helm

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/drivers"
	"github.com/stickydrain/stickydrain/test/manifests"
	"github.com/stickydrain/stickydrain/test/promtool"
)

const (
	release   = "stickydrain"
	namespace = "stickydrain-system"
	// kubeVersion is the control plane's the tests run.
	kubeVersion = "v1.37.2"
	// serviceMonitorAPI is what a cluster with the Prometheus Operator serves.
	serviceMonitorAPI = "monitoring.coreos.com/v1/ServiceMonitor"
)

// chartDir is charts/stickydrain in this checkout.
func chartDir() string { return filepath.Join("..", "..", "charts", "stickydrain") }

// valuesFile reads one of the chart's documented values files.
func valuesFile(t *testing.T, name string) map[string]any {
	t.Helper()
	if name == "" {
		return map[string]any{}
	}
	v, err := common.ReadValuesFile(filepath.Join(chartDir(), "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// render is `helm template` through the SDK: a client-only dry-run
// install, values checked against values.schema.json. apiVersions are
// the extra APIs the cluster serves.
func render(vals map[string]any, apiVersions ...string) ([]*unstructured.Unstructured, error) {
	return renderDefaults(nil, vals, apiVersions...)
}

// renderDefaults is render with the chart's default values changed by
// defaults first (nil: as shipped).
func renderDefaults(defaults func(map[string]any), vals map[string]any, apiVersions ...string) ([]*unstructured.Unstructured, error) {
	ch, err := loader.Load(chartDir())
	if err != nil {
		return nil, fmt.Errorf("loading the chart: %w", err)
	}
	if defaults != nil {
		defaults(ch.Values)
	}
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, err
	}
	inst := action.NewInstall(action.NewConfiguration())
	inst.DryRunStrategy = action.DryRunClient
	inst.ReleaseName = release
	inst.Namespace = namespace
	inst.KubeVersion = kv
	inst.APIVersions = apiVersions
	r, err := inst.Run(ch, vals)
	if err != nil {
		return nil, err
	}
	rel, ok := r.(*releasev1.Release)
	if !ok {
		return nil, fmt.Errorf("helm returned a %T", r)
	}
	return parse(rel.Manifest)
}

// parse splits a rendered manifest into objects.
func parse(manifest string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(manifest, "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, fmt.Errorf("rendered document %q: %w", firstLine(doc), err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func mustRender(t *testing.T, vals map[string]any, apiVersions ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render(vals, apiVersions...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// helmLabels are the labels the chart adds and the kustomize install does
// not have (Helm's recommended ones); the parity test leaves them out.
var helmLabels = []string{"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart"}

// normalize keys each object by kind/namespace/name, without Helm's labels,
// with every number as JSON decodes it.
func normalize(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range objs {
		o = o.DeepCopy()
		if l := o.GetLabels(); l != nil {
			for _, k := range helmLabels {
				delete(l, k)
			}
			o.SetLabels(l)
		}
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		key := o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
		if _, dup := out[key]; dup {
			t.Errorf("%s rendered twice", key)
		}
		out[key] = m
	}
	return out
}

func keys(m map[string]map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// The chart and the kustomize install cannot drift: with the values a
// documented file gives, the chart renders the same objects, field for
// field, as the kustomization a user would apply instead. Two differences
// are the point of each tool and are left out: Helm's own labels, and the
// Namespace, which `helm install --create-namespace` (or the operator)
// creates while the kustomize install carries it.
func TestTheChartAndTheKustomizeInstallGiveTheSameObjects(t *testing.T) {
	for _, tc := range []struct {
		values, kustomization string
		apiVersions           []string
	}{
		{"", "default", []string{serviceMonitorAPI}},
		{"without-monitoring.yaml", "without-monitoring", []string{serviceMonitorAPI}},
		// Without the Prometheus Operator, "auto" leaves the ServiceMonitors out.
		{"", "without-monitoring", nil},
		{"webhook-only.yaml", "webhook-only", []string{serviceMonitorAPI}},
	} {
		t.Run(tc.kustomization+"/"+tc.values, func(t *testing.T) {
			want, err := manifests.Render(manifests.Dir(tc.kustomization))
			if err != nil {
				t.Fatal(err)
			}
			want = slices.DeleteFunc(want, func(o *unstructured.Unstructured) bool { return o.GetKind() == "Namespace" })
			got := mustRender(t, valuesFile(t, tc.values), tc.apiVersions...)
			g, w := normalize(t, got), normalize(t, want)
			if d := cmp.Diff(keys(w), keys(g)); d != "" {
				t.Errorf("objects (-kustomize +chart):\n%s", d)
			}
			for k, wo := range w {
				if gobj, ok := g[k]; ok {
					if d := cmp.Diff(wo, gobj); d != "" {
						t.Errorf("%s (-kustomize +chart):\n%s", k, d)
					}
				}
			}
			// Every object carries Helm's labels, so that a user can select
			// the release's objects.
			for _, o := range got {
				if o.GetLabels()["app.kubernetes.io/instance"] != release || o.GetLabels()["app.kubernetes.io/part-of"] != "stickydrain" {
					t.Errorf("%s %s: labels %v", o.GetKind(), o.GetName(), o.GetLabels())
				}
			}
		})
	}
}

// The parity test can fail: a change to one install and not the other is
// reported, naming the object.
func TestTheParityCheckSeesADrift(t *testing.T) {
	got := normalize(t, mustRender(t, map[string]any{"webhook": map[string]any{"replicas": 3}}, serviceMonitorAPI))
	want, err := manifests.Render(manifests.Dir("default"))
	if err != nil {
		t.Fatal(err)
	}
	w := normalize(t, want)
	k := "Deployment " + namespace + "/stickydrain-webhook"
	if cmp.Equal(w[k], got[k]) {
		t.Errorf("three webhook replicas compared equal to the install's two")
	}
}

// Every documented values file renders, and what it promises is in the
// objects.
func TestEveryValuesFileRenders(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir(), "examples", "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("values files: %v %v", files, err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			objs := mustRender(t, valuesFile(t, name), serviceMonitorAPI)
			switch name {
			case "controller-config.yaml":
				cm := manifests.Find(objs, "ConfigMap", "stickydrain-controller")
				if cm == nil {
					t.Fatal("controller.config set, and no ConfigMap stickydrain-controller")
				}
				data, _, _ := unstructured.NestedString(cm.Object, "data", "controller.yaml")
				// The controller accepts what the chart wrote, and it is
				// the sample's configuration.
				cfg, err := config.Parse([]byte(data), drivers.New())
				if err != nil {
					t.Fatalf("the controller refuses the chart's configuration: %v\n%s", err, data)
				}
				sample, err := os.ReadFile(filepath.Join("..", "..", "manifests", "samples", "controller-config", "controller.yaml"))
				if err != nil {
					t.Fatal(err)
				}
				want, err := config.Parse(sample, drivers.New())
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, cfg); d != "" {
					t.Errorf("the chart's configuration is not the sample's (-sample +chart):\n%s", d)
				}
			case "envoy-gateway.yaml":
				cm := manifests.Find(objs, "ConfigMap", "stickydrain-controller")
				if cm == nil {
					t.Fatal("controller.config set, and no ConfigMap stickydrain-controller")
				}
				data, _, _ := unstructured.NestedString(cm.Object, "data", "controller.yaml")
				cfg, err := config.Parse([]byte(data), drivers.New())
				if err != nil || cfg.EnvoyGateway == nil || len(cfg.EnvoyGateway.Gateways) != 1 {
					t.Fatalf("the controller reads the chart's configuration as %+v, %v\n%s", cfg, err, data)
				}
				// The permissions are the kustomize component's, the write
				// bound in the Gateway's namespace only.
				raw, err := os.ReadFile(filepath.Join("..", "..", "manifests", "envoy-gateway", "rbac.yaml"))
				if err != nil {
					t.Fatal(err)
				}
				for _, doc := range strings.Split(string(raw), "\n---") {
					var want unstructured.Unstructured
					if err := yaml.Unmarshal([]byte(doc), &want.Object); err != nil {
						t.Fatal(err)
					}
					got := manifests.Find(objs, want.GetKind(), want.GetName())
					if got == nil {
						t.Fatalf("controller.envoyGateway.enabled, and no %s %s", want.GetKind(), want.GetName())
					}
					for _, f := range []string{"rules", "roleRef"} {
						if d := cmp.Diff(want.Object[f], got.Object[f]); d != "" {
							t.Errorf("%s %s: the chart's %s are not manifests/envoy-gateway's (-kustomize +chart):\n%s", want.GetKind(), want.GetName(), f, d)
						}
					}
				}
				var bound []string
				for _, o := range objs {
					if o.GetKind() == "RoleBinding" && o.GetName() == "stickydrain-controller-envoy-patch-policies" {
						bound = append(bound, o.GetNamespace())
					}
				}
				if !slices.Equal(bound, []string{"gateways"}) {
					t.Errorf("EnvoyPatchPolicies writable in %v, want only the Gateway's namespace gateways", bound)
				}
			case "image-volume.yaml":
				args, _, _ := unstructured.NestedSlice(manifests.Find(objs, "Deployment", "stickydrain-webhook").Object, "spec", "template", "spec", "containers")
				if a := fmt.Sprint(args[0].(map[string]any)["args"]); !strings.Contains(a, "--drainctl-delivery=image-volume") {
					t.Errorf("webhook args %s, want --drainctl-delivery=image-volume", a)
				}
			case "mirror.yaml":
				v := valuesFile(t, name)
				ref := func(key string) string {
					img := v[key].(map[string]any)
					return fmt.Sprintf("%s:%s@%s", img["repository"], img["tag"], img["digest"])
				}
				images := map[string]string{}
				for _, d := range []string{"stickydrain-webhook", "stickydrain-controller"} {
					o := manifests.Find(objs, "Deployment", d)
					for _, list := range []string{"initContainers", "containers"} {
						cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", list)
						for _, c := range cs {
							c := c.(map[string]any)
							images[d+"/"+c["name"].(string)] = c["image"].(string)
						}
					}
					secrets, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "imagePullSecrets")
					if len(secrets) != 1 || secrets[0].(map[string]any)["name"] != "mirror-credentials" {
						t.Errorf("%s: imagePullSecrets %v", d, secrets)
					}
				}
				want := map[string]string{
					"stickydrain-webhook/drainctl":      ref("drainctlImage"),
					"stickydrain-webhook/webhook":       ref("image"),
					"stickydrain-controller/controller": ref("image"),
				}
				if d := cmp.Diff(want, images); d != "" {
					t.Errorf("images (-want +got):\n%s", d)
				}
			}
		})
	}
}

// A bad value fails at install, naming the value (values.schema.json),
// before anything reaches the cluster.
func TestABadValueFailsNamingIt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		vals  string
		names string // what the error must name
	}{
		{"a string for a number", "webhook: {replicas: two}", "/webhook/replicas"},
		{"no webhook replica", "webhook: {replicas: 0}", "/webhook/replicas"},
		{"a misspelt key", "webhook: {replica: 3}", "replica"},
		{"an unknown group", "controler: {enabled: false}", "controler"},
		{"a digest that is not one", "image: {digest: 'sha256:abc'}", "/image/digest"},
		{"a tag with a colon", "drainctlImage: {tag: 'v1:2'}", "/drainctlImage/tag"},
		{"a pull policy", "image: {pullPolicy: Sometimes}", "/image/pullPolicy"},
		{"monitoring neither auto nor a boolean", "monitoring: {serviceMonitors: 'yes'}", "/monitoring/serviceMonitors"},
		{"a duration", "certificate: {duration: 90d}", "/certificate/duration"},
		{"a webhook timeout over 30 s", "webhook: {timeoutSeconds: 31}", "/webhook/timeoutSeconds"},
		{"a drainctl delivery", "webhook: {drainctlDelivery: volume}", "/webhook/drainctlDelivery"},
		{"a load balancer type", "controller: {config: {loadBalancers: [{name: edge, type: f5, instances: {static: ['127.0.0.1:9999']}}]}}", "/controller/config/loadBalancers/0/type"},
		{"a configuration key", "controller: {config: {loadBalancer: []}}", "loadBalancer"},
		{"an Envoy Gateway without its permissions", "controller: {config: {envoyGateway: {gateways: [{namespace: gw, name: public}]}}}", "controller.envoyGateway.enabled"},
		{"a failure policy", "webhook: {failurePolicy: Open}", "/webhook/failurePolicy"},
		{"a log level", "logLevel: verbose", "/logLevel"},
		{"an extra argument that is not a flag", "controller: {extraArgs: ['zap-log-level=debug']}", "/controller/extraArgs/0"},
		{"a label value that is not a string", "commonLabels: {team: {name: shop}}", "/commonLabels/team"},
		{"a privileged port", "webhook: {securePort: 443}", "/webhook/securePort"},
		{"a Namespace name that is not one", "webhook: {podOptInNamespaces: [Shop]}", "/webhook/podOptInNamespaces/0"},
		{"an owner kind a Deployment's pods do not have", "webhook: {namespaceOptInOwnerKinds: [Deployment]}", "/webhook/namespaceOptInOwnerKinds/0"},
		{"the owner kinds as a flag", "webhook: {extraArgs: ['--namespace-opt-in-owner-kinds=Job']}", "/webhook/extraArgs/0"},
		{"a ceiling that is not a duration", "webhook: {maxWaitCeiling: 12 hours}", "/webhook/maxWaitCeiling"},
		{"the metrics port for admissions", "webhook: {securePort: 8443}", "/webhook/securePort"},
		{"a common label the selectors use", "commonLabels: {app.kubernetes.io/name: shop}", "invalid propertyName 'app.kubernetes.io/name'"},
		{"a pod label the chart sets", "controller: {podLabels: {app.kubernetes.io/part-of: shop}}", "invalid propertyName 'app.kubernetes.io/part-of'"},
		{"Envoy Gateway with no Gateway's namespace", "controller: {envoyGateway: {enabled: true}}", "controller.envoyGateway.namespaces"},
		{"a Gateway without a namespace", "controller: {envoyGateway: {enabled: true}, config: {envoyGateway: {gateways: [{name: public}]}}}", "/controller/config/envoyGateway/gateways/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(tc.vals), &vals); err != nil {
				t.Fatal(err)
			}
			_, err := render(vals)
			if err == nil {
				t.Fatalf("%s: rendered", tc.vals)
			}
			t.Log(err)
			if !strings.Contains(err.Error(), tc.names) {
				t.Errorf("%s: the error does not name %s:\n%v", tc.vals, tc.names, err)
			}
		})
	}
}

// `helm lint --strict` passes on the chart, with the defaults and with
// every documented values file.
func TestHelmLint(t *testing.T) {
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(chartDir(), "examples", "*.yaml"))
	for _, f := range append([]string{""}, files...) {
		name := ""
		if f != "" {
			name = filepath.Base(f)
		}
		l := action.NewLint()
		l.Strict = true
		l.Namespace = namespace
		l.KubeVersion = kv
		res := l.Run([]string{chartDir()}, valuesFile(t, name))
		for _, m := range res.Messages {
			t.Logf("%s: %s", name, m)
		}
		if len(res.Errors) > 0 {
			t.Errorf("helm lint --strict %s: %v", name, res.Errors)
		}
	}
}

// networkPolicy.apiServerCIDRs narrows the webhook's port to the API
// server's addresses and leaves the metrics port as it was; a value that
// is not a CIDR is refused by the schema, naming the field.
func TestTheWebhookPortCanBeNarrowedToTheAPIServer(t *testing.T) {
	objs := mustRender(t, map[string]any{"networkPolicy": map[string]any{"apiServerCIDRs": []any{"10.0.0.10/32", "fd00::1/128"}}})
	var np *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "NetworkPolicy" {
			np = o
		}
	}
	if np == nil {
		t.Fatal("no NetworkPolicy rendered")
	}
	rules, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
	from := map[string][]any{}
	for _, r := range rules {
		rule := r.(map[string]any)
		ports, _, _ := unstructured.NestedSlice(rule, "ports")
		src, _, _ := unstructured.NestedSlice(rule, "from")
		for _, p := range ports {
			from[fmt.Sprint(p.(map[string]any)["port"])] = src
		}
	}
	if len(from["9443"]) != 2 || fmt.Sprint(from["9443"]) != "[map[ipBlock:map[cidr:10.0.0.10/32]] map[ipBlock:map[cidr:fd00::1/128]]]" {
		t.Errorf("the webhook port's sources: %v; want the two CIDRs", from["9443"])
	}
	if src, ok := from["8443"]; !ok || len(src) != 0 {
		t.Errorf("the metrics port's sources: %v (%v); want open (every scrape is authenticated)", src, ok)
	}
	if _, err := render(map[string]any{"networkPolicy": map[string]any{"apiServerCIDRs": []any{"the API server"}}}); err == nil || !strings.Contains(err.Error(), "apiServerCIDRs") {
		t.Errorf("a CIDR that is not one: %v; want the schema to name networkPolicy.apiServerCIDRs", err)
	}
}

// webhook.clientCA.configMap mounts the API server's client CA and makes
// the webhook answer only clients it signs; unset, neither is rendered.
func TestTheWebhookCanAnswerOnlyTheAPIServer(t *testing.T) {
	for _, c := range []struct {
		vals map[string]any
		want bool
	}{{map[string]any{}, false}, {map[string]any{"webhook": map[string]any{"clientCA": map[string]any{"configMap": "apiserver-client-ca"}}}, true}} {
		var args []any
		var volumes []any
		for _, o := range mustRender(t, c.vals) {
			if o.GetKind() != "Deployment" || o.GetName() != "stickydrain-webhook" {
				continue
			}
			ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			args, _, _ = unstructured.NestedSlice(ctrs[0].(map[string]any), "args")
			volumes, _, _ = unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
		}
		hasArg := strings.Contains(fmt.Sprint(args), "--client-ca-file=/client-ca/ca.crt")
		hasVolume := strings.Contains(fmt.Sprint(volumes), "apiserver-client-ca")
		if hasArg != c.want || hasVolume != c.want {
			t.Errorf("values %v: --client-ca-file %v, its ConfigMap mounted %v; want %v", c.vals, hasArg, hasVolume, c.want)
		}
	}
}

// The controller's and the webhook's concurrency bounds are Helm values,
// rendered only when set; a value below 1 is refused by the schema.
func TestTheConcurrencyBoundsAreValues(t *testing.T) {
	argsOf := func(objs []*unstructured.Unstructured, name string) string {
		for _, o := range objs {
			if o.GetKind() == "Deployment" && o.GetName() == name {
				ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				args, _, _ := unstructured.NestedSlice(ctrs[0].(map[string]any), "args")
				return fmt.Sprint(args)
			}
		}
		return ""
	}
	def := mustRender(t, map[string]any{})
	if a := argsOf(def, "stickydrain-controller") + argsOf(def, "stickydrain-webhook"); strings.Contains(a, "--concurrent-reconciles") || strings.Contains(a, "--max-concurrent-admissions") {
		t.Errorf("defaults render a concurrency flag: %s", a)
	}
	set := mustRender(t, map[string]any{"controller": map[string]any{"concurrentReconciles": 4}, "webhook": map[string]any{"maxConcurrentAdmissions": 64}})
	if a := argsOf(set, "stickydrain-controller"); !strings.Contains(a, "--concurrent-reconciles=4") {
		t.Errorf("controller args %s; want --concurrent-reconciles=4", a)
	}
	if a := argsOf(set, "stickydrain-webhook"); !strings.Contains(a, "--max-concurrent-admissions=64") {
		t.Errorf("webhook args %s; want --max-concurrent-admissions=64", a)
	}
	if _, err := render(map[string]any{"controller": map[string]any{"concurrentReconciles": 0}}); err == nil || !strings.Contains(err.Error(), "concurrentReconciles") {
		t.Errorf("concurrentReconciles 0: %v; want the schema to refuse it, naming it", err)
	}
}

// The values every chart has, named as cert-manager's chart names them:
// global (for a subchart), commonLabels, logLevel, each component's
// podLabels, podAnnotations and extraArgs, the webhook's port, host
// network and failure policy, and labels for the Prometheus Operator's
// selectors; each rendered where it belongs, none rendered by default.
func TestTheValuesEveryChartHas(t *testing.T) {
	objs := mustRender(t, map[string]any{
		"global":       map[string]any{"imageRegistry": "mirror.example"},
		"commonLabels": map[string]any{"team": "platform"},
		"logLevel":     "debug",
		"webhook": map[string]any{
			"securePort": 10250 + 13, "hostNetwork": true, "failurePolicy": "Ignore",
			"podLabels": map[string]any{"tier": "admission"}, "podAnnotations": map[string]any{"example.com/scrape": "no"},
			"extraArgs": []any{"--zap-devel"}, "namespaceOptInOwnerKinds": []any{"ReplicaSet", "StatefulSet", "DaemonSet"}, "maxWaitCeiling": "12h", "podOptInNamespaces": []any{"shop", "cart"},
		},
		"controller": map[string]any{"extraArgs": []any{"--sync-period=5m"}, "podLabels": map[string]any{"tier": "control"}},
		"monitoring": map[string]any{"serviceMonitors": true, "additionalLabels": map[string]any{"release": "kube-prometheus-stack"}},
	})
	const port = 10263
	seen := map[string]bool{}
	conds := map[string]string{} // each mutating entry's matchConditions, by name
	for _, o := range objs {
		kind, name := o.GetKind(), o.GetName()
		if o.GetLabels()["team"] != "platform" {
			t.Errorf("%s %s: no commonLabels: %v", kind, name, o.GetLabels())
		}
		switch {
		case kind == "Deployment":
			seen[name] = true
			tmpl, _, _ := unstructured.NestedMap(o.Object, "spec", "template")
			labels, _, _ := unstructured.NestedStringMap(tmpl, "metadata", "labels")
			ctrs, _, _ := unstructured.NestedSlice(tmpl, "spec", "containers")
			args := fmt.Sprint(ctrs[len(ctrs)-1].(map[string]any)["args"])
			if labels["team"] != "platform" || !strings.Contains(args, "--zap-log-level=debug") {
				t.Errorf("%s: pod labels %v, args %s; want commonLabels and --zap-log-level=debug", name, labels, args)
			}
			if name == "stickydrain-webhook" {
				ann, _, _ := unstructured.NestedStringMap(tmpl, "metadata", "annotations")
				host, _, _ := unstructured.NestedBool(tmpl, "spec", "hostNetwork")
				dns, _, _ := unstructured.NestedString(tmpl, "spec", "dnsPolicy")
				ports := fmt.Sprint(ctrs[0].(map[string]any)["ports"])
				if labels["tier"] != "admission" || ann["example.com/scrape"] != "no" || !host || dns != "ClusterFirstWithHostNet" ||
					!strings.Contains(args, fmt.Sprintf("--port=%d", port)) || !strings.Contains(ports, fmt.Sprintf("containerPort:%d", port)) ||
					!strings.Contains(args, "--namespace-opt-in-owner-kinds=ReplicaSet,StatefulSet,DaemonSet") || !strings.Contains(args, "--zap-devel") || !strings.Contains(args, "--max-wait-ceiling=12h") || !strings.Contains(args, "--pod-opt-in-namespaces=shop,cart") {
					t.Errorf("webhook: labels %v, annotations %v, hostNetwork %v, dnsPolicy %q, args %s, ports %s", labels, ann, host, dns, args, ports)
				}
			} else if labels["tier"] != "control" || !strings.Contains(args, "--sync-period=5m") {
				t.Errorf("controller: labels %v, args %s", labels, args)
			}
		case kind == "MutatingWebhookConfiguration":
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				hook := h.(map[string]any)
				if strings.Contains(hook["name"].(string), "opt-in") && hook["failurePolicy"] != "Ignore" {
					t.Errorf("%s: failurePolicy %v, want Ignore", hook["name"], hook["failurePolicy"])
				}
				conds[hook["name"].(string)] = fmt.Sprint(hook["matchConditions"])
			}
			seen[kind] = true
		case kind == "NetworkPolicy":
			if !strings.Contains(fmt.Sprint(o.Object["spec"]), fmt.Sprintf("port:%d", port)) {
				t.Errorf("NetworkPolicy does not let in the webhook's port %d: %v", port, o.Object["spec"])
			}
			seen[kind] = true
		case kind == "ServiceMonitor" || kind == "PrometheusRule":
			if o.GetLabels()["release"] != "kube-prometheus-stack" {
				t.Errorf("%s %s: labels %v, want release: kube-prometheus-stack", kind, name, o.GetLabels())
			}
			seen[kind] = true
		}
	}
	// The owner kinds: DaemonSet pods now reach the opted-in entry; only
	// Job and ReplicationController the fail-open one.
	if c := conds["namespace-opt-in.pods.stickydrain.io"]; !strings.Contains(c, "['ReplicaSet', 'StatefulSet', 'DaemonSet']") {
		t.Errorf("namespace-opt-in matchConditions %s, want the kinds ReplicaSet, StatefulSet, DaemonSet", c)
	}
	if c := conds["namespace-opt-in-other-kinds.pods.stickydrain.io"]; !strings.Contains(c, "['Job', 'ReplicationController']") {
		t.Errorf("namespace-opt-in-other-kinds matchConditions %s, want the kinds Job, ReplicationController", c)
	}
	for _, want := range []string{"stickydrain-webhook", "stickydrain-controller", "MutatingWebhookConfiguration", "NetworkPolicy", "ServiceMonitor", "PrometheusRule"} {
		if !seen[want] {
			t.Errorf("%s not rendered", want)
		}
	}
	// The defaults render none of it (the parity test holds them to the
	// kustomize install, object by object).
	for _, o := range mustRender(t, map[string]any{}) {
		if o.GetKind() == "Deployment" {
			ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			if a := fmt.Sprint(ctrs[len(ctrs)-1].(map[string]any)["args"]); strings.Contains(a, "--zap-log-level") {
				t.Errorf("%s: the defaults set a log level: %s", o.GetName(), a)
			}
		}
	}
}

// The defaults that do not surprise: a PodDisruptionBudget only where it
// can let a node drain (more than one replica), one replica down at a time
// and an unhealthy one never blocking; minAvailable when asked for; the
// NetworkPolicy on the install's pods only; the chart's controller
// ConfigMap kept by Helm when an upgrade's values leave it out.
func TestTheDefaultsDoNotSurprise(t *testing.T) {
	pdbs := func(objs []*unstructured.Unstructured) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, o := range objs {
			if o.GetKind() == "PodDisruptionBudget" {
				out[o.GetName()] = o.Object["spec"].(map[string]any)
			}
		}
		return out
	}
	def := pdbs(mustRender(t, map[string]any{}))
	for _, name := range []string{"stickydrain-webhook", "stickydrain-controller"} {
		if s := def[name]; s == nil || fmt.Sprint(s["maxUnavailable"]) != "1" || s["unhealthyPodEvictionPolicy"] != "AlwaysAllow" || s["minAvailable"] != nil {
			t.Errorf("%s: PodDisruptionBudget %v, want maxUnavailable 1 and AlwaysAllow", name, s)
		}
	}
	one := pdbs(mustRender(t, map[string]any{"webhook": map[string]any{"replicas": 1}, "controller": map[string]any{"replicas": 1}}))
	if len(one) != 0 {
		t.Errorf("one replica each: PodDisruptionBudgets %v, want none (a budget of one pod blocks every node drain)", one)
	}
	min := pdbs(mustRender(t, map[string]any{"webhook": map[string]any{"replicas": 3, "podDisruptionBudget": map[string]any{"minAvailable": 2}}}))
	if s := min["stickydrain-webhook"]; fmt.Sprint(s["minAvailable"]) != "2" || s["maxUnavailable"] != nil {
		t.Errorf("minAvailable 2: %v", s)
	}
	kept := false
	for _, o := range mustRender(t, map[string]any{"controller": map[string]any{"config": map[string]any{"loadBalancers": []any{}}}}) {
		switch o.GetKind() {
		case "ConfigMap":
			kept = kept || o.GetName() == "stickydrain-controller"
			if o.GetName() == "stickydrain-controller" && o.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
				t.Errorf("the controller's ConfigMap: annotations %v, want helm.sh/resource-policy: keep", o.GetAnnotations())
			}
		case "NetworkPolicy":
			if sel := fmt.Sprint(o.Object["spec"].(map[string]any)["podSelector"]); !strings.Contains(sel, "stickydrain-webhook") || !strings.Contains(sel, "stickydrain-controller") {
				t.Errorf("NetworkPolicy podSelector %s, want the install's two Deployments' pods", sel)
			}
		}
	}
	if !kept {
		t.Error("controller.config set: no ConfigMap stickydrain-controller rendered")
	}
	// No PriorityClass by default (cluster-scoped, its value immutable):
	// a class by name, or one created on request.
	classOf := func(vals map[string]any) (created []string, used map[string]string) {
		used = map[string]string{}
		for _, o := range mustRender(t, vals) {
			switch o.GetKind() {
			case "PriorityClass":
				created = append(created, o.GetName())
			case "Deployment":
				used[o.GetName()], _, _ = unstructured.NestedString(o.Object, "spec", "template", "spec", "priorityClassName")
			}
		}
		return created, used
	}
	for _, tc := range []struct {
		vals    map[string]any
		created string
		used    string
	}{
		{map[string]any{}, "", ""},
		{map[string]any{"priorityClassName": "platform-addons"}, "", "platform-addons"},
		{map[string]any{"priorityClass": map[string]any{"create": true}}, "stickydrain-critical", "stickydrain-critical"},
		// The previous chart's way of naming an existing class.
		{map[string]any{"priorityClass": map[string]any{"create": false, "name": "platform-addons"}}, "", "platform-addons"},
	} {
		created, used := classOf(tc.vals)
		if strings.Join(created, ",") != tc.created || used["stickydrain-webhook"] != tc.used || used["stickydrain-controller"] != tc.used {
			t.Errorf("values %v: PriorityClasses created %v, used %v; want %q created, %q used", tc.vals, created, used, tc.created, tc.used)
		}
	}
}

// `helm upgrade --reuse-values` from a chart without this version's keys
// takes the previous values, which lack them: every template defaults
// them, so that the webhook keeps its port (and the NetworkPolicy lets only
// it in), the opted-in entries fail closed, and the PodDisruptionBudgets
// stay, with the minAvailable the previous chart gave.
func TestAReuseValuesUpgradeFromTheChartBeforeKeepsItsObjects(t *testing.T) {
	objs, err := renderDefaults(func(v map[string]any) {
		for _, k := range []string{"global", "commonLabels", "logLevel", "priorityClassName"} {
			delete(v, k)
		}
		v["priorityClass"].(map[string]any)["create"] = true // the previous default
		delete(v["monitoring"].(map[string]any), "additionalLabels")
		for _, c := range []string{"webhook", "controller"} {
			comp := v[c].(map[string]any)
			for _, k := range []string{"securePort", "hostNetwork", "failurePolicy", "maxWaitCeiling", "podLabels", "podAnnotations", "extraArgs", "namespaceOptInOwnerKinds"} {
				delete(comp, k)
			}
			comp["podDisruptionBudget"] = map[string]any{"minAvailable": 1}
		}
	}, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	pdbs, classes := 0, 0
	for _, o := range objs {
		spec := fmt.Sprint(o.Object["spec"])
		switch o.GetKind() {
		case "PriorityClass":
			classes++
		case "Deployment":
			if o.GetName() == "stickydrain-webhook" && (!strings.Contains(spec, "--port=9443") || !strings.Contains(spec, "containerPort:9443") ||
				!strings.Contains(spec, "--namespace-opt-in-owner-kinds=ReplicaSet,StatefulSet ")) {
				t.Errorf("the webhook without securePort or namespaceOptInOwnerKinds: %s", spec)
			}
			if !strings.Contains(spec, "priorityClassName:stickydrain-critical") {
				t.Errorf("%s: no longer at the PriorityClass the previous chart created: %s", o.GetName(), spec)
			}
		case "NetworkPolicy":
			if !strings.Contains(spec, "port:9443") {
				t.Errorf("the NetworkPolicy without securePort: %s", spec)
			}
		case "PodDisruptionBudget":
			pdbs++
			if !strings.Contains(spec, "minAvailable:1") || !strings.Contains(spec, "unhealthyPodEvictionPolicy:AlwaysAllow") {
				t.Errorf("%s: %s", o.GetName(), spec)
			}
		case "MutatingWebhookConfiguration":
			if o.GetName() != "stickydrain" {
				continue
			}
			if strings.Count(fmt.Sprint(o.Object["webhooks"]), "failurePolicy:Fail") != 2 || !strings.Contains(fmt.Sprint(o.Object["webhooks"]), "r.kind in ['ReplicaSet', 'StatefulSet']") {
				t.Errorf("the opted-in entries without failurePolicy or namespaceOptInOwnerKinds: %v", o.Object["webhooks"])
			}
		}
	}
	if classes != 1 {
		t.Errorf("%d PriorityClasses, want the one the previous chart created (its values say create: true)", classes)
	}
	if pdbs != 2 {
		t.Errorf("%d PodDisruptionBudgets, want the two the previous chart had", pdbs)
	}
}

// The alerts' thresholds, durations and severities are values, alert by
// alert, and an alert can be left out; without any, the rule is the
// kustomize install's, byte for byte (the parity test).
func TestTheAlertsAreValues(t *testing.T) {
	rules := func(vals map[string]any) map[string]map[string]any {
		t.Helper()
		out := map[string]map[string]any{}
		for _, o := range mustRender(t, map[string]any{"monitoring": map[string]any{"serviceMonitors": true, "alerts": vals}}) {
			if o.GetKind() != "PrometheusRule" {
				continue
			}
			groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "groups")
			for _, r := range groups[0].(map[string]any)["rules"].([]any) {
				rule := r.(map[string]any)
				out[rule["alert"].(string)] = rule
			}
		}
		return out
	}
	def := rules(nil)
	// The schema names every alert the rule has, and no other.
	raw, err := os.ReadFile(filepath.Join(chartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Monitoring struct {
				Properties struct {
					Alerts struct {
						Properties map[string]any `json:"properties"`
					} `json:"alerts"`
				} `json:"properties"`
			} `json:"monitoring"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	if named, shipped := slices.Sorted(maps.Keys(schema.Properties.Monitoring.Properties.Alerts.Properties)), slices.Sorted(maps.Keys(def)); !slices.Equal(named, shipped) {
		t.Errorf("values.schema.json's monitoring.alerts names %v, the rule has %v", named, shipped)
	}
	got := rules(map[string]any{
		"StickydrainSlotsNearlyExhausted":   map[string]any{"threshold": 0.8},
		"StickydrainDrainTooLong":           map[string]any{"threshold": 1800, "severity": "critical"},
		"StickydrainCertificateExpiresSoon": map[string]any{"threshold": 1209600, "for": "2h"},
		"StickydrainWebhookAbsent":          map[string]any{"for": "15m"},
		"StickydrainPodsRefused":            map[string]any{"enabled": false},
	})
	if len(got) != len(def)-1 || got["StickydrainPodsRefused"] != nil {
		t.Errorf("%d alerts, want %d: StickydrainPodsRefused left out", len(got), len(def)-1)
	}
	for _, c := range []struct{ alert, field, want string }{
		{"StickydrainSlotsNearlyExhausted", "expr", "stickydrain_controller_slots_used / stickydrain_controller_slots > 0.8"},
		{"StickydrainDrainTooLong", "expr", "time() - stickydrain_controller_drain_deadline_timestamp_seconds > 1800"},
		{"StickydrainCertificateExpiresSoon", "expr", `certmanager_certificate_expiration_timestamp_seconds{name="stickydrain-webhook"} - time() < 1209600`},
		{"StickydrainCertificateExpiresSoon", "for", "2h"},
		{"StickydrainWebhookAbsent", "for", "15m"},
		{"StickydrainWebhookErrors", "for", "5m"},
	} {
		if v := fmt.Sprint(got[c.alert][c.field]); v != c.want {
			t.Errorf("%s %s = %q, want %q", c.alert, c.field, v, c.want)
		}
	}
	if sev := fmt.Sprint(got["StickydrainDrainTooLong"]["labels"]); !strings.Contains(sev, "severity:critical") {
		t.Errorf("StickydrainDrainTooLong labels %s, want severity critical", sev)
	}
	// The rest as shipped, Prometheus templates untouched.
	for _, a := range []string{"StickydrainWebhookUnreachable", "StickydrainConfigurationRefused", "StickydrainLoadBalancerUnreachable"} {
		if fmt.Sprint(got[a]) != fmt.Sprint(def[a]) {
			t.Errorf("%s changed:\n%v\nwant\n%v", a, got[a], def[a])
		}
	}
	// promtool (the release manifests/alerts_test.go runs) checks the
	// rules as rendered with the changes.
	var spec map[string]any
	for _, o := range mustRender(t, map[string]any{"monitoring": map[string]any{"serviceMonitors": true, "alerts": map[string]any{
		"StickydrainSlotsNearlyExhausted": map[string]any{"threshold": 0.8}, "StickydrainCertificateExpiresSoon": map[string]any{"threshold": 1209600},
	}}}) {
		if o.GetKind() == "PrometheusRule" {
			spec = o.Object["spec"].(map[string]any)
		}
	}
	body, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, err := promtool.Command("check", "rules", "rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the rendered alerts: %v\n%s", err, out)
	}

	// A threshold where the expression compares against none, or an
	// unknown alert, is refused by name.
	for vals, names := range map[string]string{
		"monitoring: {alerts: {StickydrainWebhookAbsent: {threshold: 2}}}":    "/monitoring/alerts/StickydrainWebhookAbsent",
		"monitoring: {alerts: {StickydrainSlotsExhausted: {threshold: 0.8}}}": "StickydrainSlotsExhausted",
		"monitoring: {alerts: {StickydrainDrainTooLong: {for: soon}}}":        "/monitoring/alerts/StickydrainDrainTooLong/for",
	} {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(vals), &v); err != nil {
			t.Fatal(err)
		}
		if _, err := render(v); err == nil || !strings.Contains(err.Error(), names) {
			t.Errorf("%s: error %v, want one naming %s", vals, err, names)
		}
	}
}
