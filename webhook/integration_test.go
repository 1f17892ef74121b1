package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/certs"
	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/framework"
	"github.com/stickydrain/stickydrain/test/must"
	"github.com/stickydrain/stickydrain/test/podhost"
	"github.com/stickydrain/stickydrain/test/sessionapp"
	"github.com/stickydrain/stickydrain/test/testbin"
)

const drainctlImage = "ghcr.io/stickydrain/drainctl:test"

var bins = testbin.New()

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Close()
	os.Exit(code)
}

// startWebhook runs the real webhook binary with its real flags, a
// certificate from certs/ and the shipped RBAC (as its ServiceAccount), and
// waits until it is ready.
func startWebhook(t *testing.T, c *cluster.Cluster, extra ...string) (port, metricsPort int, caPEM []byte, certDir string) {
	t.Helper()
	bin, err := bins.Build("github.com/stickydrain/stickydrain/webhook")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kubeconfig, err := framework.ServiceAccount(ctx, c, "webhook")
	if err != nil {
		t.Fatal(err)
	}
	w, err := framework.StartWebhook(ctx, bin, kubeconfig, t.TempDir(), drainctlImage, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Stop()
		if t.Failed() {
			out, _ := os.ReadFile(w.Log)
			t.Logf("webhook log:\n%s", out)
		}
	})
	return w.Port, w.MetricsPort, w.CA, w.CertDir
}

// admissionEnv starts a control plane and the webhook with extra flags,
// the shipped webhook configurations pointed at it, and returns them with
// a context of 2 minutes.
func admissionEnv(t *testing.T, extra ...string) (context.Context, *cluster.Cluster) {
	t.Helper()
	c := cluster.StartT(t, cluster.Options{})
	port, _, ca, _ := startWebhook(t, c, extra...)
	installWebhookConfigurations(t, c, port, ca)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, c
}

// installWebhookConfigurations applies manifests/webhook as shipped, with
// each clientConfig pointed at the webhook under test.
func installWebhookConfigurations(t *testing.T, c *cluster.Cluster, port int, ca []byte) {
	t.Helper()
	if err := framework.InstallWebhookConfigurations(context.Background(), c, fmt.Sprintf("https://127.0.0.1:%d", port), ca); err != nil {
		t.Fatal(err)
	}
}

// optedIn labels a pod template in: a DaemonSet's pods are out of a
// Namespace opt-in's default scope.
func optedIn(tpl corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	tpl.Labels[api.OptInLabel] = api.LabelEnabled
	return tpl
}

func sessionDeployment(ns, name string, annotations map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "sessionapp",
					Args:  []string{"--listen=:8080", "--pod=$(POD_NAME)"},
					Env:   []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
				}}},
			},
		},
	}
}

func TestWebhookInjectsTheDrainThroughTheAPIServer(t *testing.T) {
	c := cluster.StartT(t, cluster.Options{})
	port, metricsPort, ca, certDir := startWebhook(t, c)
	installWebhookConfigurations(t, c, port, ca)
	// The admission endpoint speaks HTTP/1.1 only (HTTP/2 off, as shipped).
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p == "h2" {
		t.Errorf("the webhook server negotiated %q with a client offering h2; want HTTP/2 off", p)
	}
	conn.Close()
	drainctl, err := bins.Build("github.com/stickydrain/stickydrain/drainctl")
	if err != nil {
		t.Fatal(err)
	}
	app, err := bins.Build("github.com/stickydrain/stickydrain/test/sessionapp/cmd/sessionapp")
	if err != nil {
		t.Fatal(err)
	}
	host := podhost.StartT(t, podhost.Options{
		Clientset: c.Clientset, Nodes: c.Nodes, Log: t.Logf,
		Images: map[string]string{"sessionapp": app, drainctlImage: drainctl},
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := c.Client
	must.OK(t, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "shop", Labels: map[string]string{api.OptInLabel: api.LabelEnabled},
		// Namespace-wide defaults, which the pods' annotations override.
		Annotations: map[string]string{api.AnnotationMaxWait: "2h", api.AnnotationInterval: "200ms"},
	}}))
	must.OK(t, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}))

	// The apiserver takes a moment to see new webhook configurations: wait
	// until a dry-run pod comes back mutated.
	must.Eventually(t, ctx, 200*time.Millisecond, "the webhook configuration in effect", func() bool {
		// A bare pod: only its own label opts it in.
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: "shop", Labels: map[string]string{api.OptInLabel: api.LabelEnabled}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "sessionapp"}}}}
		if err := k.Create(ctx, p, client.DryRunAll); err != nil {
			return false
		}
		return p.Annotations[api.AnnotationStatus] == api.StatusInjected
	})

	// A bad annotation is refused at apply, naming the annotation and the
	// form, for every kind of workload.
	ss := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "shop"}, Spec: appsv1.StatefulSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "bad"}},
		Template: sessionDeployment("shop", "bad", map[string]string{api.AnnotationDrainctl: "sidecar"}).Spec.Template}}
	if err := k.Create(ctx, ss); err == nil || !strings.Contains(err.Error(), `annotation stickydrain.io/drainctl="sidecar"`) {
		t.Fatalf("bad StatefulSet: error %v", err)
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "shop"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "bad"}},
		Template: optedIn(sessionDeployment("shop", "bad", map[string]string{api.AnnotationContainer: "nope"}).Spec.Template)}}
	if err := k.Create(ctx, ds); err == nil || !strings.Contains(err.Error(), `annotation stickydrain.io/container="nope"`) {
		t.Fatalf("bad DaemonSet: error %v", err)
	}
	err = k.Create(ctx, sessionDeployment("shop", "bad", map[string]string{api.AnnotationMaxWait: "12"}))
	if err == nil || !strings.Contains(err.Error(), `annotation stickydrain.io/max-wait: "12" is not a duration; want a number with a unit`) {
		t.Fatalf("bad Deployment: error %v, want the max-wait message", err)
	}
	// So is a bare pod with the same mistake, by the mutating webhook.
	err = k.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "shop",
		Labels:      map[string]string{api.OptInLabel: api.LabelEnabled},
		Annotations: map[string]string{api.AnnotationFormat: "xml"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "sessionapp"}}}})
	if err == nil || !strings.Contains(err.Error(), `annotation stickydrain.io/format: "xml" is not one of`) {
		t.Fatalf("bad pod: error %v, want the format message", err)
	}
	// Outside opted-in namespaces, nothing is touched.
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "plain"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "sessionapp"}}}}
	must.OK(t, k.Create(ctx, plain, client.DryRunAll))
	if plain.Spec.Containers[0].Lifecycle != nil || len(plain.Spec.InitContainers) != 0 {
		t.Error("a pod outside opted-in namespaces was mutated")
	}

	// Outside opted-in namespaces the validating webhook receives only the
	// workloads whose template opts in (a matchCondition): such a one with
	// a mistake is refused at apply; any other is never sent to it.
	optedInPlain := sessionDeployment("plain", "opted", map[string]string{api.AnnotationMaxWait: "12"})
	optedInPlain.Spec.Template = optedIn(optedInPlain.Spec.Template)
	must.Eventually(t, ctx, 200*time.Millisecond, "a template-opted-in Deployment with a mistake refused outside opted-in namespaces", func() bool {
		err := k.Create(ctx, optedInPlain.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), `annotation stickydrain.io/max-wait: "12" is not a duration`)
	})
	must.OK(t, k.Create(ctx, sessionDeployment("plain", "other", map[string]string{api.AnnotationMaxWait: "12"}), client.DryRunAll))
	if m := scrape(t, c, metricsPort); strings.Contains(m, `reason="not-opted-in",result="allowed",webhook="validate-deployment"`) {
		t.Errorf("the validating webhook received a Deployment that does not opt in:\n%s", m)
	}

	// A Deployment's pod, made by the real ReplicaSet controller, is stored
	// mutated.
	must.OK(t, k.Create(ctx, sessionDeployment("shop", "web", map[string]string{
		api.AnnotationURL: "http://localhost:8080/sessions", api.AnnotationFormat: "number",
		api.AnnotationMinWait: "1s", api.AnnotationMaxWait: "60s",
	})))
	var pod corev1.Pod
	must.Eventually(t, ctx, 200*time.Millisecond, "the Deployment's pod running and ready", func() bool {
		var pods corev1.PodList
		if err := k.List(ctx, &pods, client.InNamespace("shop"), client.MatchingLabels{"app": "web"}); err != nil || len(pods.Items) != 1 {
			return false
		}
		pod = pods.Items[0]
		for _, cnd := range pod.Status.Conditions {
			if cnd.Type == corev1.PodReady {
				return cnd.Status == corev1.ConditionTrue
			}
		}
		return false
	})
	if pod.Annotations[api.AnnotationStatus] != api.StatusInjected {
		t.Errorf("stored pod lacks %s", api.AnnotationStatus)
	}
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Image != drainctlImage {
		t.Errorf("init containers %+v", pod.Spec.InitContainers)
	}
	if g := ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, 0); g != 60+1+30 {
		t.Errorf("grace period %d, want 91 (max-wait 60s + min-wait 1s + margin 30s)", g)
	}
	cmd := strings.Join(pod.Spec.Containers[0].Lifecycle.PreStop.Exec.Command, " ")
	for _, want := range []string{"/stickydrain/bin/drainctl wait", "--interval=200ms", "--max-wait=1m0s", "--url=http://localhost:8080/sessions"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("preStop %q lacks %q", cmd, want)
		}
	}

	// Under podhost, the injected drain really runs: the init container
	// installs drainctl, and deleting the pod waits while a session lasts.
	jar, _ := cookiejar.New(nil)
	user := &http.Client{Jar: jar, Timeout: 5 * time.Second}
	base := "http://" + pod.Status.PodIP + ":8080"
	post(t, user, base+"/login?user=carol")
	must.OK(t, k.Delete(ctx, &pod))
	if _, err := host.WaitFor(ctx, "shop", pod.Name, "app", podhost.StepPreStopStarted); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // past min-wait: only carol's session holds the pod
	for _, ev := range host.Timeline("shop", pod.Name) {
		if ev.Step == podhost.StepPreStopFinished {
			t.Fatalf("the preStop ended with a session left: %s\n%s", ev, host.Logs("shop", pod.Name, "app"))
		}
	}
	post(t, user, base+"/logout")
	ev, err := host.WaitFor(ctx, "shop", pod.Name, "app", podhost.StepPreStopFinished)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ExitCode != 0 {
		t.Errorf("preStop exit %d, want 0 (drained)\n%s", ev.ExitCode, host.Logs("shop", pod.Name, "app"))
	}
	if logs := host.Logs("shop", pod.Name, "app"); !strings.Contains(logs, "draining: 1 sessions left") {
		t.Errorf("drainctl's progress is not in the container's log:\n%s", logs)
	}

	// A rotated certificate (as cert-manager renews it) is served without a
	// restart.
	rotated, err := certs.Generate(certs.Options{DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	must.OK(t, err)
	must.OK(t, rotated.WriteDir(certDir))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(rotated.CACert)
	must.Eventually(t, ctx, 200*time.Millisecond, "the rotated certificate served", func() bool {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: pool})
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})

	// The webhook counted what it did.
	metrics := scrape(t, c, metricsPort)
	for _, want := range []string{
		`stickydrain_webhook_admissions_total{reason="injected",result="allowed",webhook="mutate-pod"}`,
		`stickydrain_webhook_admissions_total{reason="invalid",result="denied",webhook="mutate-pod"}`,
		`stickydrain_webhook_admissions_total{reason="invalid",result="denied",webhook="validate-deployment"}`,
		// Errors counted from 0, before the first: a rate() sees the first.
		`stickydrain_webhook_admissions_total{reason="namespace-unreadable",result="error",webhook="mutate-pod"} 0`,
		`stickydrain_webhook_admissions_total{reason="namespace-unreadable",result="error",webhook="validate-daemonset"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func scrape(t *testing.T, c *cluster.Cluster, port int) string {
	body, err := framework.ScrapeGuarded(context.Background(), c, port)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "stickydrain_") {
			b.WriteString(sc.Text() + "\n")
		}
	}
	return b.String()
}

func post(t *testing.T, c *http.Client, url string) sessionapp.Reply {
	t.Helper()
	resp, err := c.Post(url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r sessionapp.Reply
	if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, body)
	}
	return r
}
