package apps

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/plugin"
	"github.com/stickydrain/stickydrain/test/framework"
	"github.com/stickydrain/stickydrain/test/proc"
	"github.com/stickydrain/stickydrain/test/testbin"
)

// users is how many users hold a session at once in each scenario.
const users = 5

// pollInterval is drainctl wait's interval here (the docs' examples poll
// every 5–30 s; the scenario shortens it, and min-wait, to run in seconds).
const pollInterval = time.Second

// TestApps runs each application server as teams run it, with drainctl
// configured as docs/opting-in.md shows for it, while a prober at the
// kubelet's pace and a load balancer's health check hit the probe path the
// docs give throughout:
//
//   - before any user, drainctl counts 0: the probes made no session;
//   - five users log in (each its own cookie jar) and use their session:
//     drainctl counts exactly 5;
//   - one cookie-less request to the landing page (a probe pointed at the
//     wrong path) makes the count 6: the count is the server's own, and a
//     probe there would keep every drain to max-wait (what `kubectl
//     stickydrain check` warns of); that session is then ended as a
//     user's would be;
//   - drainctl wait starts, the users log out one after another, and wait
//     returns within one poll interval of the last logout, exit 0.
//
// Spring Boot (and WildFly) cannot be built or fetched here (no Maven
// repository): their formats are tested against captured output
// (drainctl/source), never against a running server.
func TestApps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real application servers")
	}
	b := testbin.New()
	t.Cleanup(func() { _ = b.Close() })
	drainctl, err := b.Build("github.com/stickydrain/stickydrain/drainctl")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []runtime{tomcat(), php(), node()} {
		t.Run(a.name, func(t *testing.T) { scenario(t, drainctl, a) })
	}
}

// runtime is one application server: how to start it, its pages, and the
// docs/opting-in.md example that configures drainctl for it.
type runtime struct {
	name string
	// start runs the server on port in dir and returns its environment
	// for drainctl (credentials) once it answers.
	start func(t *testing.T, ctx context.Context, dir string, port int) []string
	// docURL picks the example of docs/opting-in.md whose
	// stickydrain.io/url ends so.
	docURL string
	// The app's pages, relative to the server: log in (POST, ?user=),
	// a page a session holder uses, log out (POST), the landing page
	// (creates a session for whoever asks), the probe's page (the docs'
	// probe path: creates none).
	login, use, logout, landing, probe string
	// check, when set, runs once the users are logged in.
	check func(t *testing.T, base string)
}

func scenario(t *testing.T, drainctl string, rt runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	env := rt.start(t, ctx, dir, port)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := docArgs(t, rt.docURL, port)
	t.Logf("drainctl, as docs/opting-in.md configures it: %s", strings.Join(args, " "))
	count := func() int {
		t.Helper()
		cmd := exec.CommandContext(ctx, drainctl, append([]string{"count"}, countArgs(args)...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("drainctl count: %v: %s", err, stderrOf(err))
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			t.Fatalf("drainctl count printed %q", out)
		}
		return int(n)
	}

	// Probes throughout: the kubelet's (every 5 s in the samples; here
	// every 200 ms) and a load balancer's health check (every 300 ms),
	// each request on a new connection with no cookie.
	var probes atomic.Int64
	probeCtx, stopProbes := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, every := range []time.Duration{200 * time.Millisecond, 300 * time.Millisecond} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for {
				if code, _, err := get(c, "GET", base+rt.probe); err == nil && code == 200 {
					probes.Add(1)
				}
				select {
				case <-probeCtx.Done():
					return
				case <-time.After(every):
				}
			}
		}()
	}
	defer func() { stopProbes(); wg.Wait() }()

	time.Sleep(2 * time.Second)
	if n := count(); n != 0 {
		t.Fatalf("before any user: drainctl counts %d, want 0 (%d probes of %s so far)", n, probes.Load(), rt.probe)
	}

	// Five users, each logged in and using the session twice.
	clients := make([]*http.Client, users)
	for i := range clients {
		jar, _ := cookiejar.New(nil)
		clients[i] = &http.Client{Jar: jar, Timeout: 5 * time.Second}
		if code, body, err := get(clients[i], "POST", fmt.Sprintf("%s%s?user=u%d", base, rt.login, i)); err != nil || code != 200 {
			t.Fatalf("user %d: login: %v, status %d: %s", i, err, code, body)
		}
		for range 2 {
			if code, body, err := get(clients[i], "GET", base+rt.use); err != nil || code != 200 || !strings.Contains(body, fmt.Sprintf("u%d", i)) {
				t.Fatalf("user %d: %s: %v, status %d: %s (the session was not kept)", i, rt.use, err, code, body)
			}
		}
	}
	if n := count(); n != users {
		t.Fatalf("%d users logged in: drainctl counts %d, want %d (%d probes of %s so far)", users, n, users, probes.Load(), rt.probe)
	}
	if rt.check != nil {
		rt.check(t, base)
	}

	// One cookie-less request to the landing page: what a probe pointed
	// there does at every period.
	jar, _ := cookiejar.New(nil)
	stray := &http.Client{Jar: jar, Timeout: 5 * time.Second}
	if code, body, err := get(stray, "GET", base+rt.landing); err != nil || code != 200 {
		t.Fatalf("landing page: %v, status %d: %s", err, code, body)
	}
	if n := count(); n != users+1 {
		t.Fatalf("after one cookie-less request to the landing page %s: drainctl counts %d, want %d (a probe there makes a session)", rt.landing, n, users+1)
	}
	if code, _, err := get(stray, "POST", base+rt.logout); err != nil || code != 200 {
		t.Fatalf("ending the landing page's session: %v, status %d", err, code)
	}
	if n := count(); n != users {
		t.Fatalf("the landing page's session ended: drainctl counts %d, want %d", n, users)
	}

	// The drain: drainctl wait as the preStop hook runs it, the users
	// logging out one after another.
	cmd := exec.CommandContext(ctx, drainctl, append([]string{"wait"}, waitArgs(args)...)...)
	cmd.Env = append(os.Environ(), env...)
	log := filepath.Join(dir, "drainctl.log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	waitStart := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var lastLogout time.Time
	for i, c := range clients {
		time.Sleep(700 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("drainctl wait returned (%v) after %v with %d users still logged in: %s", err, time.Since(waitStart), users-i, proc.Tail(log, 10))
		default:
		}
		if code, body, err := get(c, "POST", base+rt.logout); err != nil || code != 200 {
			t.Fatalf("user %d: logout: %v, status %d: %s", i, err, code, body)
		}
		lastLogout = time.Now()
	}
	select {
	case err := <-done:
		took := time.Since(lastLogout)
		t.Logf("drainctl wait returned %v after the last logout (poll interval %v), %d probes in all: %s", took.Round(time.Millisecond), pollInterval, probes.Load(), proc.Tail(log, 1))
		if err != nil {
			t.Errorf("drainctl wait: %v, want exit 0 (drained): %s", err, proc.Tail(log, 10))
		}
		// One interval, its ±10 % jitter, and a request's time.
		if limit := pollInterval*11/10 + 500*time.Millisecond; took > limit {
			t.Errorf("drainctl wait returned %v after the last logout, want within one poll interval (%v, allowed %v)", took, pollInterval, limit)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("drainctl wait still waiting 30 s after every user logged out (count %d): %s", count(), proc.Tail(log, 10))
	}
	checkFlagsTheLanding(t, ctx, drainctl, env, args, port, rt)
	if probes.Load() < 10 {
		t.Errorf("only %d probes of %s answered 200: the probe path must serve", probes.Load(), rt.probe)
	}
}

// get sends one request and returns its status and body.
func get(c *http.Client, method, url string) (int, string, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(b), err
}

// stderrOf is what a failed command wrote to its standard error.
func stderrOf(err error) string {
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// countArgs keeps, of drainctl wait's arguments, those drainctl count
// takes (where and how to read the count).
func countArgs(args []string) []string {
	var out []string
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--max-wait", "--min-wait", "--interval", "--podinfo", "--target":
			continue
		}
		out = append(out, a)
	}
	return out
}

// waitArgs are the docs' arguments with a short poll interval and
// min-wait, so that the scenario runs in seconds, and no podinfo file (no
// pod here).
func waitArgs(args []string) []string {
	var out []string
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--interval", "--min-wait", "--podinfo":
			continue
		}
		out = append(out, a)
	}
	return append(out, "--interval="+pollInterval.String(), "--min-wait=1s")
}

// nodeModules installs the Node app's packages (package-lock.json, from
// npm) once into the cache, keyed by the lock file's digest.
func nodeModules(t *testing.T) string {
	t.Helper()
	src := filepath.Join(framework.RepoRoot(), "test", "apps", "testdata", "node")
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "stickydrain", "node-apps-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "express-session", "package.json")); err == nil {
		return dir
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci (the Node app's packages): %v\n%s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkFlagsTheLanding runs `kubectl stickydrain check` on a Deployment of
// this app, its exec into the pod being drainctl run here (where the
// server's localhost is): with the readiness probe on the landing page it
// warns that the probe creates sessions; on the docs' probe path it finds
// none. Its requests to the landing page leave sessions behind, so it
// comes last.
func checkFlagsTheLanding(t *testing.T, ctx context.Context, drainctl string, env, args []string, port int, rt runtime) {
	t.Helper()
	for _, tc := range []struct {
		path, level, says string
	}{
		{rt.landing, plugin.LevelWarning, "creates sessions"},
		{rt.probe, plugin.LevelOK, "creates no session"},
	} {
		f := checkProbe(t, ctx, drainctl, env, args, port, tc.path)
		t.Logf("kubectl stickydrain check, readiness probe on %s: %s: %s", tc.path, f.Level, f.Message)
		if f.Level != tc.level || !strings.Contains(f.Message, tc.says) {
			t.Errorf("kubectl stickydrain check with the readiness probe on %s: %s %q, want %s, %q", tc.path, f.Level, f.Message, tc.level, tc.says)
		}
	}
}

// checkProbe is check's probe-sessions finding for a pod of this app whose
// readiness probe requests path.
func checkProbe(t *testing.T, ctx context.Context, drainctl string, env, args []string, port int, path string) plugin.Finding {
	t.Helper()
	labels := map[string]string{"app": "shop"}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app",
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 5, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host: "127.0.0.1", Path: path, Port: intstr.FromString("http")}}},
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
			Command: append([]string{"/stickydrain/bin/drainctl", "wait"}, args...)}}},
	}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "shop-1", Namespace: "shop", Labels: labels,
		Annotations: map[string]string{api.AnnotationStatus: api.StatusInjected}}, Spec: spec,
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "shop"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}}}
	c := &plugin.Client{
		Kube: fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop",
			Labels: map[string]string{api.OptInLabel: api.LabelEnabled}}}, deploy, pod),
		Exec: func(ctx context.Context, _, _, _ string, cmd []string) (string, string, error) {
			run := exec.CommandContext(ctx, drainctl, cmd[1:]...)
			run.Env = append(os.Environ(), env...)
			var stdout, stderr strings.Builder
			run.Stdout, run.Stderr = &stdout, &stderr
			err := run.Run()
			return stdout.String(), stderr.String(), err
		},
	}
	findings, err := c.Check(ctx, "shop", "deploy/shop")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		if f.Check == "probe-sessions" {
			return f
		}
	}
	t.Fatalf("kubectl stickydrain check found nothing of the probe on %s: %+v", path, findings)
	return plugin.Finding{}
}
