package e2e

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/internal/golden"
	"github.com/stickydrain/stickydrain/plugin"
	"github.com/stickydrain/stickydrain/test/must"
)

// pluginOnARealDrain runs `kubectl stickydrain` as an operator does, on a
// real node (pods' logs and exec through the API server and the kubelet):
// check on a well-set-up app, then status (once, and -w) during a rollout
// in which the old pod holding a user's session drains it (sessions left
// from its drainctl's log, drained on both HAProxy instances from the
// controller's Events), the metrics the dashboard and alerts query scraped
// meanwhile, shorten, and release, which ends the drain with the session
// still open; then check on planted misconfigurations.
func pluginOnARealDrain(t *testing.T, opts Options) {
	ctx, env := startEnv(t, opts)
	bin, err := env.bins.Build("github.com/stickydrain/stickydrain/plugin/cmd/kubectl-stickydrain")
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", env.Cluster.KubeconfigPath}, args...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		if err != nil {
			t.Fatalf("kubectl stickydrain %v: %v", args, err)
		}
		return string(out), 0
	}
	if err := env.Deploy(ctx, 2, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "2 ready v1 pods active on both HAProxy", func() bool { return env.Serving(ctx, "v1", 2) })

	out, code := kubectl("check", "deploy/web", "-n", Namespace)
	t.Logf("kubectl stickydrain check deploy/web:\n%s", out)
	if code != 0 {
		t.Errorf("check of a well-set-up app: exit %d, want 0", code)
	}
	golden.Compare(t, filepath.Join("testdata", "plugin-check.golden"), []byte(normalizePluginTable(out)))

	// One user's session, on the pod that will drain.
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	code, r, _, err := call(hc, "POST", env.Front.URL()+"/login?user=operator-watched")
	if err != nil || code != 200 {
		t.Fatalf("login: %d %v", code, err)
	}
	victim := r.Pod
	// A rollout, as an operator watches one: both v1 pods are replaced;
	// the one holding the session drains it, the other has none.
	rolled := time.Now()
	if err := env.Rollout(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	status := func() []plugin.PodStatus {
		out, code := kubectl("status", "-n", Namespace, "-o", "json")
		var doc struct{ Pods []plugin.PodStatus }
		if code != 0 || json.Unmarshal([]byte(out), &doc) != nil {
			t.Fatalf("status -o json: exit %d: %s", code, out)
		}
		return doc.Pods
	}
	var last []plugin.PodStatus
	defer func() {
		if t.Failed() {
			b, _ := json.MarshalIndent(last, "", "  ")
			t.Logf("the last status: %s", b)
		}
	}()
	must.Eventually(t, ctx, 300*time.Millisecond, "the rollout done but for "+victim+", draining its one session on both HAProxy instances, as status says", func() bool {
		ps := status()
		last = ps
		return len(ps) == 1 && ps[0].Pod == victim && ps[0].Sessions != nil && *ps[0].Sessions == 1 && ps[0].Verdict == "draining" &&
			len(ps[0].LoadBalancers) == 1 && ps[0].LoadBalancers[0].Answered == 2
	})
	out, _ = kubectl("status", "-A")
	t.Logf("kubectl stickydrain status -A:\n%s", out)
	golden.Compare(t, filepath.Join("testdata", "plugin-status.golden"), []byte(strings.ReplaceAll(normalizePluginTable(out), victim, "<pod>")))

	// -w: refreshed until interrupted, each refresh stamped and naming the
	// draining pod; Ctrl-C ends it with 0.
	// (Its output goes to a file: the process writes while the test reads.)
	watchOut, err := os.Create(filepath.Join(t.TempDir(), "status-w.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer watchOut.Close()
	watched := func() string { b, _ := os.ReadFile(watchOut.Name()); return string(b) }
	w := exec.CommandContext(ctx, bin, "--kubeconfig", env.Cluster.KubeconfigPath, "status", "-w", "--interval", "1s", "-n", Namespace)
	w.Stdout, w.Stderr = watchOut, watchOut
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "status -w refreshed twice", func() bool { return strings.Count(watched(), "\n\n") >= 2 })
	if err := w.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(); err != nil {
		t.Errorf("status -w interrupted: %v, want exit 0\n%s", err, watched())
	}
	refreshes := strings.Split(strings.TrimSpace(watched()), "\n\n")
	for i, r := range refreshes {
		stamp, table, _ := strings.Cut(r, "\n")
		if _, err := time.Parse(time.RFC3339, stamp); err != nil || !strings.Contains(table, victim) || !strings.Contains(table, "draining") {
			t.Errorf("status -w refresh %d of %d: want a time stamp, then %s draining:\n%s", i+1, len(refreshes), victim, r)
		}
	}

	// What the dashboard and the alerts query, scraped from the running
	// webhook and controllers in the middle of this drain.
	monitoredMetricsExposed(ctx, t, env)

	// Shorten, then release: drainctl reads both through the downward API.
	if out, code := kubectl("shorten", victim, "--max-wait", "4m", "-n", Namespace); code != 0 {
		t.Fatalf("shorten: exit %d: %s", code, out)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "drainctl running with the shortened max-wait", func() bool {
		ps := status()
		last = ps
		return len(ps) == 1 && ps[0].MaxWait == "4m0s"
	})
	if out, code := kubectl("release", victim, "-n", Namespace); code != 0 {
		t.Fatalf("release: exit %d: %s", code, out)
	}
	hook, err := env.Node.PreStop(ctx, Namespace, victim, "app")
	if err != nil {
		t.Fatal(err)
	}
	if !hook.Failed || !strings.Contains(hook.Output, "released after") {
		t.Errorf("%s's preStop: failed %v, output %q; want drainctl's exit 5 and its 'released after' summary", victim, hook.Failed, hook.Output)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, victim+" gone", func() bool {
		var p corev1.Pod
		return apierrors.IsNotFound(env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: victim}, &p))
	})
	t.Logf("%s: rolled out, drained, shortened and released in %v (its session still open; max-wait was 5m)", victim, time.Since(rolled).Round(time.Second))
	if out, _ := kubectl("status", "-n", Namespace); !strings.Contains(out, "No terminating opted-in pods.") {
		t.Errorf("status once it is gone:\n%s", out)
	}

	// Planted: a Namespace not opted in, its Deployment without a
	// readiness probe (so its pod carries no drain), its Service mapping
	// an upstream the controller does not give that Namespace.
	k := env.Cluster.Client
	legacy := "legacy"
	if err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: legacy}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "old"}
	if err := k.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: legacy, Annotations: map[string]string{"stickydrain.io/upstreams": "edge/shop"}},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := k.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: legacy},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "app", Image: env.appImage, Args: []string{"--listen=:8080", "--pod=old", "--version=v1"},
			}}}}},
	}); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "the legacy pod running and the controller's refusal of its Service", func() bool {
		out, _ := kubectl("check", "ns/"+legacy)
		return strings.Contains(out, "1 of 1 running pods carry no drain") && strings.Contains(out, "UpstreamNotAllowed")
	})
	out, code = kubectl("check", "ns/"+legacy)
	t.Logf("kubectl stickydrain check ns/%s:\n%s", legacy, out)
	if code != 3 {
		t.Errorf("check of a misconfigured Namespace: exit %d, want 3", code)
	}
	golden.Compare(t, filepath.Join("testdata", "plugin-check-planted.golden"), []byte(normalizePluginTable(out)))
}

var (
	pluginDuration = regexp.MustCompile(`\b(\d+h\d+m|\d+m\d+s|\d+s)\b`)
	pluginIP       = regexp.MustCompile(`\b198\.1[89]\.\d+\.\d+\b`)
	pluginPod      = regexp.MustCompile(`\b[a-z][a-z0-9-]*-[0-9a-f]{6,10}-[0-9a-z]{5}\b`)
	pluginCount    = regexp.MustCompile(`: \d+ sessions`)
)

// normalizePluginTable makes a table of the plugin's comparable from run
// to run: columns joined by " | " (tabwriter's padding depends on the
// names), durations, addresses, pod names and session counts replaced.
func normalizePluginTable(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		fields := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1)
		l = strings.Join(fields, " | ")
		l = pluginDuration.ReplaceAllString(l, "<duration>")
		l = pluginIP.ReplaceAllString(l, "<ip>")
		l = pluginPod.ReplaceAllString(l, "<pod>")
		l = pluginCount.ReplaceAllString(l, ": <n> sessions")
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n") + "\n"
}
