package helm

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/registry"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/install"
	"github.com/stickydrain/stickydrain/test/must"
	"github.com/stickydrain/stickydrain/test/node"
	testregistry "github.com/stickydrain/stickydrain/test/registry"
	"github.com/stickydrain/stickydrain/tools/helm/chartrelease"
)

// imageValues points an image's values at a reference pushed by digest
// (registry/path/name:tag@sha256:…).
func imageValues(ref string) map[string]any {
	repoTag, digest, _ := strings.Cut(ref, "@")
	i := strings.LastIndex(repoTag, ":")
	return map[string]any{"repository": repoTag[:i], "tag": repoTag[i+1:], "digest": digest}
}

// previousChart is the chart version the upgrade starts from (testdata).
const previousChart = "0.1.0-main.1d89764"

// publish does what a release does, against the registry reg: pushes
// the images stickydrain and drainctl from the layouts make test-images
// wrote beside their tarballs (tools/images push, by digest), pins this
// checkout's chart to those digests, and pushes it and the previous
// chart (testdata) to oci://HOST/stickydrain/charts. It returns the
// images' references, each registry/path/name:tag@digest.
func publish(t *testing.T, ctx context.Context, imgs map[string]node.Image, reg *testregistry.Registry, rc *registry.Client) map[string]string {
	t.Helper()
	repo := reg.Host + "/stickydrain"
	refs, err := reg.Push(ctx, filepath.Dir(imgs["stickydrain"].Tarball), "stickydrain", "drainctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pushed %s and %s", refs["stickydrain"], refs["drainctl"])
	// The chart pinned to them as a release pins it (tools/release/release.sh
	// through cmd/stickydrain-chart): in its values.yaml, so that it
	// installs them with no values given.
	ch, err := loader.Load(chartDir())
	if err != nil {
		t.Fatal(err)
	}
	pins := map[string]chartrelease.Image{}
	for name, ref := range refs {
		if pins[name], err = chartrelease.ParseImage(ref); err != nil {
			t.Fatal(err)
		}
	}
	if err := chartrelease.Pin(ch, ch.Metadata.Version, ch.Metadata.AppVersion, pins); err != nil {
		t.Fatal(err)
	}
	current, err := chartrelease.Package(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tgz := range []string{current, filepath.Join("testdata", "stickydrain-"+previousChart+".tgz")} {
		if _, err := chartrelease.Push(rc, tgz, repo+"/charts"); err != nil {
			t.Fatal(err)
		}
	}
	return refs
}

// fromRegistry loads the chart version pushed to oci://host/stickydrain/charts.
func fromRegistry(t *testing.T, host, version string, rc *registry.Client) *chart.Chart {
	t.Helper()
	// An Install's ChartPathOptions carry the registry client (as helm
	// install oci://… --version … --plain-http does).
	opts := action.NewInstall(&action.Configuration{RegistryClient: rc})
	opts.Version, opts.PlainHTTP = version, true
	settings := cli.New()
	settings.RepositoryCache, settings.ContentCache = t.TempDir(), t.TempDir()
	path, err := opts.LocateChart("oci://"+host+"/stickydrain/charts/stickydrain", settings)
	if err != nil {
		t.Fatalf("helm pull oci://%s/stickydrain/charts/stickydrain --version %s: %v", host, version, err)
	}
	ch, err := loader.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// The chart as a user installs it from a registry, on the real node
// (kubelet, containerd, runc): the images and the chart pushed to a
// Distribution registry as a release pushes them, the chart pinned to the
// images' digests, and containerd pulling them from it. cert-manager
// issues the webhook's certificate and injects the CA. The previous chart
// version is installed from the registry, then `helm upgrade` to this
// one, then `helm rollback` to it, each while pods are created every
// 200 ms (server dry-run, so admission runs): none may be refused
// (failurePolicy Fail, PodDisruptionBudget, two replicas). An opted-in
// app's pods are injected throughout, with drainctl delivered as an image
// volume. After `helm uninstall` pods are created again, none refused, and
// the running app is untouched.
func TestHelmOnTheRealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and a real node (-short)")
	}
	lock := cluster.LockRealNodeT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	imgs, err := node.BuildImages(ctx, t.TempDir(), t.Logf, "pause", "sessionapp", "drainctl", "stickydrain", "cert-manager")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := testregistry.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	rc, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	refs := publish(t, ctx, imgs, reg, rc)
	ch, err := loader.Load(chartDir())
	if err != nil {
		t.Fatal(err)
	}
	c := cluster.StartT(t, cluster.Options{RealNode: true, RealNodeLock: lock})
	// Only what is not stickydrain's is imported: its two images come
	// from the registry.
	var tars []string
	for _, name := range []string{"pause", "sessionapp", "cert-manager"} {
		tars = append(tars, imgs[name].Tarball)
	}
	n, err := node.Start(ctx, node.Options{Cluster: c, Log: t.Logf, Images: tars, SandboxImage: imgs["pause"].Ref, Registries: []string{reg.Host}})
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
	// then helm install from the registry, here the previous version.
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}); err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t, c)
	cfg.RegistryClient = rc
	vals := map[string]any{
		"image":         imageValues(refs["stickydrain"]),
		"drainctlImage": imageValues(refs["drainctl"]),
		"webhook":       map[string]any{"drainctlDelivery": "image-volume"},
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = release, namespace
	inst.WaitStrategy = kube.HookOnlyStrategy
	if _, err := inst.RunWithContext(ctx, fromRegistry(t, reg.Host, previousChart, rc), vals); err != nil {
		t.Fatalf("helm install --version %s: %v", previousChart, err)
	}
	for _, d := range []string{"stickydrain-webhook", "stickydrain-controller"} {
		if err := install.WaitAvailable(ctx, c, namespace, d); err != nil {
			t.Fatal(err)
		}
	}
	// containerd pulled both images from the registry, by digest.
	var running corev1.PodList
	if err := c.Client.List(ctx, &running, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	for _, p := range running.Items {
		for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if !strings.HasPrefix(st.ImageID, reg.Host+"/stickydrain/") || !strings.Contains(st.ImageID, "@sha256:") {
				t.Errorf("%s/%s runs image %s (%s), want one pulled from the registry %s by digest", p.Name, st.Name, st.Image, st.ImageID, reg.Host)
			}
		}
	}
	must.Eventually(t, ctx, 200*time.Millisecond, "the CA injected into the mutating webhooks", func() bool {
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
			vol = vol || (v.Image != nil && v.Image.Reference == refs["drainctl"])
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

	// helm upgrade from the previous version to this one, from the
	// registry: it rolls both Deployments (a new pod template) and changes
	// the webhook configurations, under pod creation; the
	// PodDisruptionBudget and the rolling update keep one replica serving.
	webhookRolled := func(what string, cond func(d *appsv1.Deployment) bool) {
		var d appsv1.Deployment
		must.Eventually(t, ctx, 200*time.Millisecond, what, func() bool {
			if c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "stickydrain-webhook"}, &d) != nil {
				return false
			}
			return cond(&d) && d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == 2 && d.Status.AvailableReplicas == 2 && d.Status.Replicas == 2
		})
	}
	createWhile("upgrade", true, 3*time.Second, func() {
		up := action.NewUpgrade(cfg)
		up.Namespace = namespace
		up.WaitStrategy = kube.HookOnlyStrategy
		// No image values: the chart pushed pins its images itself.
		upVals := map[string]any{"webhook": map[string]any{"drainctlDelivery": "image-volume", "resources": map[string]any{
			"requests": map[string]any{"cpu": "60m", "memory": "64Mi"}, "limits": map[string]any{"memory": "256Mi"}}}}
		if _, err := up.RunWithContext(ctx, release, fromRegistry(t, reg.Host, ch.Metadata.Version, rc), upVals); err != nil {
			t.Errorf("helm upgrade --version %s: %v", ch.Metadata.Version, err)
			return
		}
		webhookRolled("the webhook rolled to the upgraded chart", func(d *appsv1.Deployment) bool {
			return d.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String() == "60m" && d.Spec.Template.Spec.PriorityClassName == ""
		})
		var d appsv1.Deployment
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "stickydrain-webhook"}, &d); err != nil {
			t.Error(err)
		} else if img := d.Spec.Template.Spec.Containers[0].Image; img != refs["stickydrain"] {
			t.Errorf("the upgraded chart runs the webhook from %s, want the image it pins, %s", img, refs["stickydrain"])
		}
	})
	var m admissionv1.MutatingWebhookConfiguration
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "stickydrain"}, &m); err != nil || len(m.Webhooks) == 0 || len(m.Webhooks[0].MatchConditions) == 0 {
		t.Errorf("after the upgrade the opted-in entry has no matchConditions: %v", err)
	}

	// helm rollback to the previous version, under pod creation.
	createWhile("rollback", true, 3*time.Second, func() {
		rb := action.NewRollback(cfg)
		rb.Version = 1
		rb.WaitStrategy = kube.HookOnlyStrategy
		if err := rb.Run(release); err != nil {
			t.Errorf("helm rollback %s 1: %v", release, err)
			return
		}
		webhookRolled("the webhook rolled back to the previous chart", func(d *appsv1.Deployment) bool {
			return d.Spec.Template.Spec.PriorityClassName == "stickydrain-critical"
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
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "stickydrain"}, &m); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall the mutating webhook configuration is still there: %v", err)
	}
	// The running app is untouched.
	if err := install.WaitAvailable(ctx, c, app, "web"); err != nil {
		t.Fatal(err)
	}
}
