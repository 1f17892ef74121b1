package install_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/install"
	"github.com/stickydrain/stickydrain/test/must"
	"github.com/stickydrain/stickydrain/test/node"
)

const (
	system = install.Namespace
	appNS  = "shop"
)

// env is the installed cluster.
type env struct {
	c    *cluster.Cluster
	n    *node.Node
	imgs map[string]node.Image
}

// realNode skips under -short, then waits for the machine's real node
// (before the test's clock starts: other packages' tests may hold it).
func realNode(t *testing.T) *cluster.RealNodeLock {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a control plane and a real node (-short)")
	}
	return cluster.LockRealNodeT(t)
}

func start(t *testing.T, ctx context.Context, lock *cluster.RealNodeLock) *env {
	t.Helper()
	imgs, err := node.BuildImages(ctx, t.TempDir(), t.Logf, "pause", "sessionapp", "drainctl", "stickydrain", "cert-manager")
	if err != nil {
		t.Fatal(err)
	}
	c := cluster.StartT(t, cluster.Options{RealNode: true, RealNodeLock: lock})
	var tars []string
	for _, i := range imgs {
		tars = append(tars, i.Tarball)
	}
	sort.Strings(tars)
	n, err := node.Start(ctx, node.Options{Cluster: c, Log: t.Logf, Images: tars, SandboxImage: imgs["pause"].Ref})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(n.Logs(40))
			dumpPods(t, c)
		}
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
	})
	return &env{c: c, n: n, imgs: imgs}
}

// TestInstallOnTheRealNode: cert-manager issues the webhook's certificate
// and injects its CA into both webhook configurations; manifests/default
// runs the webhook (two replicas) and the controller from the stickydrain
// image; the API server calls the webhook through its Service; an
// opted-in app whose image has no shell gets drainctl from the drainctl
// image and its preStop runs on the kubelet; a pod with a native sidecar
// and a Secret volume is injected and drained the same way; and with one
// webhook pod deleted in the middle of a rollout, every new pod is still
// injected (the other replica answers; failurePolicy Fail would refuse the
// pods if none did), and the new pods take drainctl as an image volume
// (stickydrain.io/drainctl: image-volume) and drain with it; the
// webhook's certificate renewed while pods are created refuses none.
func TestInstallOnTheRealNode(t *testing.T) {
	lock := realNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e := start(t, ctx, lock)

	if err := install.CertManager(ctx, e.c, e.imgs["cert-manager"].Ref); err != nil {
		t.Fatal(err)
	}
	if err := install.Stickydrain(ctx, e.c, install.Refs(e.imgs), ""); err != nil {
		t.Fatal(err)
	}

	// The certificate cert-manager issued, and its CA in both webhook
	// configurations (cainjector).
	var secret corev1.Secret
	must.Eventually(t, ctx, 300*time.Millisecond, "cert-manager to issue stickydrain-webhook-tls", func() bool {
		return e.c.Client.Get(ctx, types.NamespacedName{Namespace: system, Name: "stickydrain-webhook-tls"}, &secret) == nil && len(secret.Data["tls.crt"]) > 0
	})
	ca := secret.Data["ca.crt"]
	if len(ca) == 0 {
		t.Fatalf("the issued Secret has no ca.crt: %v", keys(secret.Data))
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "the CA injected into both webhook configurations", func() bool {
		var m admissionv1.MutatingWebhookConfigurationList
		var v admissionv1.ValidatingWebhookConfigurationList
		if e.c.Client.List(ctx, &m) != nil || e.c.Client.List(ctx, &v) != nil || len(m.Items) == 0 || len(v.Items) == 0 {
			return false
		}
		for _, c := range m.Items {
			for _, w := range c.Webhooks {
				if string(w.ClientConfig.CABundle) != string(ca) {
					return false
				}
			}
		}
		for _, c := range v.Items {
			for _, w := range c.Webhooks {
				if string(w.ClientConfig.CABundle) != string(ca) {
					return false
				}
			}
		}
		return true
	})

	// An opted-in app from an image without a shell.
	e.deployApp(t, ctx, "web", false, nil)
	waitAvailable(t, ctx, e.c, "web")
	e.assertInjected(t, ctx, "web")

	// The webhook's certificate renewed under pod creation: none refused.
	e.renewUnderPodCreation(t, ctx)

	// One webhook pod deleted, and at once a rollout: the other replica
	// answers, every new pod is injected.
	var hooks corev1.PodList
	if err := e.c.Client.List(ctx, &hooks, client.InNamespace(system), client.MatchingLabels{"app.kubernetes.io/name": "stickydrain-webhook"}); err != nil || len(hooks.Items) != 2 {
		t.Fatalf("webhook pods: %v, %d", err, len(hooks.Items))
	}
	if err := e.c.Client.Delete(ctx, &hooks.Items[0]); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted webhook pod %s; rolling the app", hooks.Items[0].Name)
	var d appsv1.Deployment
	if err := e.c.Client.Get(ctx, types.NamespacedName{Namespace: appNS, Name: "web"}, &d); err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.Containers[0].Args = append(d.Spec.Template.Spec.Containers[0].Args, "--version=v2")
	// v2 takes drainctl as an image volume (containerd 2.4 and kubelet 1.37
	// mount the drainctl image read-only; no init container): the drain
	// below then runs drainctl from it.
	if d.Spec.Template.Annotations == nil {
		d.Spec.Template.Annotations = map[string]string{}
	}
	d.Spec.Template.Annotations["stickydrain.io/drainctl"] = "image-volume"
	if err := e.c.Client.Update(ctx, &d); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "the rollout to v2", func() bool {
		var pods corev1.PodList
		if e.c.Client.List(ctx, &pods, client.InNamespace(appNS), client.MatchingLabels{"app": "web"}) != nil {
			return false
		}
		n := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || !strings.Contains(strings.Join(p.Spec.Containers[0].Args, " "), "--version=v2") || !ready(&p) {
				return false
			}
			n++
		}
		return n == 2
	})
	e.assertInjected(t, ctx, "web")
	var events corev1.EventList
	if err := e.c.Client.List(ctx, &events, client.InNamespace(appNS)); err == nil {
		for _, ev := range events.Items {
			if ev.Reason == "FailedCreate" {
				t.Errorf("a pod was refused during the rollout: %s", ev.Message)
			}
		}
	}

	// A native sidecar and a Secret volume: what podhost cannot run.
	e.deployApp(t, ctx, "sidecar", true, nil)
	waitAvailable(t, ctx, e.c, "sidecar")
	e.assertInjected(t, ctx, "sidecar")

	// Each app's pods drain on the kubelet: the preStop hook (drainctl wait,
	// no sessions: it returns after min-wait) ran to its end and SIGTERM
	// followed with the grace period's rest.
	for _, app := range []string{"web", "sidecar"} {
		p := e.onePod(t, ctx, app)
		h := e.deleteAndReadPreStop(t, ctx, p)
		took := h.Ended.Sub(h.Started)
		t.Logf("%s (drainctl %s): the kubelet ran preStop for %v, then SIGTERM with %d s of grace left", p.Name, delivery(&p), took.Round(time.Millisecond), h.GracePeriod)
		if !h.Completed || h.Failed {
			t.Errorf("%s: preStop completed=%v failed=%v, want it to end well", p.Name, h.Completed, h.Failed)
		}
		if took < 3*time.Second-100*time.Millisecond || took > 15*time.Second {
			t.Errorf("%s: preStop took %v, want about min-wait (3s)", p.Name, took)
		}
		if grace := ptr.Deref(p.Spec.TerminationGracePeriodSeconds, 0); h.GracePeriod < 2 || h.GracePeriod > grace {
			t.Errorf("%s: SIGTERM with %d s of grace left of %d", p.Name, h.GracePeriod, grace)
		}
	}
	e.drainCutShort(t, ctx)
}

// A drain cut short: a pod whose session never ends, with a max-wait of
// 4 s. drainctl exits 3 at max-wait; the kubelet records the failed hook
// as a FailedPreStopHook Event — whose message is only "PreStopHook
// failed" (the kubelet keeps a hook's output out of Events) — and writes
// drainctl's summary, the reason, into its own log; then SIGTERM.
func (e *env) drainCutShort(t *testing.T, ctx context.Context) {
	e.deployApp(t, ctx, "stuck", false, map[string]string{"stickydrain.io/max-wait": "4s"})
	waitAvailable(t, ctx, e.c, "stuck")
	p := e.onePod(t, ctx, "stuck")
	resp, err := http.Post("http://"+net.JoinHostPort(p.Status.PodIP, "8080")+"/login?user=never-leaves", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := e.deleteAndReadPreStop(t, ctx, p)
	took := h.Ended.Sub(h.Started)
	t.Logf("%s: preStop ran %v, failed %v, then SIGTERM with %d s of grace left; the kubelet logged its output %q", p.Name, took.Round(time.Millisecond), h.Failed, h.GracePeriod, h.Output)
	if !h.Failed || took < 4*time.Second-100*time.Millisecond || took > 15*time.Second {
		t.Errorf("%s: preStop failed=%v after %v; want it to fail at max-wait (4s), a session still open", p.Name, h.Failed, took)
	}
	if !strings.Contains(h.Output, "drainctl: max-wait reached") || !strings.Contains(h.Output, "last count 1") {
		t.Errorf("%s: the hook's output as the kubelet logged it is %q; want drainctl's summary (max-wait reached, last count 1)", p.Name, h.Output)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "the FailedPreStopHook Event", func() bool {
		var events corev1.EventList
		if err := e.c.Client.List(ctx, &events, client.InNamespace(appNS)); err != nil {
			return false
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name == p.Name && ev.Reason == "FailedPreStopHook" {
				t.Logf("%s: Event %s %q", p.Name, ev.Reason, ev.Message)
				return true
			}
		}
		return false
	})
}

// onePod is a pod of app.
func (e *env) onePod(t *testing.T, ctx context.Context, app string) corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := e.c.Client.List(ctx, &pods, client.InNamespace(appNS), client.MatchingLabels{"app": app}); err != nil || len(pods.Items) == 0 {
		t.Fatalf("%s pods: %v", app, err)
	}
	return pods.Items[0]
}

// deleteAndReadPreStop deletes p and returns its app container's preStop
// hook as the kubelet recorded it, once the SIGTERM followed.
func (e *env) deleteAndReadPreStop(t *testing.T, ctx context.Context, p corev1.Pod) node.Hook {
	t.Helper()
	if err := e.c.Client.Delete(ctx, &p); err != nil {
		t.Fatal(err)
	}
	h, err := e.n.PreStop(ctx, appNS, p.Name, "app")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// deployApp opts the namespace in (once) and deploys two replicas of the
// session app, its pods annotated with annotations; withSidecar adds a
// native sidecar (an init container that keeps running) and a Secret
// volume.
func (e *env) deployApp(t *testing.T, ctx context.Context, name string, withSidecar bool, annotations map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   appNS,
		Labels: map[string]string{"stickydrain.io/drain": "enabled"},
		Annotations: map[string]string{
			"stickydrain.io/url": "http://localhost:8080/sessions", "stickydrain.io/format": "number",
			"stickydrain.io/interval": "1s", "stickydrain.io/min-wait": "3s", "stickydrain.io/max-wait": "5m",
		},
	}}
	if err := e.c.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	labels := map[string]string{"app": name}
	spec := corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app", Image: e.imgs["sessionapp"].Ref,
		Args:           []string{"--listen=:8080", "--pod=$(POD_NAME)"},
		Env:            []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intOrString("http")}}},
	}}}
	if withSidecar {
		if err := e.c.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-secret", Namespace: appNS}, StringData: map[string]string{"password": "s3cret"}}); err != nil {
			t.Fatal(err)
		}
		spec.InitContainers = []corev1.Container{{
			Name: "proxy", Image: e.imgs["sessionapp"].Ref, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Args: []string{"--listen=:9090", "--pod=sidecar"},
		}}
		spec.Volumes = []corev1.Volume{{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "app-secret"}}}}
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "secret", MountPath: "/etc/app", ReadOnly: true}}
	}
	if err := e.c.Client.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations}, Spec: spec},
		},
	}); err != nil {
		t.Fatal(err)
	}
}

// assertInjected checks every running pod of app: the init container from
// the drainctl image ran to exit 0, the app container has the preStop
// drainctl wait, the grace period covers max-wait, and the sidecar (if
// any) is left alone and running.
func (e *env) assertInjected(t *testing.T, ctx context.Context, app string) {
	t.Helper()
	var pods corev1.PodList
	if err := e.c.Client.List(ctx, &pods, client.InNamespace(appNS), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Annotations["stickydrain.io/drainctl"] == "image-volume" {
			var vol *corev1.Volume
			for i, v := range p.Spec.Volumes {
				if v.Image != nil && v.Image.Reference == e.imgs["drainctl"].Ref {
					vol = &p.Spec.Volumes[i]
				}
			}
			if vol == nil {
				t.Errorf("%s: no image volume of %s: %+v", p.Name, e.imgs["drainctl"].Ref, p.Spec.Volumes)
			}
			for _, c := range p.Spec.InitContainers {
				if c.Image == e.imgs["drainctl"].Ref {
					t.Errorf("%s: an image volume and an init container %s", p.Name, c.Name)
				}
			}
			if !ready(&p) {
				t.Errorf("%s: with drainctl as an image volume, not ready: %+v", p.Name, p.Status.Conditions)
			}
		} else {
			var installer *corev1.Container
			for i, c := range p.Spec.InitContainers {
				if c.Image == e.imgs["drainctl"].Ref {
					installer = &p.Spec.InitContainers[i]
				}
			}
			if installer == nil {
				t.Errorf("%s: no init container from %s", p.Name, e.imgs["drainctl"].Ref)
				continue
			}
			for _, st := range p.Status.InitContainerStatuses {
				if st.Name == installer.Name && (st.State.Terminated == nil || st.State.Terminated.ExitCode != 0) {
					t.Errorf("%s: the drainctl init container did not end with exit 0: %+v", p.Name, st.State)
				}
			}
		}
		for _, st := range p.Status.InitContainerStatuses {
			if st.Name == "proxy" && (st.Started == nil || !*st.Started) {
				t.Errorf("%s: the native sidecar is not running: %+v", p.Name, st.State)
			}
		}
		app := p.Spec.Containers[0]
		if app.Lifecycle == nil || app.Lifecycle.PreStop == nil || app.Lifecycle.PreStop.Exec == nil || !strings.Contains(strings.Join(app.Lifecycle.PreStop.Exec.Command, " "), "wait") {
			t.Errorf("%s: the app container has no drainctl wait preStop: %+v", p.Name, app.Lifecycle)
		}
		if g := ptr.Deref(p.Spec.TerminationGracePeriodSeconds, 0); g < 300 {
			t.Errorf("%s: grace period %d s, want at least max-wait (300 s)", p.Name, g)
		}
		for _, c := range p.Spec.InitContainers {
			if c.Name == "proxy" && c.Lifecycle != nil {
				t.Errorf("%s: the sidecar got a lifecycle hook: %+v", p.Name, c.Lifecycle)
			}
		}
	}
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// dumpPods logs every pod's phase and container states, for a failing test.
func dumpPods(t *testing.T, c *cluster.Cluster) {
	var pods corev1.PodList
	if err := c.Client.List(context.Background(), &pods); err != nil {
		return
	}
	for _, p := range pods.Items {
		st, _ := json.Marshal(p.Status.ContainerStatuses)
		t.Logf("pod %s/%s %s on %q: %s", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName, st)
	}
	var events corev1.EventList
	if err := c.Client.List(context.Background(), &events); err == nil {
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning {
				t.Logf("event %s/%s %s: %s", e.Namespace, e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
}

func intOrString(name string) intstr.IntOrString { return intstr.FromString(name) }

func waitAvailable(t *testing.T, ctx context.Context, c *cluster.Cluster, name string) {
	t.Helper()
	if err := install.WaitAvailable(ctx, c, appNS, name); err != nil {
		t.Fatal(err)
	}
}

// delivery says how drainctl reached the pod.
func delivery(p *corev1.Pod) string {
	for _, v := range p.Spec.Volumes {
		if v.Image != nil {
			return "from an image volume"
		}
	}
	return "copied by an init container"
}
