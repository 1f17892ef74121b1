// The install as a user gets it: each kustomization rendered with
// kustomize's Go API (as `kubectl apply -k` does), checked for what the
// README promises, accepted by the real binaries' flag parsers and the
// controller's configuration parser, and applied to a real API server
// with the real cert-manager and Prometheus Operator CRDs.
package manifests_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/drivers"
	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/manifests"
	"github.com/stickydrain/stickydrain/test/testbin"
	"github.com/stickydrain/stickydrain/webhook/inject"
)

const ns = "stickydrain-system"

var samples = []string{"samples/tomcat", "samples/spring", "samples/haproxy", "samples/nginx-plus", "samples/controller-config", "samples/runtime-tls"}

func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifests.Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, into any) {
	t.Helper()
	o := manifests.Find(objs, kind, name)
	if o == nil {
		t.Fatalf("no %s %s in the install", kind, name)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
}

func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

func TestTheInstallHasEveryPart(t *testing.T) {
	objs := render(t, manifests.Dir("default"))
	want := []string{
		"Certificate/stickydrain-ca",
		"Certificate/stickydrain-webhook",
		"ClusterRole/stickydrain-controller",
		"ClusterRole/stickydrain-metrics-reader",
		"ClusterRole/stickydrain-webhook",
		"ClusterRoleBinding/stickydrain-controller",
		"ClusterRoleBinding/stickydrain-metrics-scraper",
		"ClusterRoleBinding/stickydrain-webhook",
		"ConfigMap/stickydrain-controller-applied",
		"ConfigMap/stickydrain-dashboard",
		"Deployment/stickydrain-controller",
		"Deployment/stickydrain-webhook",
		"Issuer/stickydrain-ca",
		"Issuer/stickydrain-selfsigned",
		"MutatingWebhookConfiguration/stickydrain",
		"MutatingWebhookConfiguration/stickydrain-other-kinds",
		"Namespace/stickydrain-system",
		"NetworkPolicy/stickydrain",
		"PodDisruptionBudget/stickydrain-controller",
		"PodDisruptionBudget/stickydrain-webhook",
		"PrometheusRule/stickydrain",
		"Role/stickydrain-controller-applied-configuration",
		"Role/stickydrain-controller-leader-election",
		"Role/stickydrain-webhook-leader-election",
		"RoleBinding/stickydrain-controller-applied-configuration",
		"RoleBinding/stickydrain-controller-leader-election",
		"RoleBinding/stickydrain-webhook-leader-election",
		"Secret/stickydrain-metrics-scraper-token",
		"Service/stickydrain-controller-metrics",
		"Service/stickydrain-webhook",
		"ServiceAccount/stickydrain-controller",
		"ServiceAccount/stickydrain-metrics-scraper",
		"ServiceAccount/stickydrain-webhook",
		"ServiceMonitor/stickydrain-controller",
		"ServiceMonitor/stickydrain-webhook",
		"ValidatingWebhookConfiguration/stickydrain",
	}
	if got := kinds(objs); !slices.Equal(got, want) {
		t.Errorf("manifests/default renders\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, o := range objs {
		if o.GetKind() != "Namespace" && o.GetKind() != "PriorityClass" && !strings.HasSuffix(o.GetKind(), "WebhookConfiguration") && !strings.HasPrefix(o.GetKind(), "ClusterRole") && o.GetNamespace() != ns {
			t.Errorf("%s/%s is in namespace %q, want %s", o.GetKind(), o.GetName(), o.GetNamespace(), ns)
		}
		if o.GetLabels()["app.kubernetes.io/part-of"] != "stickydrain" {
			t.Errorf("%s/%s lacks app.kubernetes.io/part-of=stickydrain", o.GetKind(), o.GetName())
		}
	}

	// The webhook-only install: the webhook's objects exactly as the full
	// install has them (so what TestTheInstallAppliesToARealAPIServer
	// applies covers them), and nothing of the controller's.
	webhookOnly := render(t, manifests.Dir("webhook-only"))
	wantWebhookOnly := slices.DeleteFunc(slices.Clone(want), func(s string) bool {
		return monitoring(s) || strings.Contains(s, "stickydrain-controller")
	})
	if got := kinds(webhookOnly); !slices.Equal(got, wantWebhookOnly) {
		t.Errorf("manifests/webhook-only renders\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantWebhookOnly, "\n"))
	}
	for _, o := range webhookOnly {
		full := manifests.Find(objs, o.GetKind(), o.GetName())
		if full == nil || !reflect.DeepEqual(full.Object, o.Object) {
			t.Errorf("manifests/webhook-only's %s/%s differs from the full install's", o.GetKind(), o.GetName())
		}
	}

	without := kinds(render(t, manifests.Dir("without-monitoring")))
	withoutMonitors := slices.DeleteFunc(slices.Clone(want), monitoring)
	if !slices.Equal(without, withoutMonitors) {
		t.Errorf("manifests/without-monitoring renders\n%s\nwant\n%s", strings.Join(without, "\n"), strings.Join(withoutMonitors, "\n"))
	}
}

// monitoring tells the objects of manifests/monitoring: the ServiceMonitors
// and the scraper identity they use, the alerts and the dashboard.
func monitoring(kindName string) bool {
	return strings.HasPrefix(kindName, "ServiceMonitor/") || strings.HasPrefix(kindName, "PrometheusRule/") || kindName == "ConfigMap/stickydrain-dashboard" || strings.Contains(kindName, "metrics-scraper")
}

// wiring checks that the certificate, its DNS names, the CA injection, the
// webhooks' service references and the mounted Secret agree, for an
// install in namespace.
func wiring(t *testing.T, objs []*unstructured.Unstructured, namespace string) {
	t.Helper()
	var svc corev1.Service
	find(t, objs, "Service", "stickydrain-webhook", &svc)
	cert := manifests.Find(objs, "Certificate", "stickydrain-webhook")
	if cert == nil {
		t.Fatal("no Certificate")
	}
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	wantDNS := []string{"stickydrain-webhook." + namespace + ".svc", "stickydrain-webhook." + namespace + ".svc.cluster.local"}
	if !slices.Equal(dns, wantDNS) {
		t.Errorf("Certificate dnsNames = %q, want %q", dns, wantDNS)
	}
	secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	var dep appsv1.Deployment
	find(t, objs, "Deployment", "stickydrain-webhook", &dep)
	var mounted string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == "certs" && v.Secret != nil {
			mounted = v.Secret.SecretName
		}
	}
	if mounted == "" || mounted != secret {
		t.Errorf("the webhook mounts Secret %q, the Certificate writes %q", mounted, secret)
	}
	wantInject := namespace + "/stickydrain-webhook"
	check := func(kind string, ann map[string]string, cc []admissionv1.WebhookClientConfig, sels []*metav1.LabelSelector) {
		if got := ann["cert-manager.io/inject-ca-from"]; got != wantInject {
			t.Errorf("%s cert-manager.io/inject-ca-from = %q, want %q", kind, got, wantInject)
		}
		for i, c := range cc {
			if c.Service == nil || c.Service.Name != svc.Name || c.Service.Namespace != namespace || c.URL != nil {
				t.Errorf("%s webhook %d calls %+v, want Service %s/%s", kind, i, c.Service, namespace, svc.Name)
			}
			if c.Service != nil && (c.Service.Port == nil || *c.Service.Port != svc.Spec.Ports[0].Port) {
				t.Errorf("%s webhook %d calls port %v, the Service serves the webhook on %d", kind, i, c.Service.Port, svc.Spec.Ports[0].Port)
			}
		}
		for i, s := range sels {
			sel, err := metav1.LabelSelectorAsSelector(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, never := range []string{namespace, "kube-system"} {
				if sel.Matches(labels.Set{"kubernetes.io/metadata.name": never, "stickydrain.io/drain": "enabled"}) ||
					sel.Matches(labels.Set{"kubernetes.io/metadata.name": never}) {
					t.Errorf("%s webhook %d matches Namespace %s", kind, i, never)
				}
			}
		}
	}
	var m admissionv1.MutatingWebhookConfiguration
	find(t, objs, "MutatingWebhookConfiguration", "stickydrain", &m)
	var cc []admissionv1.WebhookClientConfig
	var sels []*metav1.LabelSelector
	for _, w := range m.Webhooks {
		cc, sels = append(cc, w.ClientConfig), append(sels, w.NamespaceSelector)
	}
	check("MutatingWebhookConfiguration", m.Annotations, cc, sels)
	var v admissionv1.ValidatingWebhookConfiguration
	find(t, objs, "ValidatingWebhookConfiguration", "stickydrain", &v)
	cc, sels = nil, nil
	for _, w := range v.Webhooks {
		cc, sels = append(cc, w.ClientConfig), append(sels, w.NamespaceSelector)
	}
	check("ValidatingWebhookConfiguration", v.Annotations, cc, sels)
}

func TestTheCertificateAndTheWebhooksAreWiredTogether(t *testing.T) {
	wiring(t, render(t, manifests.Dir("default")), ns)
}

// The API server trusts a CA of the install's own, not the webhook's leaf
// (a leaf as its own CA bundle opens a refusal window at every renewal):
// the leaf's Issuer is a CA Issuer on a CA Certificate whose key never
// rotates, issued by the self-signed Issuer; cainjector reads the leaf's
// Secret, whose ca.crt is that CA.
func TestTheWebhookCertificateComesFromAStableCA(t *testing.T) {
	objs := render(t, manifests.Dir("default"))
	str := func(o *unstructured.Unstructured, path ...string) string {
		v, _, _ := unstructured.NestedString(o.Object, path...)
		return v
	}
	get := func(kind, name string) *unstructured.Unstructured {
		o := manifests.Find(objs, kind, name)
		if o == nil {
			t.Fatalf("no %s %s", kind, name)
		}
		return o
	}
	leaf := get("Certificate", "stickydrain-webhook")
	caIssuer := get("Issuer", str(leaf, "spec", "issuerRef", "name"))
	secret := str(caIssuer, "spec", "ca", "secretName")
	if secret == "" {
		t.Fatalf("the leaf's Issuer %s is not a CA Issuer: %v", caIssuer.GetName(), caIssuer.Object["spec"])
	}
	var ca *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Certificate" && str(o, "spec", "secretName") == secret {
			ca = o
		}
	}
	if ca == nil {
		t.Fatalf("no Certificate writes the CA Issuer's Secret %s", secret)
	}
	if isCA, _, _ := unstructured.NestedBool(ca.Object, "spec", "isCA"); !isCA {
		t.Errorf("Certificate %s is not isCA", ca.GetName())
	}
	if p := str(ca, "spec", "privateKey", "rotationPolicy"); p != "Never" {
		t.Errorf("the CA's key rotationPolicy is %q, want Never (a renewed CA must still verify the leaves it signed)", p)
	}
	if root := get("Issuer", str(ca, "spec", "issuerRef", "name")); root.Object["spec"].(map[string]any)["selfSigned"] == nil {
		t.Errorf("the CA's Issuer %s is not self-signed", root.GetName())
	}
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		if got := get(kind, "stickydrain").GetAnnotations()["cert-manager.io/inject-ca-from"]; got != ns+"/"+leaf.GetName() {
			t.Errorf("%s injects the CA from %q, want %s/%s (its Secret's ca.crt is the CA)", kind, got, ns, leaf.GetName())
		}
	}
}

// The README's recipe for another namespace: one layer sets it, the next
// applies the wiring once every name is final.
func TestAnOverlayMayMoveTheInstallToAnotherNamespace(t *testing.T) {
	dir := t.TempDir()
	rel := func(from, sub string) string {
		r, err := filepath.Rel(from, manifests.Dir(sub))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	write := func(sub, body string) string {
		d := filepath.Join(dir, sub)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "kustomization.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	write("moved", fmt.Sprintf("namespace: ops\nresources:\n  - %s\n  - %s\n", rel(filepath.Join(dir, "moved"), "base"), rel(filepath.Join(dir, "moved"), "monitoring")))
	top := write("install", fmt.Sprintf("resources:\n  - ../moved\ncomponents:\n  - %s\n", rel(filepath.Join(dir, "install"), "wiring")))
	objs := render(t, top)
	wiring(t, objs, "ops")
	if manifests.Find(objs, "Namespace", "ops") == nil {
		t.Errorf("no Namespace ops in %v", kinds(objs))
	}
}

// An operator mirroring the images writes one images: list, as for any
// kustomize install, and every image of the install follows it — the
// drainctl image the webhook injects too (it reads it from its own init
// container, which images: rewrites; an argument would not be).
func TestAMirrorRewritesBothImagesInOnePlace(t *testing.T) {
	dir := t.TempDir()
	base, err := filepath.Rel(dir, manifests.Dir("default"))
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf(`resources: [%q]
images:
  - {name: ghcr.io/stickydrain/stickydrain, newName: mirror.example.com/sd/stickydrain, newTag: v9}
  - {name: ghcr.io/stickydrain/drainctl, newName: mirror.example.com/sd/drainctl, newTag: v9}
`, base)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := render(t, dir)
	for _, o := range objs {
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "ghcr.io/") {
			t.Errorf("%s %s still names ghcr.io after the mirror's images:", o.GetKind(), o.GetName())
		}
	}
	var d appsv1.Deployment
	find(t, objs, "Deployment", "stickydrain-webhook", &d)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stickydrain-webhook-abc"}, Spec: d.Spec.Template.Spec}
	cfg := inject.Config{}
	args := d.Spec.Template.Spec.Containers[0].Args
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--drainctl-image-from-container="); ok {
			cfg.DrainctlImageFrom = v
		}
		if strings.HasPrefix(a, "--drainctl-image=") {
			t.Errorf("the webhook is given %s: a mirror's images: would not rewrite it", a)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the webhook's arguments %q: %v", args, err)
	}
	if err := cfg.ResolveDrainctlImage(pod); err != nil {
		t.Fatal(err)
	}
	if cfg.DrainctlImage != "mirror.example.com/sd/drainctl:v9" {
		t.Errorf("the webhook would inject %q, want the mirrored mirror.example.com/sd/drainctl:v9", cfg.DrainctlImage)
	}
}

func TestTheDeploymentsAreHardenedAndHighlyAvailable(t *testing.T) {
	objs := render(t, manifests.Dir("default"))
	for _, name := range []string{"stickydrain-webhook", "stickydrain-controller"} {
		var d appsv1.Deployment
		find(t, objs, "Deployment", name, &d)
		spec := d.Spec.Template.Spec
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("%s: replicas %v, want 2", name, d.Spec.Replicas)
		}
		if spec.ServiceAccountName != name {
			t.Errorf("%s: service account %q, want its own", name, spec.ServiceAccountName)
		}
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod security context %+v, want runAsNonRoot and seccomp RuntimeDefault", name, psc)
		}
		for _, c := range spec.Containers {
			sc := c.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("%s/%s: security context %+v, want no privilege escalation, read-only root, all capabilities dropped", name, c.Name, sc)
			}
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s/%s: want readiness and liveness probes", name, c.Name)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s/%s: resources %+v, want cpu and memory requests and a memory limit", name, c.Name, c.Resources)
			}
			if i := strings.LastIndex(c.Image, ":"); i < 0 || strings.Contains(c.Image[i:], "/") || c.Image[i+1:] == "latest" {
				t.Errorf("%s/%s: image %q, want a pinned tag", name, c.Name, c.Image)
			}
		}
		if spec.PriorityClassName != "" {
			t.Errorf("%s: priorityClassName %q, want none by default (the priority-class component adds one)", name, spec.PriorityClassName)
		}
		spread := map[string]bool{}
		for _, c := range spec.TopologySpreadConstraints {
			if c.LabelSelector != nil && labels.SelectorFromSet(c.LabelSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
				spread[c.TopologyKey] = true
			}
		}
		if !spread["kubernetes.io/hostname"] || !spread["topology.kubernetes.io/zone"] {
			t.Errorf("%s: spread over %v, want nodes and zones", name, spread)
		}
		var pdb policyv1.PodDisruptionBudget
		find(t, objs, "PodDisruptionBudget", name, &pdb)
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(labels.Set(d.Spec.Template.Labels)) || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
			pdb.Spec.UnhealthyPodEvictionPolicy == nil || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
			t.Errorf("%s: PodDisruptionBudget %+v: want one of its pods down at a time, and an unhealthy one never blocking a drain", name, pdb.Spec)
		}
	}
	// Each Service selects its pods and targets ports they have.
	for _, s := range []struct{ svc, dep string }{{"stickydrain-webhook", "stickydrain-webhook"}, {"stickydrain-controller-metrics", "stickydrain-controller"}} {
		var svc corev1.Service
		find(t, objs, "Service", s.svc, &svc)
		var d appsv1.Deployment
		find(t, objs, "Deployment", s.dep, &d)
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Service %s does not select the pods of %s", s.svc, s.dep)
		}
		for _, p := range svc.Spec.Ports {
			if !hasPort(d.Spec.Template.Spec.Containers, p.TargetPort) {
				t.Errorf("Service %s port %s targets %s, which no container of %s has", s.svc, p.Name, p.TargetPort.String(), s.dep)
			}
		}
	}
}

// The install's Namespace lets in what is served to others, and nothing
// more: the webhook's port (the API server) and the metrics ports (a
// scraper; the endpoint authenticates it). Checked against the manifests:
// no CNI in the tests enforces NetworkPolicy.
func TestTheNetworkPolicyLetsInOnlyWhatIsServed(t *testing.T) {
	objs := render(t, manifests.Dir("default"))
	var np networkingv1.NetworkPolicy
	find(t, objs, "NetworkPolicy", "stickydrain", &np)
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range []string{"stickydrain-webhook", "stickydrain-controller"} {
		var d appsv1.Deployment
		find(t, objs, "Deployment", dep, &d)
		if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("the NetworkPolicy (%s) does not select the pods of %s", sel, dep)
		}
	}
	if sel.Empty() || sel.Matches(labels.Set{"app": "someone-elses"}) || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("the NetworkPolicy selects %s for %v, want the install's pods only, ingress", sel, np.Spec.PolicyTypes)
	}
	allowed := map[int32]bool{}
	for _, r := range np.Spec.Ingress {
		if len(r.From) != 0 {
			t.Errorf("a rule limits its sources: %+v", r.From)
		}
		for _, p := range r.Ports {
			allowed[p.Port.IntVal] = true
		}
	}
	served := map[int32]bool{}
	for _, name := range []string{"stickydrain-webhook", "stickydrain-controller"} {
		var d appsv1.Deployment
		find(t, objs, "Deployment", name, &d)
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				switch p.Name {
				case "webhook", "metrics":
					served[p.ContainerPort] = true
				}
			}
		}
	}
	if len(served) == 0 || !maps.Equal(allowed, served) {
		t.Errorf("the NetworkPolicy lets in ports %v, the pods serve others on %v", allowed, served)
	}
}

func hasPort(cs []corev1.Container, target intstr.IntOrString) bool {
	for _, c := range cs {
		for _, p := range c.Ports {
			if (target.Type == intstr.String && p.Name == target.StrVal) || (target.Type == intstr.Int && p.ContainerPort == target.IntVal) {
				return true
			}
		}
	}
	return false
}

// The shipped Deployments' arguments, given to the real binaries: an
// unknown or malformed flag fails here, not in a user's cluster. -h after
// them makes each binary parse them all and exit 0.
func TestTheBinariesAcceptTheShippedArguments(t *testing.T) {
	objs := render(t, manifests.Dir("default"))
	bins := testbin.New()
	t.Cleanup(func() { _ = bins.Close() })
	for _, name := range []string{"stickydrain-webhook", "stickydrain-controller"} {
		var d appsv1.Deployment
		find(t, objs, "Deployment", name, &d)
		c := d.Spec.Template.Spec.Containers[0]
		if len(c.Command) != 1 {
			t.Fatalf("%s: command %q, want the binary", name, c.Command)
		}
		pkg := "github.com/stickydrain/stickydrain/" + strings.TrimPrefix(c.Command[0], "/")
		bin, err := bins.Build(pkg)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, append(slices.Clone(c.Args), "-h")...).CombinedOutput()
		if err != nil {
			t.Errorf("%s %s: %v\n%s", c.Command[0], strings.Join(c.Args, " "), err, out)
		}
	}
	var d appsv1.Deployment
	find(t, objs, "Deployment", "stickydrain-controller", &d)
	if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--config=/etc/stickydrain/controller.yaml") {
		t.Errorf("the controller does not read /etc/stickydrain/controller.yaml: %q", d.Spec.Template.Spec.Containers[0].Args)
	}
	// The configuration is the operator's: the install mounts it, optional
	// (the controller starts without it and maps nothing), and does not ship
	// it, so that re-applying the install cannot overwrite it. The
	// controller's record of what it applied is shipped empty (no data to
	// overwrite with).
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" || o.GetName() == "stickydrain-dashboard" {
			continue
		}
		if o.GetName() != "stickydrain-controller-applied" {
			t.Errorf("the install ships ConfigMap %s: re-applying it would overwrite the operator's configuration", o.GetName())
		} else if o.Object["data"] != nil || o.Object["binaryData"] != nil {
			t.Errorf("the install ships ConfigMap %s with data: re-applying it would overwrite the controller's record", o.GetName())
		}
	}
	vols := d.Spec.Template.Spec.Volumes
	if i := slices.IndexFunc(vols, func(v corev1.Volume) bool { return v.Name == "config" }); i < 0 || vols[i].ConfigMap == nil || vols[i].ConfigMap.Name != "stickydrain-controller" || vols[i].ConfigMap.Optional == nil || !*vols[i].ConfigMap.Optional {
		t.Errorf("the controller's configuration volume is not ConfigMap stickydrain-controller, optional: %+v", vols)
	}
	var cm corev1.ConfigMap
	find(t, render(t, manifests.Dir("samples/controller-config")), "ConfigMap", "stickydrain-controller", &cm)
	if cm.Namespace != ns {
		t.Errorf("the sample configuration is in namespace %q, want %s", cm.Namespace, ns)
	}
	if _, err := config.Parse([]byte(cm.Data["controller.yaml"]), drivers.New()); err != nil {
		t.Errorf("the sample controller configuration: %v", err)
	}
}

// Every sample workload is one the webhook mutates, without an error, in
// the Namespace the sample ships.
func TestTheSamplesAreAcceptedByTheWebhook(t *testing.T) {
	injected := 0
	for _, dir := range samples {
		objs := render(t, manifests.Dir(dir))
		nsObj := inject.Namespace{}
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				nsObj = inject.Namespace{Labels: o.GetLabels(), Annotations: o.GetAnnotations()}
			}
		}
		for _, o := range objs {
			if o.GetKind() != "Deployment" {
				continue
			}
			var d appsv1.Deployment
			find(t, objs, "Deployment", o.GetName(), &d)
			pod := &corev1.Pod{ObjectMeta: d.Spec.Template.ObjectMeta, Spec: d.Spec.Template.Spec}
			pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: d.Name, Controller: ptr.To(true)}}
			res, err := inject.Inject(pod, nsObj, inject.Config{DrainctlImage: "ghcr.io/stickydrain/drainctl:v0.1.0"})
			if err != nil {
				t.Errorf("%s Deployment %s: %v", dir, d.Name, err)
				continue
			}
			reason := res.Reason
			// The samples are what users copy: legal, and meant.
			for _, w := range res.Warnings {
				t.Errorf("%s Deployment %s: admission warning %q", dir, d.Name, w)
			}
			switch {
			case strings.HasPrefix(dir, "samples/haproxy"), strings.HasPrefix(dir, "samples/nginx-plus"):
				if reason != inject.ReasonNotOptedIn {
					t.Errorf("%s Deployment %s: %s, want the load balancer left alone", dir, d.Name, reason)
				}
			default:
				if reason != inject.ReasonInjected {
					t.Errorf("%s Deployment %s: %s, want injected", dir, d.Name, reason)
				}
				injected++
			}
		}
	}
	if injected != 2 {
		t.Errorf("%d sample workloads injected, want 2 (tomcat, spring)", injected)
	}
}

// The install and the samples, applied to a real API server with the real
// cert-manager and Prometheus Operator CRDs and strict field validation:
// an unknown field, a bad value or a schema violation fails here. Then the
// RBAC is asked what each service account may do.
func TestTheInstallAppliesToARealAPIServer(t *testing.T) {
	c := cluster.StartT(t, cluster.Options{Log: t.Logf})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := manifests.InstallCRDs(ctx, c.Config); err != nil {
		t.Fatal(err)
	}
	apply := func(dir string) {
		objs := render(t, manifests.Dir(dir))
		// Namespaces first, as kubectl apply orders them.
		slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
			return boolInt(b.GetKind() == "Namespace") - boolInt(a.GetKind() == "Namespace")
		})
		for _, o := range objs {
			if err := c.Client.Create(ctx, o, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
				t.Errorf("%s: applying %s %s/%s: %v", dir, o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
	}
	apply("default")
	// cert-manager's own Namespace, where samples/runtime-tls keeps its CA.
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cert-manager"}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		apply(s)
	}

	// The operator edits the configuration, then re-applies the install
	// (kubectl apply -k, server-side, forced: what a GitOps tool does on
	// every sync): the edit stays.
	var cm corev1.ConfigMap
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stickydrain-controller"}, &cm); err != nil {
		t.Fatal(err)
	}
	edited := cm.Data["controller.yaml"] + "# edited by the operator\n"
	cm.Data["controller.yaml"] = edited
	if err := c.Client.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	// So does the controller's record of what it applied (the install
	// creates that ConfigMap empty; the controller fills it).
	var kept corev1.ConfigMap
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stickydrain-controller-applied"}, &kept); err != nil {
		t.Fatal(err)
	}
	kept.Data = map[string]string{"controller.yaml": edited}
	if err := c.Client.Update(ctx, &kept); err != nil {
		t.Fatal(err)
	}
	for _, o := range render(t, manifests.Dir("default")) {
		o.SetManagedFields(nil)
		if err := c.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
			t.Errorf("re-applying %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stickydrain-controller"}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["controller.yaml"] != edited {
		t.Errorf("re-applying the install changed the operator's configuration:\n%s", cm.Data["controller.yaml"])
	}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stickydrain-controller-applied"}, &kept); err != nil || kept.Data["controller.yaml"] != edited {
		t.Errorf("re-applying the install changed the controller's record of what it applied: %v, %v", kept.Data, err)
	}

	// The API server stored them: read back what a user would look at.
	var m admissionv1.MutatingWebhookConfiguration
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "stickydrain"}, &m); err != nil {
		t.Fatal(err)
	}
	if got := m.Annotations["cert-manager.io/inject-ca-from"]; got != ns+"/stickydrain-webhook" {
		t.Errorf("stored inject-ca-from = %q", got)
	}

	// No webhook replica answers here (nothing runs the install's pods): an
	// outage. In an opted-in Namespace it refuses only the pods that take
	// the drain fail-closed — a ReplicaSet's or a StatefulSet's, and a pod
	// opting itself in — never a bare pod (kubectl run, kubectl debug
	// --copy-to) nor a Job's or a DaemonSet's, which the matchConditions
	// keep from the fail-closed entry.
	for _, n := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "opted", Labels: map[string]string{"stickydrain.io/drain": "enabled"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "looking", Labels: map[string]string{"stickydrain.io/drain": "dry-run"}}},
	} {
		if err := c.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		ns, name, owner string
		label           string // the pod's own stickydrain.io/drain
		refused         bool
	}{
		{"opted", "bare", "", "", false},
		{"opted", "report-x1", "Job", "", false},
		{"opted", "agent-x1", "DaemonSet", "", false},
		{"opted", "web-x1", "ReplicaSet", "", true},
		{"opted", "db-0", "StatefulSet", "", true},
		{"opted", "web-x2", "ReplicaSet", "disabled", false},
		{"opted", "asked", "", "enabled", true},
		{"looking", "web-y1", "ReplicaSet", "", false},
		{"default", "asked", "", "enabled", true},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: tc.ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if tc.owner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: tc.owner, Name: "owner", UID: "00000000-0000-0000-0000-000000000001", Controller: ptr.To(true)}}
		}
		if tc.label != "" {
			p.Labels = map[string]string{"stickydrain.io/drain": tc.label}
		}
		err := c.Client.Create(ctx, p)
		switch {
		case tc.refused && (err == nil || !strings.Contains(err.Error(), "stickydrain.io")):
			t.Errorf("webhook down: pod %s/%s (controller %q, label %q) was not refused by a stickydrain webhook: %v", tc.ns, tc.name, tc.owner, tc.label, err)
		case !tc.refused && err != nil:
			t.Errorf("webhook down: pod %s/%s (controller %q, label %q) was refused: %v", tc.ns, tc.name, tc.owner, tc.label, err)
		}
	}

	// A bad manifest would be refused: the check above can fail.
	bad := manifests.Find(render(t, manifests.Dir("default")), "Certificate", "stickydrain-webhook").DeepCopy()
	bad.SetName("typo")
	if err := unstructured.SetNestedField(bad.Object, "1y", "spec", "renewBefor"); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Create(ctx, bad, client.FieldValidation(metav1.FieldValidationStrict)); err == nil || !apierrors.IsBadRequest(err) {
		t.Errorf("a Certificate with an unknown field was not refused: %v", err)
	}

	can := func(sa, verb, group, resource, namespace string) bool {
		t.Helper()
		resource, name, _ := strings.Cut(resource, "/") // resource/name: one object
		r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + ns + ":" + sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Group: group, Resource: resource, Name: name, Namespace: namespace,
			},
		}}
		if err := c.Client.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	for _, a := range []struct {
		sa, verb, group, resource, namespace string
		allowed                              bool
	}{
		{"stickydrain-webhook", "watch", "", "namespaces", "", true},
		{"stickydrain-webhook", "list", "", "namespaces", "", true},
		{"stickydrain-webhook", "update", "", "namespaces", "", false},
		{"stickydrain-webhook", "watch", "", "pods", "", true},
		{"stickydrain-webhook", "update", "", "pods", "shop", false},
		{"stickydrain-webhook", "create", "events.k8s.io", "events", "shop", true},
		{"stickydrain-webhook", "update", "coordination.k8s.io", "leases", ns, true},
		{"stickydrain-webhook", "get", "", "secrets", ns, false},
		{"stickydrain-controller", "watch", "discovery.k8s.io", "endpointslices", "", true},
		{"stickydrain-controller", "watch", "", "services", "", true},
		{"stickydrain-controller", "create", "events.k8s.io", "events", "shop", true},
		{"stickydrain-controller", "update", "coordination.k8s.io", "leases", ns, true},
		{"stickydrain-controller", "delete", "coordination.k8s.io", "leases", ns, false},
		{"stickydrain-webhook", "list", "coordination.k8s.io", "leases", ns, false},
		{"stickydrain-controller", "update", "coordination.k8s.io", "leases", "kube-system", false},
		{"stickydrain-controller", "watch", "", "pods", "", true},
		{"stickydrain-controller", "update", "", "pods", "shop", false},
		{"stickydrain-controller", "watch", "", "namespaces", "", true},
		{"stickydrain-controller", "create", "authentication.k8s.io", "tokenreviews", "", true},
		{"stickydrain-controller", "create", "authorization.k8s.io", "subjectaccessreviews", "", true},
		{"stickydrain-webhook", "create", "authentication.k8s.io", "tokenreviews", "", true},
		{"stickydrain-controller", "get", "", "secrets", "shop", false},
		{"stickydrain-controller", "update", "", "services", "shop", false},
		{"stickydrain-controller", "update", "", "configmaps/stickydrain-controller-applied", ns, true},
		{"stickydrain-controller", "update", "", "configmaps/stickydrain-controller", ns, false},
		{"stickydrain-controller", "get", "", "configmaps/stickydrain-controller-applied", "shop", false},
		{"stickydrain-controller", "list", "", "configmaps", ns, false},
		{"stickydrain-controller", "create", "", "configmaps", ns, false},
	} {
		if got := can(a.sa, a.verb, a.group, a.resource, a.namespace); got != a.allowed {
			t.Errorf("%s may %s %s.%s in %q: %v, want %v", a.sa, a.verb, a.resource, a.group, a.namespace, got, a.allowed)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The Envoy Gateway component adds its permissions to an install, bound to
// the install's controller.
func TestTheEnvoyGatewayComponentAddsItsPermissions(t *testing.T) {
	objs := renderWithComponent(t, "envoy-gateway")
	role := manifests.Find(objs, "ClusterRole", "stickydrain-controller-envoy-gateway")
	binding := manifests.Find(objs, "ClusterRoleBinding", "stickydrain-controller-envoy-gateway")
	if role == nil || binding == nil {
		t.Fatalf("the component adds no ClusterRole or ClusterRoleBinding: %v", kinds(objs))
	}
	if role.GetLabels()["app.kubernetes.io/part-of"] != "stickydrain" {
		t.Errorf("ClusterRole labels %v", role.GetLabels())
	}
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	sa := manifests.Find(objs, "ServiceAccount", "stickydrain-controller")
	if len(subjects) != 1 || sa == nil || subjects[0].(map[string]any)["name"] != sa.GetName() || subjects[0].(map[string]any)["namespace"] != sa.GetNamespace() {
		t.Errorf("the binding's subjects %v are not the controller's ServiceAccount", subjects)
	}
	// Writing EnvoyPatchPolicies: a ClusterRole bound in the Gateways'
	// namespace only, never cluster-wide.
	if w := manifests.Find(objs, "ClusterRole", "stickydrain-controller-envoy-patch-policies"); w == nil || !strings.Contains(fmt.Sprint(w.Object["rules"]), "create") {
		t.Errorf("no ClusterRole stickydrain-controller-envoy-patch-policies that creates EnvoyPatchPolicies")
	}
	if strings.Contains(fmt.Sprint(role.Object["rules"]), "create") {
		t.Errorf("the cluster-wide role writes: %v", role.Object["rules"])
	}
	rb := manifests.Find(objs, "RoleBinding", "stickydrain-controller-envoy-patch-policies")
	if rb == nil || rb.GetNamespace() != "gateways" {
		t.Errorf("no RoleBinding of the write role in the Gateways' namespace: %v", rb)
	}
	for _, o := range objs {
		if o.GetKind() == "ClusterRoleBinding" && strings.Contains(fmt.Sprint(o.Object["roleRef"]), "envoy-patch-policies") {
			t.Errorf("ClusterRoleBinding %s binds the write role cluster-wide", o.GetName())
		}
	}
	if len(objs) != len(render(t, manifests.Dir("default")))+4 {
		t.Errorf("the component adds more than its four objects")
	}
}

// The priority-class component adds the PriorityClass and runs both
// Deployments at it; the install alone creates none.
func TestThePriorityClassComponentRunsBothDeploymentsAtIt(t *testing.T) {
	objs := renderWithComponent(t, "priority-class")
	pc := manifests.Find(objs, "PriorityClass", "stickydrain-critical")
	if pc == nil {
		t.Fatalf("the component adds no PriorityClass: %v", kinds(objs))
	}
	if v, _, _ := unstructured.NestedInt64(pc.Object, "value"); v != 1000000 || pc.GetLabels()["app.kubernetes.io/part-of"] != "stickydrain" {
		t.Errorf("PriorityClass value %d, labels %v", v, pc.GetLabels())
	}
	for _, name := range []string{"stickydrain-webhook", "stickydrain-controller"} {
		d := manifests.Find(objs, "Deployment", name)
		if got, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "priorityClassName"); got != "stickydrain-critical" {
			t.Errorf("%s: priorityClassName %q, want stickydrain-critical", name, got)
		}
	}
	for _, o := range render(t, manifests.Dir("default")) {
		if o.GetKind() == "PriorityClass" {
			t.Errorf("the install alone creates PriorityClass %s", o.GetName())
		}
	}
}

// renderWithComponent renders manifests/default with the component in
// manifests/<component>, through an overlay as a user writes it.
func renderWithComponent(t *testing.T, component string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Rel(dir, manifests.Dir("default"))
	if err != nil {
		t.Fatal(err)
	}
	comp, err := filepath.Rel(dir, manifests.Dir(component))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), fmt.Appendf(nil, "resources:\n  - %s\ncomponents:\n  - %s\n", base, comp), 0o644); err != nil {
		t.Fatal(err)
	}
	return render(t, dir)
}
