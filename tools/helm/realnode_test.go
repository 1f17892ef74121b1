package helm

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/install"
	"github.com/stickydrain/stickydrain/test/node"
)

// waitFor polls cond every 200 ms until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Logf("%s after %v", what, time.Since(start).Round(100*time.Millisecond))
}

// imageValues points an image's values at a reference built here.
func imageValues(ref string) map[string]any {
	repo, tag, _ := strings.Cut(ref, ":")
	return map[string]any{"repository": repo, "tag": tag}
}

// The chart as a user installs it, on the real node (kubelet, containerd,
// runc): cert-manager issues the webhook's certificate and injects the CA;
// `helm install` runs the webhook and the controller from the images built
// here, with drainctl delivered as an image volume; an opted-in app's pods
// are injected and run. Then `helm upgrade` rolls the webhook while pods
// are created every 200 ms (server dry-run, so admission runs): none may be
// refused (failurePolicy Fail, PodDisruptionBudget, two replicas); and
// after `helm uninstall` pods are created again, none refused, and the
// running app is untouched.
func TestHelmOnTheRealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and a real node (-short)")
	}
	lock := cluster.LockRealNodeT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
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
		}
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := install.CertManager(ctx, c, imgs["cert-manager"].Ref); err != nil {
		t.Fatal(err)
	}

	// The README's commands: the namespace with its Pod Security label,
	// then helm install with the images.
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}); err != nil {
		t.Fatal(err)
	}
	ch, err := loader.Load(chartDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t, c)
	vals := map[string]any{
		"image":         imageValues(imgs["stickydrain"].Ref),
		"drainctlImage": imageValues(imgs["drainctl"].Ref),
		"webhook":       map[string]any{"drainctlDelivery": "image-volume"},
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = release, namespace
	inst.WaitStrategy = kube.HookOnlyStrategy
	if _, err := inst.RunWithContext(ctx, ch, vals); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	for _, d := range []string{"stickydrain-webhook", "stickydrain-controller"} {
		if err := install.WaitAvailable(ctx, c, namespace, d); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "the CA injected into the mutating webhooks", func() bool {
		var m admissionv1.MutatingWebhookConfiguration
		if c.Client.Get(ctx, client.ObjectKey{Name: "stickydrain"}, &m) != nil {
			return false
		}
		for _, w := range m.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				return false
			}
		}
		return true
	})

	// An opted-in app: its pods get drainctl as an image volume and run.
	const app = "shop"
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: app,
		Labels: map[string]string{"stickydrain.io/drain": "enabled"},
		Annotations: map[string]string{"stickydrain.io/url": "http://localhost:8080/sessions", "stickydrain.io/format": "number",
			"stickydrain.io/min-wait": "1s", "stickydrain.io/max-wait": "2m"}}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	if err := c.Client.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "app", Image: imgs["sessionapp"].Ref, Args: []string{"--listen=:8080", "--pod=web"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			}}}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := install.WaitAvailable(ctx, c, app, "web"); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace(app), client.MatchingLabels(labels)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		vol := false
		for _, v := range p.Spec.Volumes {
			vol = vol || (v.Image != nil && v.Image.Reference == imgs["drainctl"].Ref)
		}
		if !vol || len(p.Spec.InitContainers) != 0 || p.Annotations["stickydrain.io/status"] != "injected" {
			t.Errorf("%s: want injected with the drainctl image as a volume and no init container: %v, volumes %+v", p.Name, p.Annotations, p.Spec.Volumes)
		}
	}

	// Pods created every 200 ms (server dry-run) while fn runs and for
	// settle after: how many were admitted, how many refused.
	createWhile := func(what string, wantInjected bool, settle time.Duration, fn func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); fn() }()
		var created, refused int
		var doneAt time.Time
		for i := 0; ; i++ {
			select {
			case <-done:
				if doneAt.IsZero() {
					doneAt = time.Now()
				}
			default:
			}
			if !doneAt.IsZero() && time.Since(doneAt) > settle {
				break
			}
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: fmt.Sprintf("%s-%d", what, i), Labels: map[string]string{"stickydrain.io/drain": "enabled"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: imgs["sessionapp"].Ref}}},
			}
			if err := c.Client.Create(ctx, p, client.DryRunAll); err != nil {
				refused++
				t.Errorf("%s: pod creation refused: %v", what, err)
			} else {
				created++
				if got := p.Annotations["stickydrain.io/status"] == "injected"; wantInjected && !got {
					t.Errorf("%s: pod %s not injected", what, p.Name)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("%s: %d pods created, %d refused", what, created, refused)
		if created < 10 {
			t.Errorf("%s: only %d pods tried", what, created+refused)
		}
	}

	// helm upgrade that rolls the webhook (a new pod template), under pod
	// creation: the PodDisruptionBudget and the rolling update keep one
	// replica serving.
	createWhile("upgrade", true, 3*time.Second, func() {
		up := action.NewUpgrade(cfg)
		up.Namespace = namespace
		up.WaitStrategy = kube.HookOnlyStrategy
		vals["webhook"] = map[string]any{"drainctlDelivery": "image-volume", "resources": map[string]any{
			"requests": map[string]any{"cpu": "60m", "memory": "64Mi"}, "limits": map[string]any{"memory": "256Mi"}}}
		if _, err := up.RunWithContext(ctx, release, ch, vals); err != nil {
			t.Errorf("helm upgrade: %v", err)
			return
		}
		var d appsv1.Deployment
		waitFor(t, ctx, "the webhook rolled to the upgraded template", func() bool {
			if c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "stickydrain-webhook"}, &d) != nil {
				return false
			}
			return d.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String() == "60m" &&
				d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == 2 && d.Status.AvailableReplicas == 2 && d.Status.Replicas == 2
		})
	})

	// helm uninstall: the webhook configurations go with the release, so
	// pod creation in the opted-in namespace goes on (uninjected).
	createWhile("uninstall", false, 5*time.Second, func() {
		un := action.NewUninstall(cfg)
		un.WaitStrategy = kube.HookOnlyStrategy
		if _, err := un.Run(release); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	})
	var m admissionv1.MutatingWebhookConfiguration
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "stickydrain"}, &m); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall the mutating webhook configuration is still there: %v", err)
	}
	// The running app is untouched.
	if err := install.WaitAvailable(ctx, c, app, "web"); err != nil {
		t.Fatal(err)
	}
}
