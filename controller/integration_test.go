package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/framework"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/must"
	"github.com/stickydrain/stickydrain/test/nginxplus"
	"github.com/stickydrain/stickydrain/test/podhost"
	"github.com/stickydrain/stickydrain/test/proc"
	"github.com/stickydrain/stickydrain/test/sessionapp"
	"github.com/stickydrain/stickydrain/test/testbin"
)

var bins = testbin.New()

// clusterWithPods starts a control plane and the pod host running its pods
// from the session app's binary.
func clusterWithPods(t *testing.T) (*cluster.Cluster, *podhost.Host) {
	t.Helper()
	c := cluster.StartT(t, cluster.Options{})
	app, err := bins.Build("github.com/stickydrain/stickydrain/test/sessionapp/cmd/sessionapp")
	if err != nil {
		t.Fatal(err)
	}
	return c, podhost.StartT(t, podhost.Options{Clientset: c.Clientset, Nodes: c.Nodes, Log: t.Logf,
		Images: map[string]string{"sessionapp": app}})
}

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Close()
	os.Exit(code)
}

// controllerProc runs the real controller binary with its real flags.
type controllerProc struct {
	t           *testing.T
	c           *cluster.Cluster
	bin         string
	args        []string
	p           *proc.Proc
	logPath     string
	metricsPort int
}

// asControllerServiceAccount applies manifests/controller/rbac.yaml and
// returns a kubeconfig for its ServiceAccount, so the controller runs with
// exactly the permissions it ships with.
func asControllerServiceAccount(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	kubeconfig, err := framework.ControllerServiceAccount(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

func startController(t *testing.T, c *cluster.Cluster, kubeconfig, cfg string) *controllerProc {
	bin, err := bins.Build("github.com/stickydrain/stickydrain/controller")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "controller.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ports, err := proc.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	p := &controllerProc{t: t, c: c, bin: bin, logPath: filepath.Join(t.TempDir(), "controller.log"), metricsPort: ports[0]}
	p.args = []string{
		"--config", path, "--kubeconfig", kubeconfig, "--leader-elect", "--leader-election-namespace", "stickydrain-system",
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", p.metricsPort),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
	}
	p.start()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			b, _ := os.ReadFile(p.logPath)
			t.Logf("controller log:\n%s", b)
		}
	})
	return p
}

func (p *controllerProc) start() {
	var err error
	if p.p, err = proc.Start(p.logPath, p.bin, p.args...); err != nil {
		p.t.Fatal(err)
	}
}

func (p *controllerProc) stop() {
	if p.p != nil {
		p.p.Stop()
	}
}

func servers(t *testing.T, h *haproxytest.HAProxy) map[netip.AddrPort]plan.State {
	// Read in slot mode: every server of the backend, dynamic ones too.
	i, err := haproxy.New(h.Address(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got, err := backend.Read(context.Background(), i, "shop")
	if err != nil {
		return nil
	}
	return got
}

// user is one browser: a cookie jar and the pod that served it last.
type user struct {
	c   *http.Client
	pod string
}

func newUser() *user {
	jar, _ := cookiejar.New(nil)
	return &user{c: &http.Client{Jar: jar, Timeout: 5 * time.Second}}
}

func (u *user) do(t *testing.T, method, url string) (int, sessionapp.Reply) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := u.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var r sessionapp.Reply
	_ = json.NewDecoder(resp.Body).Decode(&r)
	u.pod = r.Pod
	return resp.StatusCode, r
}

// TestControllerDrainsTerminatingPodsOnEveryHAProxy runs on every HAProxy
// version under test, in slot mode and, from 3.0, in dynamic mode.
func TestControllerDrainsTerminatingPodsOnEveryHAProxy(t *testing.T) {
	haproxytest.ForEachFlavour(t, testControllerDrains)
}

func testControllerDrains(t *testing.T, fl haproxytest.Flavour) {
	c, host := clusterWithPods(t)
	h1 := fl.Start(t, "shared-secret", fl.Backend("shop", 8))
	h2 := fl.Start(t, "shared-secret", fl.Backend("shop", 8))
	mode := config.HAProxySlots
	if fl.Dynamic {
		mode = config.HAProxyDynamic
	}
	ctrlProc := startController(t, c, asControllerServiceAccount(t, c), fmt.Sprintf(`
loadBalancers:
  - name: edge
    type: haproxy
    haproxy: {mode: %s}
    timeout: 2s
    instances:
      # The third instance is never reachable: it must not hold the
      # other two back.
      static: [%q, %q, "unix:///nonexistent/haproxy.sock"]
    allowedNamespaces: {names: [shop]}
    upstreams: [{name: shop}]
resync: 2s
`, mode, h1.Address(), h2.Address()))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k := c.Client
	must.OK(t, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}))
	must.OK(t, k.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Annotations: map[string]string{
			"stickydrain.io/upstreams": "edge/shop", "stickydrain.io/port": "http"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}))
	must.OK(t, k.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](60),
					Containers: []corev1.Container{{
						Name: "app", Image: "sessionapp", Args: []string{"--listen=:8080", "--pod=$(POD_NAME)"},
						Env:   []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
						// A drain that outlasts the restarts below.
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
							Command: []string{"/bin/sh", "-c", "sleep 20"}}}},
					}},
				},
			},
		},
	}))

	var pods corev1.PodList
	must.Eventually(t, ctx, 50*time.Millisecond, "both pods active on both HAProxy instances", func() bool {
		if err := k.List(ctx, &pods, client.InNamespace("shop")); err != nil || len(pods.Items) != 2 {
			return false
		}
		for _, h := range []*haproxytest.HAProxy{h1, h2} {
			s := servers(t, h)
			if len(s) != 2 {
				return false
			}
			for _, p := range pods.Items {
				if p.Status.PodIP == "" || s[netip.MustParseAddrPort(p.Status.PodIP+":8080")] != plan.Active {
					return false
				}
			}
		}
		return true
	})

	// Users log in through HAProxy until one holds a session on each pod.
	byPod := map[string]*user{}
	for n := 0; n < 20 && len(byPod) < 2; n++ {
		u := newUser()
		if code, r := u.do(t, "POST", h1.URL()+"/login?user=u"+strconv.Itoa(n)); code == 200 {
			byPod[r.Pod] = u
		}
	}
	if len(byPod) != 2 {
		t.Fatalf("logins reached %d pods, want 2", len(byPod))
	}
	victim := pods.Items[0]
	addr := netip.MustParseAddrPort(victim.Status.PodIP + ":8080")
	alice := byPod[victim.Name]

	// The pod is deleted: its server drains on both instances while the
	// pod runs its preStop.
	deleted := time.Now()
	must.OK(t, k.Delete(ctx, &victim))
	drained := must.Eventually(t, ctx, 50*time.Millisecond, "the victim draining on both instances", func() bool {
		return servers(t, h1)[addr] == plan.Draining && servers(t, h2)[addr] == plan.Draining
	})
	t.Logf("deletion → drained on both HAProxy instances: %v", drained.Sub(deleted))
	checkSticky := func(when string) {
		t.Helper()
		for _, h := range []*haproxytest.HAProxy{h1, h2} {
			// The dynamic cookie is the same on both replicas.
			if code, r := alice.do(t, "GET", h.URL()+"/app/"); code != 200 || r.Pod != victim.Name {
				t.Errorf("%s: alice's session went to %q (status %d), want %s", when, r.Pod, code, victim.Name)
			}
			for n := 0; n < 5; n++ {
				if _, r := newUser().do(t, "POST", h.URL()+"/login?user=new"); r.Pod == victim.Name {
					t.Errorf("%s: a new session went to the draining pod", when)
				}
			}
		}
	}
	checkSticky("while draining")
	ctrlProc.expectMetrics(t,
		`stickydrain_controller_servers{lb="edge",state="draining",upstream="shop"} 1`,
		`stickydrain_controller_changes_total{backend="haproxy",op="add",result="ok",state="active"}`,
		`stickydrain_controller_changes_total{backend="haproxy",op="set",result="ok",state="draining"} 2`,
		`stickydrain_controller_drain_delay_seconds_count{lb="edge"} 2`,
	)
	// Server-template slots, in slot mode: 8, as many in use as h1 holds
	// servers.
	// The metric is read at each pass (the resync: 2 s), before it applies.
	if !fl.Dynamic {
		inUse := regexp.MustCompile(`(?m)^stickydrain_controller_slots_used\{lb="edge",upstream="shop"\} (\d+)$`)
		must.Eventually(t, ctx, 50*time.Millisecond, "the slots metrics: 8, as many in use as h1 holds servers", func() bool {
			body := ctrlProc.scrape(t)
			m := inUse.FindStringSubmatch(body)
			return strings.Contains(body, `stickydrain_controller_slots{lb="edge",upstream="shop"} 8`) && m != nil && m[1] == strconv.Itoa(len(servers(t, h1)))
		})
	} else if strings.Contains(ctrlProc.scrape(t), "stickydrain_controller_slots{") {
		t.Errorf("slots reported in dynamic mode, which has none")
	}
	// The drain's start, as a Unix time: what the alert on long drains
	// subtracts from time().
	oldest := regexp.MustCompile(`(?m)^stickydrain_controller_oldest_drain_start_timestamp_seconds\{lb="edge",upstream="shop"\} (\S+)$`)
	if m := oldest.FindStringSubmatch(ctrlProc.scrape(t)); m == nil {
		t.Errorf("no stickydrain_controller_oldest_drain_start_timestamp_seconds for edge/shop while it drains")
	} else if v, err := strconv.ParseFloat(m[1], 64); err != nil || v < float64(deleted.Add(-time.Second).Unix()) || v > float64(drained.Unix()+1) {
		t.Errorf("oldest drain began at %s; want between the deletion (%v) and the drain (%v)", m[1], deleted, drained)
	}
	// And when its pod's grace period (60 s) ends: what the alert on a drain
	// that outlived its own max-wait compares time() with.
	deadline := regexp.MustCompile(`(?m)^stickydrain_controller_drain_deadline_timestamp_seconds\{lb="edge",upstream="shop"\} (\S+)$`)
	if m := deadline.FindStringSubmatch(ctrlProc.scrape(t)); m == nil {
		t.Errorf("no stickydrain_controller_drain_deadline_timestamp_seconds for edge/shop while it drains")
	} else if v, err := strconv.ParseFloat(m[1], 64); err != nil || v < float64(deleted.Add(59*time.Second).Unix()) || v > float64(drained.Add(61*time.Second).Unix()) {
		t.Errorf("the drain's deadline %s; want its pod's grace period's end, 60 s after the deletion (%v)", m[1], deleted)
	}

	// HAProxy restarts mid-drain and forgets it; the controller repairs it.
	if err := h2.Restart(); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 50*time.Millisecond, "the drain repaired on the restarted instance", func() bool {
		return servers(t, h2)[addr] == plan.Draining
	})
	checkSticky("after an HAProxy restart")

	// The controller restarts mid-drain: nothing is dropped meanwhile, and
	// the new process picks the state up.
	ctrlProc.stop()
	if servers(t, h1)[addr] != plan.Draining {
		t.Error("the drain was dropped when the controller stopped")
	}
	ctrlProc.start()
	time.Sleep(3 * time.Second)
	if servers(t, h1)[addr] != plan.Draining || servers(t, h2)[addr] != plan.Draining {
		t.Errorf("after a controller restart: h1 %v, h2 %v", servers(t, h1)[addr], servers(t, h2)[addr])
	}
	checkSticky("after a controller restart")

	// The pod finishes its preStop and goes; only then is its server removed.
	if _, err := host.WaitFor(ctx, "shop", victim.Name, "", podhost.StepDeleted); err != nil {
		t.Fatal(err)
	}
	podGone := time.Now()
	removed := must.Eventually(t, ctx, 50*time.Millisecond, "the victim removed from both instances", func() bool {
		_, in1 := servers(t, h1)[addr]
		_, in2 := servers(t, h2)[addr]
		return !in1 && !in2
	})
	if ev, _ := host.WaitFor(ctx, "shop", victim.Name, "app", podhost.StepPreStopFinished); ev.Time.After(removed) {
		t.Errorf("server removed at %v, before the preStop ended at %v", removed, ev.Time)
	}
	t.Logf("pod gone → removed: %v", removed.Sub(podGone))

	// Events on the pod, and a Warning on a second Service mapped onto the
	// same upstream.
	var notes []string
	defer func() {
		if t.Failed() {
			t.Logf("the victim's Events: %q", notes)
		}
	}()
	must.Eventually(t, ctx, 50*time.Millisecond, "Draining and Removed events on the pod", func() bool {
		var evs eventsv1.EventList
		if err := k.List(ctx, &evs, client.InNamespace("shop")); err != nil {
			return false
		}
		seen := map[string]bool{}
		notes = notes[:0]
		for _, e := range evs.Items {
			if e.Regarding.Name == victim.Name {
				notes = append(notes, e.Reason+": "+e.Note)
			}
			// The note says how far it reached, in the sentence the
			// kubectl plugin reads back: the two instances of edge/shop
			// that answer, of its three.
			n, ok := api.ParseServerNote(e.Reason, e.Note)
			if e.Regarding.Name == victim.Name && ok && n.Upstream == "edge/shop" && n.Answered == 2 && n.Instances == 3 {
				seen[e.Reason] = true
			}
		}
		return seen[api.ReasonDraining] && seen[api.ReasonRemoved]
	})
	must.OK(t, k.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: "shop", Annotations: map[string]string{"stickydrain.io/upstreams": "edge/shop"}},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "other"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}))
	must.Eventually(t, ctx, 50*time.Millisecond, "an UpstreamConflict warning on the second Service", func() bool {
		var evs eventsv1.EventList
		if err := k.List(ctx, &evs, client.InNamespace("shop")); err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "intruder" && e.Reason == "UpstreamConflict" && e.Type == corev1.EventTypeWarning {
				return true
			}
		}
		return false
	})
	if s := servers(t, h1); len(s) != 2 {
		t.Errorf("after the conflicting Service, h1 has %v; the owner's servers must stay", s)
	}

	// The process started after the restart removed the server.
	ctrlProc.expectMetrics(t,
		`stickydrain_controller_servers{lb="edge",state="active",upstream="shop"} 2`,
		`stickydrain_controller_changes_total{backend="haproxy",op="remove",result="ok",state="unknown"}`,
		`stickydrain_controller_lb_errors_total{call="read",lb="edge"}`,
	)
	if body := ctrlProc.scrape(t); strings.Contains(body, "stickydrain_controller_oldest_drain_start_timestamp_seconds{") ||
		strings.Contains(body, "stickydrain_controller_drain_deadline_timestamp_seconds{") {
		t.Errorf("an oldest drain or a drain deadline still reported with none under way")
	}
}

func (p *controllerProc) scrape(t *testing.T) string {
	t.Helper()
	body, err := framework.ScrapeGuarded(context.Background(), p.c, p.metricsPort)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func (p *controllerProc) expectMetrics(t *testing.T, wants ...string) {
	t.Helper()
	body, err := framework.ScrapeGuarded(context.Background(), p.c, p.metricsPort)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range wants {
		if !hasSeries(body, want) {
			t.Errorf("controller metrics lack %s", want)
		}
	}
}

// hasSeries: the exposition body holds want — a series with its value
// ("name{labels} 2"), or a series alone ("name{labels}"), then counted
// above 0: counters start at 0, so being there says nothing.
func hasSeries(body, want string) bool {
	if strings.HasSuffix(want, "}") {
		for _, line := range strings.Split(body, "\n") {
			if value, ok := strings.CutPrefix(line, want+" "); ok {
				v, err := strconv.ParseFloat(value, 64)
				return err == nil && v > 0
			}
		}
		return false
	}
	return strings.Contains(body, want)
}

// TestControllerFindsHAProxyInstancesThroughAService runs HAProxy itself as
// a pod (two replicas, under podhost) and configures the controller with
// the Service in front of their Runtime API, as a cluster runs an HAProxy
// Deployment.
func TestControllerFindsHAProxyInstancesThroughAService(t *testing.T) {
	c := cluster.StartT(t, cluster.Options{})
	app, err := bins.Build("github.com/stickydrain/stickydrain/test/sessionapp/cmd/sessionapp")
	if err != nil {
		t.Fatal(err)
	}
	haproxyBin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatalf("haproxy is not installed (test/deps.sh installs it): %v", err)
	}
	podhost.StartT(t, podhost.Options{Clientset: c.Clientset, Nodes: c.Nodes, Log: t.Logf,
		Images: map[string]string{"sessionapp": app, "haproxy": haproxyBin}})
	cfgFile := filepath.Join(t.TempDir(), "haproxy.cfg")
	must.OK(t, os.WriteFile(cfgFile, []byte(`global
    stats socket ipv4@0.0.0.0:9999 level admin
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
frontend www
    bind :8080
    default_backend shop
backend shop
    cookie SRV insert indirect nocache dynamic
    dynamic-cookie-key k
    server-template pod 1-8 0.0.0.0:0 disabled
`), 0o644))
	ctrlProc := startController(t, c, asControllerServiceAccount(t, c), `
loadBalancers:
  - name: edge
    type: haproxy
    instances:
      service: {namespace: lb, name: haproxy-runtime, port: runtime}
    allowedNamespaces: {names: [shop]}
    upstreams: [{name: shop}]
resync: 10m
`) // no resync within the test: an HAProxy pod that turns ready must bring the Services mapped onto its load balancer by itself
	_ = ctrlProc
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := c.Client
	for _, ns := range []string{"lb", "shop"} {
		must.OK(t, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	deploy := func(ns, name string, replicas int32, ctr corev1.Container) {
		must.OK(t, k.Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{ctr}}}},
		}))
	}
	deploy("lb", "haproxy", 2, corev1.Container{Name: "haproxy", Image: "haproxy", Args: []string{"-db", "-f", cfgFile},
		Ports:          []corev1.ContainerPort{{Name: "runtime", ContainerPort: 9999}, {Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("runtime")}}}})
	must.OK(t, k.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "haproxy-runtime", Namespace: "lb"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "haproxy"},
			Ports: []corev1.ServicePort{{Name: "runtime", Port: 9999, TargetPort: intstr.FromString("runtime")}}},
	}))
	must.OK(t, k.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Annotations: map[string]string{"stickydrain.io/upstreams": "edge/shop"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}))
	deploy("shop", "web", 2, corev1.Container{Name: "app", Image: "sessionapp", Args: []string{"--listen=:8080"},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}})

	must.Eventually(t, ctx, 50*time.Millisecond, "both web pods active on both HAProxy pods, found through their Service", func() bool {
		var lbPods, webPods corev1.PodList
		if k.List(ctx, &lbPods, client.InNamespace("lb")) != nil || k.List(ctx, &webPods, client.InNamespace("shop")) != nil {
			return false
		}
		if len(lbPods.Items) != 2 || len(webPods.Items) != 2 {
			return false
		}
		for _, lp := range lbPods.Items {
			if lp.Status.PodIP == "" {
				return false
			}
			inst, _ := haproxy.New("tcp://"+lp.Status.PodIP+":9999", time.Second)
			got, err := backend.Read(ctx, inst, "shop")
			if err != nil || len(got) != 2 {
				return false
			}
			for _, wp := range webPods.Items {
				if wp.Status.PodIP == "" || got[netip.MustParseAddrPort(wp.Status.PodIP+":8080")] != plan.Active {
					return false
				}
			}
		}
		return true
	})
}

// TestControllerDrainsOnEveryNGINXPlusInstance is the HAProxy scenario
// against two NGINX Plus API emulators (test/nginxplus; not NGINX Plus),
// asserting the API state at each step.
func TestControllerDrainsOnEveryNGINXPlusInstance(t *testing.T) {
	c, host := clusterWithPods(t)
	var emus []*nginxplus.Emulator
	var urls []string
	for i := 0; i < 2; i++ {
		// The first keeps its servers in a state file, the second does not.
		e := nginxplus.New(nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop", State: i == 0}}})
		srv := httptest.NewServer(e.Handler())
		t.Cleanup(srv.Close)
		emus = append(emus, e)
		urls = append(urls, srv.URL+"/api")
	}
	// A third instance that is down (its listener closed).
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	startController(t, c, asControllerServiceAccount(t, c), fmt.Sprintf(`
loadBalancers:
  - name: plus
    type: nginx-plus
    timeout: 1s
    instances:
      static: [%q, %q, %q]
    allowedNamespaces: {names: [shop]}
    upstreams: [{name: shop}]
resync: 10m
`, urls[0], urls[1], gone.URL+"/api")) // no resync within the test: restarts are repaired by the probe

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := c.Client
	must.OK(t, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}))
	must.OK(t, k.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Annotations: map[string]string{"stickydrain.io/upstreams": "plus/shop"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}))
	must.OK(t, k.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](60), Containers: []corev1.Container{{
					Name: "app", Image: "sessionapp", Args: []string{"--listen=:8080"},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
					Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "sleep 10"}}}},
				}}}}},
	}))
	state := func(e *nginxplus.Emulator, addr string) string {
		for _, s := range e.Servers(false, "shop") {
			if s.Server == addr {
				switch {
				case s.Down:
					return "down"
				case s.Drain:
					return "drain"
				}
				return "up"
			}
		}
		return "absent"
	}
	var pods corev1.PodList
	must.Eventually(t, ctx, 50*time.Millisecond, "both pods up on both emulators, despite the third instance being down", func() bool {
		if k.List(ctx, &pods, client.InNamespace("shop")) != nil || len(pods.Items) != 2 {
			return false
		}
		for _, e := range emus {
			for _, p := range pods.Items {
				if p.Status.PodIP == "" || state(e, p.Status.PodIP+":8080") != "up" {
					return false
				}
			}
		}
		return true
	})
	victim := pods.Items[0]
	addr := victim.Status.PodIP + ":8080"
	deleted := time.Now()
	must.OK(t, k.Delete(ctx, &victim))
	drained := must.Eventually(t, ctx, 50*time.Millisecond, "drain: true on both emulators", func() bool {
		return state(emus[0], addr) == "drain" && state(emus[1], addr) == "drain"
	})
	t.Logf("deletion → drain: true on both NGINX Plus API emulators: %v", drained.Sub(deleted))

	// A restart mid-drain of the instance with a state file keeps the
	// drain; of the one without, loses the server: the controller sees the
	// new process within its probe interval (1s) and repairs it, drain
	// included, with a Warning saying the state file is missing.
	emus[0].Restart()
	if got := state(emus[0], addr); got != "drain" {
		t.Errorf("after a restart with a state file the server is %s, want drain", got)
	}
	restarted := time.Now()
	emus[1].Restart()
	if state(emus[1], addr) != "absent" {
		t.Fatal("the restart did not lose the runtime servers")
	}
	repaired := must.Eventually(t, ctx, 50*time.Millisecond, "the drain repaired after the emulator restart", func() bool {
		return state(emus[1], addr) == "drain"
	})
	t.Logf("restart without a state file → drain repaired: %v", repaired.Sub(restarted))
	if d := repaired.Sub(restarted); d > 3*time.Second {
		t.Errorf("repair took %v; the probe runs every second", d)
	}
	must.Eventually(t, ctx, 50*time.Millisecond, "a LoadBalancerStateLost Warning on the Service naming the state directive", func() bool {
		var evs eventsv1.EventList
		if k.List(ctx, &evs, client.InNamespace("shop")) != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "LoadBalancerStateLost" && e.Type == corev1.EventTypeWarning && e.Regarding.Name == "web" &&
				strings.Contains(e.Note, urls[1]) && strings.Contains(e.Note, "state directive") {
				return true
			}
		}
		return false
	})
	if _, err := host.WaitFor(ctx, "shop", victim.Name, "", podhost.StepDeleted); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 50*time.Millisecond, "the server deleted from both emulators after the pod is gone", func() bool {
		return state(emus[0], addr) == "absent" && state(emus[1], addr) == "absent"
	})
}

// TestControllerReplicasHandOverLeadership runs two replicas with leader
// election, as the Deployment does: only the leader changes the load
// balancer, and when it stops (a rollout of the controller, a node drain)
// it releases its Lease, so the other takes over without waiting for the
// lease to expire and applies the next drain.
func TestControllerReplicasHandOverLeadership(t *testing.T) {
	c := cluster.StartT(t, cluster.Options{})
	h, err := haproxytest.Run(t.TempDir(), 0, "k", haproxytest.Backend{Name: "shop", Slots: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	kubeconfig := asControllerServiceAccount(t, c)
	// A selector-less Service's slice, from another controller: allowed
	// within the pod network.
	cfg := fmt.Sprintf("loadBalancers:\n  - {name: edge, type: haproxy, instances: {static: [%q]}, allowedNamespaces: {names: [shop]}, upstreams: [{name: shop}], allowEndpointsWithoutPods: true, allowedCIDRs: [198.18.0.0/15]}\nresync: 10m\n", h.Address())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := c.Client
	must.OK(t, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}))
	must.OK(t, k.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Annotations: map[string]string{"stickydrain.io/upstreams": "edge/shop"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	}))
	addrs := []string{"198.18.200.1", "198.18.200.2", "198.18.200.3"}
	// setSlice publishes the three endpoints, the first `terminating` of
	// them terminating (a selector-less Service's slice, as another
	// controller would publish it).
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Labels: map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "test.stickydrain.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
	}
	setSlice := func(terminating int) {
		t.Helper()
		slice.Endpoints = nil
		for i, a := range addrs {
			term := i < terminating
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{a},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(!term), Serving: ptr.To(true), Terminating: ptr.To(term)}})
		}
		if slice.ResourceVersion == "" {
			must.OK(t, k.Create(ctx, slice))
		} else {
			must.OK(t, k.Update(ctx, slice))
		}
	}
	state := func(i int) plan.State { return servers(t, h)[netip.MustParseAddrPort(addrs[i]+":8080")] }
	logHas := func(p *controllerProc, s string) bool {
		b, _ := os.ReadFile(p.logPath)
		return strings.Contains(strings.ToLower(string(b)), s)
	}

	a := startController(t, c, kubeconfig, cfg)
	setSlice(0)
	must.Eventually(t, ctx, 50*time.Millisecond, "three active servers, from the first replica", func() bool {
		return len(servers(t, h)) == 3 && state(0) == plan.Active && state(1) == plan.Active && state(2) == plan.Active
	})
	if !logHas(a, "acquired lease") {
		t.Fatal("the first replica changed HAProxy without holding the Lease")
	}
	b := startController(t, c, kubeconfig, cfg)
	setSlice(1)
	must.Eventually(t, ctx, 50*time.Millisecond, "the first endpoint draining", func() bool { return state(0) == plan.Draining })
	time.Sleep(3 * time.Second) // more than the second replica's retry period (2 s)
	if logHas(b, "acquired lease") || logHas(b, `"applied"`) {
		t.Fatal("the second replica leads, or changed HAProxy, while the first holds the Lease")
	}
	// The operator changes the configuration (the ConfigMap both pods
	// mount): the leader applies and keeps it, and the standby follows it
	// too, so that it takes the lead on it, not on the one it started on.
	cfg2 := strings.Replace(cfg, "resync: 10m", "resync: 9m", 1)
	for _, p := range []*controllerProc{a, b} {
		must.OK(t, os.WriteFile(p.args[slices.Index(p.args, "--config")+1], []byte(cfg2), 0o644))
	}
	kept := func() string {
		var cm corev1.ConfigMap
		if k.Get(ctx, client.ObjectKey{Namespace: "stickydrain-system", Name: "stickydrain-controller-applied"}, &cm) != nil {
			return ""
		}
		return cm.Data["controller.yaml"]
	}
	must.Eventually(t, ctx, 50*time.Millisecond, "the changed configuration kept by the leader", func() bool { return kept() == cfg2 })
	must.Eventually(t, ctx, 50*time.Millisecond, "the standby following the change", func() bool { return logHas(b, "configuration reloaded") })

	a.stop()
	stopped := time.Now()
	took := must.Eventually(t, ctx, 50*time.Millisecond, "the second replica to take the Lease", func() bool { return logHas(b, "acquired lease") }).Sub(stopped)
	t.Logf("the second replica took the Lease %v after the first stopped", took)
	if took > 10*time.Second {
		t.Errorf("took the Lease %v after the first replica stopped: it waited for the Lease to expire (15 s) instead of taking the released one", took)
	}
	setSlice(2)
	must.Eventually(t, ctx, 50*time.Millisecond, "the second endpoint draining, from the second replica", func() bool {
		return state(0) == plan.Draining && state(1) == plan.Draining && state(2) == plan.Active
	})
	if !logHas(b, `"applied"`) {
		t.Error("the second endpoint drained, but not by the second replica")
	}
	if got := kept(); got != cfg2 {
		t.Errorf("after the hand-over the kept configuration is\n%s\nwant the one the first replica applied\n%s", got, cfg2)
	}
}
