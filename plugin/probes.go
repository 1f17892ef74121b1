package plugin

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeRequests is how many requests `drainctl probe` sends to each probe
// path: a gain of as many sessions means each request made one.
const probeRequests = 3

// probeTarget is one path something requests without a cookie, over and
// over: a probe of the drained container, or the load balancer's health
// check (Client.HealthCheckPaths).
type probeTarget struct {
	what, url string
	headers   []string
	period    int32 // seconds between requests; 0: unknown
}

// checkProbes asks, from inside the pod, whether each HTTP probe of the
// drained container, and each health-check path the operator named,
// creates sessions: `drainctl probe` reads the count, sends the requests
// as the kubelet sends a probe's (no cookie), and reads the count again.
// A probe that makes a session each period keeps the count above zero, so
// every drain runs to max-wait.
func (c *Client) checkProbes(ctx context.Context, p *corev1.Pod, object string) []Finding {
	cs, bad := podCountSource(p, object, "probe-sessions")
	if bad != nil || cs.url == "" {
		return nil
	}
	var container *corev1.Container
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == cs.container {
			container = &p.Spec.Containers[i]
		}
	}
	if container == nil {
		return nil
	}
	var out []Finding
	for _, t := range probeTargets(container, c.HealthCheckPaths) {
		f := Finding{Object: object, Check: "probe-sessions"}
		cmd := append([]string{cs.drainctl, "probe", "--get=" + t.url, "--requests=" + strconv.Itoa(probeRequests)}, cs.flags...)
		for _, h := range t.headers {
			cmd = append(cmd, "--get-header="+h)
		}
		stdout, stderr, err := c.Exec(ctx, p.Namespace, p.Name, cs.container, cmd)
		gain, perr := strconv.ParseFloat(strings.TrimSpace(stdout), 64)
		switch {
		case err != nil || perr != nil:
			f.Level = LevelWarning
			f.Message = fmt.Sprintf("%s %s: cannot tell whether it creates sessions: drainctl probe in pod %s: %v: %s", t.what, t.url, p.Name, err, strings.TrimSpace(stderr))
			f.Fix = "a drainctl older than `drainctl probe` cannot tell: upgrade stickydrain's drainctl image; or run `drainctl count` before and after a request to the path"
		case gain >= probeRequests:
			f.Level = LevelWarning
			f.Message = fmt.Sprintf("%s %s creates sessions: %d requests to it added %s to the count in pod %s, so each one made a session; %s",
				t.what, t.url, probeRequests, strings.TrimSpace(stdout), p.Name, everyPeriod(t.period))
			f.Fix = "point it at a path that creates no session: a static file or a JSP with <%@ page session=\"false\" %> (Tomcat), a script without session_start() (PHP), saveUninitialized: false (express-session); see docs/prepare-your-app.md"
		case gain > 0:
			f.Level = LevelWarning
			f.Message = fmt.Sprintf("%s %s: %d requests added %s to the count in pod %s, fewer than the requests: users logging in at the same moment, or a path that makes a session now and then",
				t.what, t.url, probeRequests, strings.TrimSpace(stdout), p.Name)
			f.Fix = "run check again; if the gain stays, see docs/prepare-your-app.md"
		default:
			f.Level = LevelOK
			f.Message = fmt.Sprintf("%s %s creates no session (%d requests added %s to the count in pod %s)", t.what, t.url, probeRequests, strings.TrimSpace(stdout), p.Name)
		}
		out = append(out, f)
	}
	return out
}

// everyPeriod says what a session-creating request every period does.
func everyPeriod(period int32) string {
	if period <= 0 {
		return "requested again and again, it keeps the count above zero and every drain runs to max-wait"
	}
	return fmt.Sprintf("requested every %ds, it keeps the count above zero and every drain runs to max-wait", period)
}

// probeTargets are container's HTTP probes (readiness, liveness, startup;
// each URL once) and the health-check paths, on the readiness probe's port
// (else the container's first port), as URLs drainctl requests from inside
// the pod.
func probeTargets(container *corev1.Container, healthPaths []string) []probeTarget {
	var out []probeTarget
	seen := map[string]bool{}
	add := func(t probeTarget) {
		if t.url != "" && !seen[t.url] {
			seen[t.url] = true
			out = append(out, t)
		}
	}
	port := ""
	for _, pr := range []struct {
		what  string
		probe *corev1.Probe
	}{{"readiness probe", container.ReadinessProbe}, {"liveness probe", container.LivenessProbe}, {"startup probe", container.StartupProbe}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			continue
		}
		h := pr.probe.HTTPGet
		p := containerPort(container, h.Port)
		if port == "" {
			port = p
		}
		t := probeTarget{what: pr.what, url: probeURL(string(h.Scheme), h.Host, p, h.Path), period: pr.probe.PeriodSeconds}
		if t.period == 0 {
			t.period = 10 // the API server's default
		}
		for _, hd := range h.HTTPHeaders {
			t.headers = append(t.headers, hd.Name+": "+hd.Value)
		}
		add(t)
	}
	if port == "" && len(container.Ports) > 0 {
		port = strconv.Itoa(int(container.Ports[0].ContainerPort))
	}
	for _, path := range healthPaths {
		if port != "" {
			add(probeTarget{what: "load balancer health check", url: probeURL("HTTP", "", port, path)})
		}
	}
	return out
}

// containerPort is a probe's port as a number: a name is looked up among
// the container's ports; "" when it names none.
func containerPort(c *corev1.Container, port intstr.IntOrString) string {
	if port.Type == intstr.Int {
		if port.IntValue() <= 0 {
			return ""
		}
		return strconv.Itoa(port.IntValue())
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return strconv.Itoa(int(p.ContainerPort))
		}
	}
	if _, err := strconv.Atoi(port.StrVal); err == nil {
		return port.StrVal
	}
	return ""
}

// probeURL is the URL the kubelet requests for a probe, with localhost for
// an empty host (drainctl runs in the pod).
func probeURL(scheme, host, port, path string) string {
	if port == "" {
		return ""
	}
	if host == "" {
		host = "localhost"
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	if scheme == "" {
		scheme = "HTTP"
	}
	return strings.ToLower(scheme) + "://" + net.JoinHostPort(host, port) + path
}
