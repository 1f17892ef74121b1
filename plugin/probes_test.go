package plugin

import (
	"context"
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/stickydrain/stickydrain/api"
)

func TestCheckAsksWhetherEachProbeCreatesSessions(t *testing.T) {
	pod := runningPod("web-7d9c-a")
	app := &pod.Spec.Containers[0]
	app.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	get := func(path string, port intstr.IntOrString) *corev1.Probe {
		return &corev1.Probe{PeriodSeconds: 5, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: port,
			HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "1"}}}}}
	}
	app.ReadinessProbe = get("/shop/", intstr.FromString("http"))
	app.LivenessProbe = get("/shop/", intstr.FromInt32(8080)) // the same URL: asked once
	app.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: pod.Spec}}}
	kube := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{api.OptInLabel: api.LabelEnabled}}}, web, pod)
	// The app: /shop/ makes a session per request, /healthz none, /broken
	// cannot be asked.
	var ran []string
	c := &Client{Kube: kube, HealthCheckPaths: []string{"healthz", "/broken", "/now-and-then"}, Exec: func(_ context.Context, ns, pod, container string, cmd []string) (string, string, error) {
		ran = append(ran, strings.Join(cmd, " "))
		switch {
		case cmd[1] == "count":
			return "4\n", "format: number\n", nil
		case strings.Contains(cmd[2], "/shop/"):
			return "3\n", "3 requests added 3 sessions\n", nil
		case strings.Contains(cmd[2], "/now-and-then"):
			return "1\n", "3 requests added 1 sessions\n", nil
		case strings.Contains(cmd[2], "/broken"):
			return "", "drainctl: unknown command \"probe\"\n", errors.New("command terminated with exit code 2")
		}
		return "0\n", "3 requests added 0 sessions\n", nil
	}}
	fs, err := c.Check(context.Background(), "shop", "deploy/web")
	if err != nil {
		t.Fatal(err)
	}
	got, n := map[string]Finding{}, 0
	for _, f := range fs {
		if f.Check == "probe-sessions" {
			got[f.Message[:strings.Index(f.Message, " http")]] = f
			n++
		}
	}
	if f := got["readiness probe"]; f.Level != LevelWarning || !strings.Contains(f.Message, "http://localhost:8080/shop/ creates sessions") ||
		!strings.Contains(f.Message, "requested every 5s") || !strings.Contains(f.Fix, `session="false"`) || !strings.Contains(f.Fix, "prepare-your-app.md") {
		t.Errorf("readiness probe on a page that makes sessions: %+v", f)
	}
	if _, ok := got["liveness probe"]; ok || n != 4 {
		t.Errorf("findings %v: want the readiness probe and the three health-check paths (the liveness probe asks the same URL)", got)
	}
	if f := got["load balancer health check"]; f.Level == "" {
		t.Errorf("no health-check finding: %v", got)
	}
	var ok, unknown, unclear int
	for _, f := range fs {
		if f.Check != "probe-sessions" {
			continue
		}
		switch {
		case strings.Contains(f.Message, "http://localhost:8080/healthz creates no session") && f.Level == LevelOK:
			ok++
		case strings.Contains(f.Message, "http://localhost:8080/broken: cannot tell") && f.Level == LevelWarning && strings.Contains(f.Fix, "upgrade"):
			unknown++
		case strings.Contains(f.Message, "/now-and-then: 3 requests added 1") && f.Level == LevelWarning && strings.Contains(f.Fix, "run check again"):
			unclear++
		}
	}
	if ok != 1 || unknown != 1 || unclear != 1 {
		t.Errorf("health checks: %d ok (want 1, /healthz), %d cannot tell (want 1, /broken), %d unclear (want 1, /now-and-then): %+v", ok, unknown, unclear, fs)
	}
	want := "/stickydrain/bin/drainctl probe --get=http://localhost:8080/shop/ --requests=3 --url=http://localhost:8080/sessions --get-header=X-Probe: 1"
	if len(ran) != 5 || ran[1] != want {
		t.Errorf("exec: %q, want the count, then %q and the three health checks", ran, want)
	}
}
