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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/e2e"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/install"
	"github.com/stickydrain/stickydrain/test/must"
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

// publishCharts does the chart's part of a release, against the
// registry at host where the images are already pushed (refs, each
// host/stickydrain/NAME:TAG@sha256:…): pins this checkout's chart to
// those digests as a release pins it (tools/release/release.sh through
// cmd/stickydrain-chart: in its values.yaml, so that it installs them
// with no values given), and pushes it and the previous chart (testdata)
// to oci://HOST/stickydrain/charts.
func publishCharts(host string, refs map[string]string, rc *registry.Client, dir string) error {
	ch, err := loader.Load(chartDir())
	if err != nil {
		return err
	}
	pins := map[string]chartrelease.Image{}
	for name, ref := range refs {
		var err error
		if pins[name], err = chartrelease.ParseImage(ref); err != nil {
			return err
		}
	}
	if err := chartrelease.Pin(ch, ch.Metadata.Version, ch.Metadata.AppVersion, pins); err != nil {
		return err
	}
	current, err := chartrelease.Package(ch, dir)
	if err != nil {
		return err
	}
	for _, tgz := range []string{current, filepath.Join("testdata", "stickydrain-"+previousChart+".tgz")} {
		if _, err := chartrelease.Push(rc, tgz, host+"/stickydrain/charts"); err != nil {
			return err
		}
	}
	return nil
}

// fromRegistry loads the chart version pushed to oci://host/stickydrain/charts,
// as helm install oci://… --version … --plain-http does (an Install's
// ChartPathOptions carry the registry client).
func fromRegistry(host, version string, rc *registry.Client, dir string) (*chart.Chart, error) {
	opts := action.NewInstall(&action.Configuration{RegistryClient: rc})
	opts.Version, opts.PlainHTTP = version, true
	settings := cli.New()
	settings.RepositoryCache, settings.ContentCache = filepath.Join(dir, "repository"), filepath.Join(dir, "content")
	path, err := opts.LocateChart("oci://"+host+"/stickydrain/charts/stickydrain", settings)
	if err != nil {
		return nil, fmt.Errorf("helm pull oci://%s/stickydrain/charts/stickydrain --version %s: %w", host, version, err)
	}
	return loader.Load(path)
}

// The chart as a user installs it from a registry, on the real node
// (kubelet, containerd, runc), with users holding sessions through two
// HAProxy instances outside the cluster (test/e2e's environment): the
// images and the chart pushed to a Distribution registry as a release
// pushes them, the chart pinned to the images' digests, and containerd
// pulling them from it. cert-manager issues the webhook's certificate and
// injects the CA. The previous chart version is installed from the
// registry, then `helm upgrade` to this one, then `helm rollback` to it,
// each in the middle of a rollout of the users' app and while pods are
// created every 200 ms (server dry-run, so admission runs): no pod may be
// refused (failurePolicy Fail, PodDisruptionBudget, two replicas), and no
// user may lose a session, though the controller and the webhook roll
// while the app's old pods drain. After `helm uninstall` pods are created
// again, none refused, and the running app is untouched.
func TestHelmOnTheRealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and a real node (-short)")
	}
	lock := cluster.LockRealNodeT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rc, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.Load(chartDir())
	if err != nil {
		t.Fatal(err)
	}
	var (
		cfg       *action.Configuration
		host      string
		refs      map[string]string
		ctrlCfg   map[string]any
		chartsDir = t.TempDir()
	)
	// values are what the operator gives both chart versions: the
	// controller's configuration (the HAProxy instances, the app's
	// namespace allowed onto edge/shop) and drainctl as an image volume.
	values := func(more map[string]any) map[string]any {
		v := map[string]any{
			"webhook":    map[string]any{"drainctlDelivery": "image-volume"},
			"controller": map[string]any{"config": ctrlCfg},
		}
		for k, x := range more {
			v[k] = x
		}
		return v
	}
	vs := haproxytest.Versions(t)
	env, err := e2e.Start(ctx, e2e.Options{
		Log: t.Logf, Node: true, Install: true, DrainctlDelivery: "image-volume", RealNodeLock: lock,
		HAProxy: haproxytest.Flavour{Version: vs[len(vs)-1]},
		// The README's commands: the namespace with its Pod Security
		// label, then helm install from the registry, here the
		// previous version, given the images pushed.
		Installer: func(ctx context.Context, in e2e.Installation) error {
			host, refs = in.RegistryHost, in.Refs
			t.Logf("pushed %s and %s", refs["stickydrain"], refs["drainctl"])
			if err := yaml.Unmarshal([]byte(in.ControllerConfig), &ctrlCfg); err != nil {
				return err
			}
			if err := publishCharts(host, refs, rc, chartsDir); err != nil {
				return err
			}
			var err error
			if cfg, err = newHelmConfig(in.Cluster); err != nil {
				return err
			}
			cfg.RegistryClient = rc
			if err := in.Cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace,
				Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}); err != nil {
				return err
			}
			prev, err := fromRegistry(host, previousChart, rc, t.TempDir())
			if err != nil {
				return err
			}
			inst := action.NewInstall(cfg)
			inst.ReleaseName, inst.Namespace = release, namespace
			inst.WaitStrategy = kube.HookOnlyStrategy
			if _, err := inst.RunWithContext(ctx, prev, values(map[string]any{
				"image": imageValues(refs["stickydrain"]), "drainctlImage": imageValues(refs["drainctl"])})); err != nil {
				return fmt.Errorf("helm install --version %s: %w", previousChart, err)
			}
			for _, d := range []string{"stickydrain-webhook", "stickydrain-controller"} {
				if err := install.WaitAvailable(ctx, in.Cluster, namespace, d); err != nil {
					return err
				}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	t.Cleanup(func() { env.KeepLogsIfFailed(t) })
	c := env.Cluster

	// containerd pulled both images from the registry, by digest.
	var running corev1.PodList
	if err := c.Client.List(ctx, &running, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	for _, p := range running.Items {
		for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if !strings.HasPrefix(st.ImageID, host+"/stickydrain/") || !strings.Contains(st.ImageID, "@sha256:") {
				t.Errorf("%s/%s runs image %s (%s), want one pulled from the registry %s by digest", p.Name, st.Name, st.Image, st.ImageID, host)
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

	// The users' app: its pods get drainctl as an image volume, and the
	// controller maps them onto both HAProxy instances.
	const replicas, users, idle = 3, 9, 8 * time.Second
	if err := env.Deploy(ctx, replicas, idle); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "3 ready v1 pods active on both HAProxy", func() bool { return env.Serving(ctx, "v1", replicas) })
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace(e2e.Namespace), client.MatchingLabels{"app": "web"}); err != nil {
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
	obs := env.Observe(ctx, 100*time.Millisecond)
	clients := env.StartClients(ctx, users, idle, obs)
	time.Sleep(6 * time.Second)
	clients.RolloutStarted()

	// Pods created every 200 ms (server dry-run) while fn runs and for
	// the time after it: how many were admitted, how many refused. fn runs on
	// the test's goroutine (it may stop the test), the creation beside it.
	createWhile := func(what string, wantInjected bool, after time.Duration, fn func()) {
		t.Helper()
		stop := make(chan struct{})
		var created, refused int
		creating := make(chan struct{})
		go func() {
			defer close(creating)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: e2e.Namespace, Name: fmt.Sprintf("%s-%d", what, i), Labels: map[string]string{"stickydrain.io/drain": "enabled"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "sessionapp"}}},
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
		}()
		defer func() {
			time.Sleep(after)
			close(stop)
			<-creating
			t.Logf("%s: %d pods created, %d refused", what, created, refused)
			if created < 10 {
				t.Errorf("%s: only %d pods created (%d refused)", what, created, refused)
			}
		}()
		fn()
	}
	// rolledDuring rolls the app to version while change runs: the
	// app's old pods drain while the controller and the webhook roll.
	// changes are the chart's changes' windows, each from its start to
	// its controller's and webhook's pods all replaced.
	type window struct {
		what       string
		from, till time.Time
	}
	var changes []window
	rolledDuring := func(version, what string, change func() error) {
		t.Helper()
		if err := env.Rollout(ctx, version); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if err := change(); err != nil {
			t.Error(err)
		}
		changes = append(changes, window{what, began, time.Now()})
		must.Eventually(t, ctx, 300*time.Millisecond, "the rollout to "+version, func() bool { return env.RolloutDone(ctx, version, replicas) })
		t.Logf("the app's rollout to %s ended %v after it began, the chart's change (%s) %v after it began", version,
			time.Since(began).Round(100*time.Millisecond), what, changes[len(changes)-1].till.Sub(began).Round(100*time.Millisecond))
	}

	// helm upgrade from the previous version to this one, from the
	// registry: it rolls both Deployments (a new pod template) and changes
	// the webhook configurations, under pod creation and in the middle of
	// the app's rollout; the PodDisruptionBudget and the rolling update
	// keep one replica of each serving, and leader election hands the
	// drains from the old controller to the new.
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
		rolledDuring("v2", "helm upgrade", func() error {
			before := controllerPods(ctx, c)
			up := action.NewUpgrade(cfg)
			up.Namespace = namespace
			up.WaitStrategy = kube.HookOnlyStrategy
			current, err := fromRegistry(host, ch.Metadata.Version, rc, t.TempDir())
			if err != nil {
				return err
			}
			// No image values: the chart pushed pins its images itself.
			if _, err := up.RunWithContext(ctx, release, current, values(map[string]any{"webhook": map[string]any{"drainctlDelivery": "image-volume", "resources": map[string]any{
				"requests": map[string]any{"cpu": "60m", "memory": "64Mi"}, "limits": map[string]any{"memory": "256Mi"}}}})); err != nil {
				return fmt.Errorf("helm upgrade --version %s: %w", ch.Metadata.Version, err)
			}
			webhookRolled("the webhook rolled to the upgraded chart", func(d *appsv1.Deployment) bool {
				return d.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String() == "60m" && d.Spec.Template.Spec.PriorityClassName == ""
			})
			var d appsv1.Deployment
			if err := c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "stickydrain-webhook"}, &d); err != nil {
				return err
			}
			if img := d.Spec.Template.Spec.Containers[0].Image; img != refs["stickydrain"] {
				return fmt.Errorf("the upgraded chart runs the webhook from %s, want the image it pins, %s", img, refs["stickydrain"])
			}
			return controllerReplaced(ctx, c, before)
		})
	})
	var m admissionv1.MutatingWebhookConfiguration
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "stickydrain"}, &m); err != nil || len(m.Webhooks) == 0 || len(m.Webhooks[0].MatchConditions) == 0 {
		t.Errorf("after the upgrade the opted-in entry has no matchConditions: %v", err)
	}

	// helm rollback to the previous version, under pod creation and in
	// the middle of the next rollout.
	createWhile("rollback", true, 3*time.Second, func() {
		rolledDuring("v3", "helm rollback", func() error {
			before := controllerPods(ctx, c)
			rb := action.NewRollback(cfg)
			rb.Version = 1
			rb.WaitStrategy = kube.HookOnlyStrategy
			if err := rb.Run(release); err != nil {
				return fmt.Errorf("helm rollback %s 1: %w", release, err)
			}
			webhookRolled("the webhook rolled back to the previous chart", func(d *appsv1.Deployment) bool {
				return d.Spec.Template.Spec.PriorityClassName == "stickydrain-critical"
			})
			return controllerReplaced(ctx, c, before)
		})
	})

	// What the users saw through both: every session kept.
	clients.StopNewSessions()
	e2e.AwaitRemovals(ctx, obs, false)
	sessionsKept(t, clients, obs, 2*replicas)
	// Each change replaced the controller while an old pod of the app
	// drained: else the scenario tested nothing of the hand-over.
	for _, w := range changes {
		overlapping := 0
		for _, d := range obs.Records() {
			if d.Seen.Before(w.till) && (d.Gone.IsZero() || d.Gone.After(w.from)) {
				overlapping++
			}
		}
		t.Logf("%s: %d of the app's old pods were draining while it ran", w.what, overlapping)
		if overlapping == 0 {
			t.Errorf("%s: no old pod of the app was draining while it ran", w.what)
		}
	}

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
	// The running app is untouched: its pods run, each still an active
	// server on both instances (an uninstall takes no server; with no
	// controller confirming them the instances leave rotation by the
	// readiness rule the operator chose, docs/install.md "Uninstall").
	if !env.RolloutDone(ctx, "v3", replicas) {
		t.Errorf("after helm uninstall the app's %d v3 pods are not all running", replicas)
	}
	for _, p := range env.Pods(ctx) {
		active := 0
		for _, st := range p.LB {
			if st == "active" {
				active++
			}
		}
		if active != 2 {
			t.Errorf("after helm uninstall %s is a server in %v on the two instances, want active on both", p.Name, p.LB)
		}
	}
}

// sessionsKept asserts what the users saw: no problem, no misrouted or
// failed request, every session kept, no new session or re-login on a
// draining pod; and that each of the drains old pods went through kept
// its server until the pod was gone.
func sessionsKept(t *testing.T, clients *e2e.Clients, obs *e2e.Observer, drains int) {
	t.Helper()
	s := clients.Stats()
	t.Logf("users through the upgrade and the rollback: %d requests, %d sessions ended, %d kept, %d misrouted, %d failed; %d started during the rollouts; %d new sessions on a pod terminating but not drained yet (the load balancers' reaction time, not a failure)",
		s.Requests, s.Sessions, s.SessionsKept, s.Misrouted, s.Errors, s.StartedAfterRollout, s.NewOnTerminating)
	for _, p := range clients.Problems() {
		t.Errorf("problem: %s", p)
	}
	if s.Misrouted != 0 || s.Errors != 0 || s.SessionsKept != s.Sessions || s.Sessions == 0 {
		t.Errorf("sessions: %d ended, %d kept; %d misrouted, %d errors", s.Sessions, s.SessionsKept, s.Misrouted, s.Errors)
	}
	if s.NewOnDraining != 0 || s.ReloginsOnDraining != 0 {
		t.Errorf("%d new sessions and %d re-logins landed on a draining pod", s.NewOnDraining, s.ReloginsOnDraining)
	}
	records := obs.Records()
	if len(records) != drains {
		t.Errorf("observed %d old pods drain, want %d", len(records), drains)
	}
	for _, d := range records {
		if d.Drained.IsZero() || d.ServerDroppedEarly {
			t.Errorf("%s: drained %v, dropped early %v", d.Pod, d.Drained, d.ServerDroppedEarly)
			continue
		}
		t.Logf("%s: drained on both HAProxy %v after seen terminating", d.Pod, d.Drained.Sub(d.Seen).Round(10*time.Millisecond))
	}
}

// controllerPods names the controller's pods.
func controllerPods(ctx context.Context, c *cluster.Cluster) map[string]bool {
	var pods corev1.PodList
	_ = c.Client.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{"app.kubernetes.io/name": "stickydrain-controller"})
	out := map[string]bool{}
	for _, p := range pods.Items {
		out[p.Name] = true
	}
	return out
}

// controllerReplaced waits until the controller's Deployment is available
// with none of the pods before: the chart's change replaced the
// controller (else the scenario tested no hand-over).
func controllerReplaced(ctx context.Context, c *cluster.Cluster, before map[string]bool) error {
	if len(before) == 0 {
		return fmt.Errorf("no controller pod before the chart's change")
	}
	for {
		if err := install.WaitAvailable(ctx, c, namespace, "stickydrain-controller"); err != nil {
			return err
		}
		now := controllerPods(ctx, c)
		old := 0
		for p := range now {
			if before[p] {
				old++
			}
		}
		if old == 0 && len(now) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the controller's pods were not replaced: %d of %d still run: %w", old, len(now), ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
