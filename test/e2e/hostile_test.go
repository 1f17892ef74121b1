package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
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
	"github.com/stickydrain/stickydrain/test/must"
)

// hostile is the second tenant's namespace: opted in, and allowed onto
// the load balancer as the first team's is.
const hostile = "evil"

// Bounds the hostile scenario holds the webhook and the controller to:
// peak resident memory (VmHWM) and Runtime API connections open at once on
// one instance (the controller's passes, --concurrent-reconciles 8, its
// liveness probe and heartbeat, and the test's own observer).
const (
	hostileWebhookPeak    = 128 << 20
	hostileControllerPeak = 256 << 20
	hostileConnections    = 12
)

// TestAHostileTenantCannotStopARollout: while the first team rolls out
// with users holding sessions, a second namespace writes every input of a
// hostile tenant at once — regular-expression bombs in a Deployment's,
// a pod's and its Namespace's drain annotations, durations whose sum
// overflows, ten thousand upstream entries, one upstream ten thousand
// times, a backend the load balancer does not have, a slice naming two
// hundred pods that do not exist — and an HAProxy instance crashes in the
// middle of it. The first team's users see nothing (0 failed but those in
// flight through the crash, 0 misrouted, every session kept); the webhook
// and the controller stay under their memory and connection bounds; the
// crashed instance is filled and back in rotation although the hostile
// Services can never converge; every hostile input gets its refusal or
// Event.
func TestAHostileTenantCannotStopARollout(t *testing.T) {
	ctx, env := startEnv(t, Options{AlsoAllowed: []string{hostile}, Readiness: 0,
		// Backends the operator listed that no HAProxy has (a typo, one
		// not deployed yet): a Service mapping them cannot converge.
		AlsoListed: []string{"nosuch", "nosuch2", "ghost"}})
	k := env.Cluster.Client
	clients, obs := startRollout(t, ctx, env)

	webhookPID, controllerPID := env.webhook.Pid(), env.controllers()[0].Pid()
	conns := watchRuntimeConnections(ctx, env)

	// Refused at admission, each naming its annotation and bound.
	bomb := strings.Repeat(`\pL{1000}`, 100) // 900 bytes: 100,000 instructions, 24 MiB allocated to compile it on main
	small := strings.Repeat(`\pL{1000}`, 20)
	// In a selector, as in PromQL, a backslash is written twice.
	matchers := fmt.Sprintf(`m{a=~"%[1]s",b=~"%[1]s",c!~"%[1]s",d=~"%[1]s"}`, strings.ReplaceAll(small, `\`, `\\`))
	if err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hostile, Labels: map[string]string{api.OptInLabel: api.LabelEnabled}}}); err != nil {
		t.Fatal(err)
	}
	refusals := []struct {
		what        string
		annotations map[string]string
		want        string
	}{
		{"a pattern that expands to 100,000 instructions", map[string]string{api.AnnotationFormat: api.FormatMatch, api.AnnotationPattern: bomb}, "expands to more than"},
		{"four metric matchers of 20,000 instructions each", map[string]string{api.AnnotationFormat: api.FormatPrometheus, api.AnnotationMetric: matchers}, "expands to more than"},
		{"a shutdown margin that overflows the grace period", map[string]string{api.AnnotationMaxWait: "720h", api.AnnotationShutdownMargin: "2562047h"}, api.AnnotationShutdownMargin},
		{"a max-wait past the bound", map[string]string{api.AnnotationMaxWait: "2562047h"}, "too long"},
	}
	for i, r := range refusals {
		tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "bomb"}, Annotations: r.annotations},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: env.appImage}}}}
		err := k.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: hostile, Name: fmt.Sprintf("bomb-%d", i)},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "bomb"}}, Template: tmpl}})
		if err == nil || !strings.Contains(err.Error(), r.want) {
			t.Errorf("a Deployment with %s: %v; want it refused naming %q", r.what, err, r.want)
		}
		// A bare pod opts in by its own label (the Namespace's opts in the
		// pods of workloads).
		err = k.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: hostile, Name: fmt.Sprintf("bomb-%d", i), Annotations: r.annotations,
			Labels: map[string]string{api.OptInLabel: api.LabelEnabled}}, Spec: tmpl.Spec})
		if err == nil || !strings.Contains(err.Error(), r.want) {
			t.Errorf("a pod with %s: %v; want it refused naming %q", r.what, err, r.want)
		}
	}
	// The same bomb on the Namespace reaches every pod of it.
	var ns corev1.Namespace
	must.OK(t, k.Get(ctx, client.ObjectKey{Name: hostile}, &ns))
	ns.Annotations = map[string]string{api.AnnotationFormat: api.FormatPrometheus, api.AnnotationMetric: matchers}
	must.OK(t, k.Update(ctx, &ns))
	if err := k.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: hostile, Name: "from-namespace", Labels: map[string]string{api.OptInLabel: api.LabelEnabled}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: env.appImage}}}}); err == nil || !strings.Contains(err.Error(), "expands to more than") {
		t.Errorf("a pod under the Namespace's bomb: %v; want it refused", err)
	}

	// Services that cannot converge, or cost per entry.
	many := make([]string, 10000)
	for i := range many {
		many[i] = fmt.Sprintf("edge/u%d", i)
	}
	service := func(name, upstreams string) {
		t.Helper()
		must.OK(t, k.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: hostile, Name: name, Annotations: map[string]string{api.AnnotationUpstreams: upstreams}},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}},
		}))
	}
	service("missing", "edge/nosuch")
	service("many", strings.Join(many, ","))
	service("repeat", strings.TrimSuffix(strings.Repeat("edge/nosuch2,", 10000), ","))
	service("ghost", "edge/ghost")
	ghosts := make([]discoveryv1.Endpoint, 200)
	for i := range ghosts {
		ghosts[i] = discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("198.19.%d.%d", i/250, 1+i%250)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: hostile, Name: fmt.Sprintf("ghost-%d", i)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	}
	must.OK(t, k.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: hostile, Name: "ghost-1", Labels: map[string]string{
			discoveryv1.LabelServiceName: "ghost", discoveryv1.LabelManagedBy: "someone.example"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		Endpoints:   ghosts,
	}))
	event := func(name, reason, contains string) bool {
		var evs eventsv1.EventList
		if k.List(ctx, &evs, client.InNamespace(hostile)) != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, contains) {
				return true
			}
		}
		return false
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "UpstreamCannotHold on evil/missing", func() bool { return event("missing", api.ReasonCannotHold, "nosuch") })
	must.Eventually(t, ctx, 300*time.Millisecond, "UpstreamCannotHold on evil/repeat", func() bool { return event("repeat", api.ReasonCannotHold, "nosuch2") })
	must.Eventually(t, ctx, 300*time.Millisecond, "BadUpstreamMapping on evil/many", func() bool { return event("many", api.ReasonBadMapping, "more than 32 distinct upstreams") })
	must.Eventually(t, ctx, 300*time.Millisecond, "EndpointNotAllowed on evil/ghost", func() bool { return event("ghost", api.ReasonEndpointNotAllowed, "does not exist") })

	// An instance crashes while the hostile Services cannot converge: it
	// is filled and back in rotation all the same.
	killed := time.Now()
	if err := env.RestartHAProxy(1); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "the restarted instance filled and back in rotation", func() bool { return env.InstanceReady(1) })
	t.Logf("the restarted instance was filled and back in rotation %v after the crash, beside four Services that cannot converge", time.Since(killed).Round(time.Millisecond))

	finishRollout(t, ctx, env, clients, obs)
	assertUsersKeptEverything(t, clients, obs, 3)

	most := conns.stop()
	for i, n := range most {
		t.Logf("instance %d: at most %d Runtime API connections at once during the hostile phase (bound %d)", i+1, n, hostileConnections)
		if n > hostileConnections {
			t.Errorf("instance %d: %d Runtime API connections at once; want at most %d", i+1, n, hostileConnections)
		}
	}
	for _, p := range []struct {
		name  string
		pid   int
		bound int64
	}{{"webhook", webhookPID, hostileWebhookPeak}, {"controller", controllerPID, hostileControllerPeak}} {
		peak, err := peakRSS(p.pid)
		if err != nil {
			t.Errorf("%s: %v", p.name, err)
			continue
		}
		t.Logf("%s: peak resident memory %d MiB (bound %d MiB)", p.name, peak>>20, p.bound>>20)
		if peak > p.bound {
			t.Errorf("%s: peak resident memory %d MiB; want under %d MiB", p.name, peak>>20, p.bound>>20)
		}
	}
}

// peakRSS is a process's peak resident set (VmHWM), in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the peak memory of pid %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("pid %d: no VmHWM", pid)
}

// connWatch samples, every 20 ms, the connections open on each
// instance's Runtime API socket (/proc/net/unix: the accepted sockets
// carry the path the listener was bound to), and keeps the most seen at
// once.
type connWatch struct {
	mu   sync.Mutex
	most []int
	stop func() []int
}

func watchRuntimeConnections(ctx context.Context, env *Env) *connWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &connWatch{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			hs := env.haproxies()
			counts := make([]int, len(hs))
			if b, err := os.ReadFile("/proc/net/unix"); err == nil {
				for line := range strings.SplitSeq(string(b), "\n") {
					f := strings.Fields(line)
					// Num RefCount Protocol Flags Type St Inode Path; St 03 connected.
					if len(f) < 8 || f[5] != "03" {
						continue
					}
					for i, h := range hs {
						// HAProxy binds <socket>.<pid>.tmp and renames it.
						if f[7] == h.Socket || strings.HasPrefix(f[7], h.Socket+".") {
							counts[i]++
						}
					}
				}
			}
			w.mu.Lock()
			for i, n := range counts {
				if i >= len(w.most) {
					w.most = append(w.most, 0)
				}
				w.most[i] = max(w.most[i], n)
			}
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	w.stop = func() []int {
		cancel()
		<-done
		w.mu.Lock()
		defer w.mu.Unlock()
		return append([]int(nil), w.most...)
	}
	return w
}
