package reconcile

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/drivers"
	"github.com/stickydrain/stickydrain/controller/endpoints"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/controller/tenancy"
)

// recorded is one Event a test recorder took: the object it is about and
// what it says.
type recorded struct {
	namespace, name, reason, action, note string
}

// eventLog records Events with the object they are about, which
// events.FakeRecorder leaves out.
type eventLog struct {
	mu  sync.Mutex
	all []recorded
}

func (l *eventLog) Eventf(regarding, _ runtime.Object, _, reason, action, note string, args ...any) {
	o := regarding.(client.Object)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, recorded{o.GetNamespace(), o.GetName(), reason, action, fmt.Sprintf(note, args...)})
}

func (l *eventLog) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	l.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func (l *eventLog) take() []recorded {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.all
	l.all = nil
	return out
}

// admission is a Reconciler that only admits endpoints: cache is what the
// manager's cache holds, live what the API server holds, and reads counts
// the live reads of Pods.
type admission struct {
	r      *Reconciler
	p      *tenancy.Policy
	events *eventLog
	svc    *corev1.Service
	mu     sync.Mutex
	reads  int
}

func newAdmission(t *testing.T, cache, live []client.Object) *admission {
	t.Helper()
	cfg, err := config.Parse([]byte(`
loadBalancers:
  - name: edge
    type: haproxy
    instances: {static: ["tcp://127.0.0.1:1"]}
    allowedNamespaces: {names: [shop]}
    allowedCIDRs: [198.18.0.0/15]
`), drivers.New())
	if err != nil {
		t.Fatal(err)
	}
	p, err := tenancy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a := &admission{p: p, events: &eventLog{},
		svc: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}}
	a.r = &Reconciler{
		Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(cache...).Build(),
		APIReader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(live...).
			WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*corev1.Pod); ok {
					a.mu.Lock()
					a.reads++
					a.mu.Unlock()
				}
				return c.Get(ctx, key, obj, opts...)
			}}).Build(),
		Recorder: a.events, Metrics: m, current: cfg, policy: p,
	}
	return a
}

// admit runs one pass's admission on load balancer edge.
func (a *admission) admit(t *testing.T, desired map[netip.AddrPort]endpoints.Endpoint) map[netip.AddrPort]endpoints.Endpoint {
	t.Helper()
	out, err := a.r.admitted(context.Background(), a.p, a.svc, "edge", desired)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (a *admission) liveReads() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reads
}

func (a *admission) refusals(reason tenancy.Reason) float64 {
	var m dto.Metric
	if err := a.r.Metrics.refusals.WithLabelValues("edge", string(reason)).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func testPod(ns, name string, phase corev1.PodPhase, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: corev1.PodStatus{Phase: phase}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

func active(ns, pod string) endpoints.Endpoint {
	return endpoints.Endpoint{State: plan.Active, PodNamespace: ns, PodName: pod}
}

func addr(s string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(s), 8080) }

// TestStripPodKeepsThePhase: the cached Pod says whether it has finished,
// so that a finished Pod's address is not taken for its own.
func TestStripPodKeepsThePhase(t *testing.T) {
	for _, phase := range []corev1.PodPhase{corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed} {
		o, err := stripPod(testPod("shop", "web-0", phase, "198.18.0.5"))
		if err != nil {
			t.Fatal(err)
		}
		if got := o.(*corev1.Pod).Status.Phase; got != phase {
			t.Errorf("stripped a %s Pod to phase %q", phase, got)
		}
	}
}

// TestAdmittedRefusesFinishedPods: a Pod that has succeeded or failed
// keeps its addresses in its status, but the network may have given them
// to another pod, of another namespace: an endpoint naming it is refused,
// whether the cache or the API server says it has finished.
func TestAdmittedRefusesFinishedPods(t *testing.T) {
	for _, phase := range []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed} {
		for _, where := range []string{"cache", "API server"} {
			t.Run(string(phase)+" in the "+where, func(t *testing.T) {
				pod := testPod("shop", "job-0", phase, "198.18.0.5")
				var a *admission
				if where == "cache" {
					a = newAdmission(t, []client.Object{pod}, []client.Object{pod.DeepCopy()})
				} else {
					a = newAdmission(t, nil, []client.Object{pod})
				}
				if out := a.admit(t, map[netip.AddrPort]endpoints.Endpoint{addr("198.18.0.5"): active("shop", "job-0")}); len(out) != 0 {
					t.Errorf("admitted %v, the address of a %s Pod", out, phase)
				}
				evs := a.events.take()
				want := "Pod shop/job-0, which has finished (" + string(phase) + ")"
				if len(evs) != 1 || evs[0].reason != api.ReasonEndpointNotAllowed || !strings.Contains(evs[0].note, want) {
					t.Errorf("events %+v; want one EndpointNotAllowed saying %q", evs, want)
				}
				if got := a.refusals(tenancy.PodFinished); got != 1 {
					t.Errorf("refusals{reason=PodFinished} = %v; want 1", got)
				}
				if where == "cache" && a.liveReads() != 0 {
					t.Errorf("%d live reads of a Pod the cache says has finished; a finished Pod never runs again", a.liveReads())
				}
			})
		}
	}
	// A running Pod with the same address is still a server.
	pod := testPod("shop", "web-0", corev1.PodRunning, "198.18.0.5")
	a := newAdmission(t, []client.Object{pod}, []client.Object{pod.DeepCopy()})
	if out := a.admit(t, map[netip.AddrPort]endpoints.Endpoint{addr("198.18.0.5"): active("shop", "web-0")}); len(out) != 1 {
		t.Errorf("a running Pod's own address refused: %+v", a.events.take())
	}
}

// TestAdmittedNamesTheServicesNamespace: an endpoint whose targetRef has
// no namespace names a Pod of the Service's namespace (as the tenancy rules
// read it); the admitted endpoint says so, so that the Events on its Pod
// land in that namespace, not in default; and refusals land on the
// Service, in its namespace.
func TestAdmittedNamesTheServicesNamespace(t *testing.T) {
	pod := testPod("shop", "web-0", corev1.PodRunning, "198.18.0.5")
	a := newAdmission(t, []client.Object{pod}, []client.Object{pod.DeepCopy()})
	out := a.admit(t, map[netip.AddrPort]endpoints.Endpoint{
		addr("198.18.0.5"): active("", "web-0"),
		addr("198.18.0.6"): active("", "web-0"),
		addr("198.18.0.7"): active("", "gone"),
	})
	if e, ok := out[addr("198.18.0.5")]; !ok || e.PodNamespace != "shop" || len(out) != 1 {
		t.Errorf("admitted %+v; want only 198.18.0.5 naming Pod shop/web-0", out)
	}
	evs := a.events.take()
	if len(evs) != 2 {
		t.Errorf("events %+v; want two refusals", evs)
	}
	for _, e := range evs {
		if e.namespace != "shop" || e.name != "web" || e.reason != api.ReasonEndpointNotAllowed {
			t.Errorf("event %+v; want EndpointNotAllowed on Service shop/web", e)
		}
	}
}

// TestAdmittedReadsAbsentPodsOnce: an endpoint naming a Pod that exists
// nowhere costs one read of the API server, not one a pass.
func TestAdmittedReadsAbsentPodsOnce(t *testing.T) {
	a := newAdmission(t, nil, nil)
	desired := map[netip.AddrPort]endpoints.Endpoint{addr("198.18.0.5"): active("shop", "ghost"), addr("198.18.0.6"): active("shop", "ghost")}
	for pass := 0; pass < 3; pass++ {
		if out := a.admit(t, desired); len(out) != 0 {
			t.Fatalf("pass %d admitted %v, naming a Pod that does not exist", pass, out)
		}
		if evs := a.events.take(); len(evs) != 2 || !strings.Contains(evs[0].note, "which does not exist") {
			t.Errorf("pass %d: events %+v; want two saying the Pod does not exist", pass, evs)
		}
	}
	if got := a.liveReads(); got != 1 {
		t.Errorf("%d live reads of one absent Pod in three passes; want 1", got)
	}
	if got := a.refusals(tenancy.NotPodAddress); got != 6 {
		t.Errorf("refusals{reason=NotPodAddress} = %v; want 6, every refusal of every pass", got)
	}
}

// TestAdmittedRateLimitsLiveReads: a flood of endpoints naming Pods that
// are not in the cache costs at most the burst of live reads at once; the
// Pods not read are refused this pass, never admitted unread, and read on
// a later pass.
func TestAdmittedRateLimitsLiveReads(t *testing.T) {
	const n = 200
	real := testPod("shop", "real", corev1.PodRunning, "198.19.0.1")
	a := newAdmission(t, nil, []client.Object{real})
	a.r.pods.clock = testingclock.NewFakeClock(time.Now()) // no token comes back during the pass
	desired := map[netip.AddrPort]endpoints.Endpoint{}
	for i := range n {
		desired[addr(fmt.Sprintf("198.18.%d.%d", i/250, i%250+1))] = active("shop", fmt.Sprintf("ghost-%d", i))
	}
	// The one real Pod sorts after the ghosts' addresses: by the time it
	// is reached, the burst is spent.
	desired[addr("198.19.0.1")] = active("shop", "real")
	out := a.admit(t, desired)
	if reads := a.liveReads(); reads != podReadBurst {
		t.Errorf("%d live reads in one pass; want the burst, %d", reads, podReadBurst)
	}
	if len(out) != 0 {
		t.Errorf("admitted %v without reading its Pod", out)
	}
	if got, want := a.refusals(tenancy.PodNotVerified), float64(n+1-podReadBurst); got != want {
		t.Errorf("refusals{reason=PodNotVerified} = %v; want %v, every endpoint not read", got, want)
	}
}

// TestAdmittedBoundsEventsPerPass: a Service with many refused endpoints
// gets a few EndpointNotAllowed Events a pass and one that counts the
// rest; the metric counts every one.
func TestAdmittedBoundsEventsPerPass(t *testing.T) {
	a := newAdmission(t, nil, nil)
	desired := map[netip.AddrPort]endpoints.Endpoint{}
	for i := range 30 {
		desired[addr(fmt.Sprintf("198.18.0.%d", i+1))] = endpoints.Endpoint{State: plan.Active}
	}
	for pass := 0; pass < 2; pass++ {
		if out := a.admit(t, desired); len(out) != 0 {
			t.Fatalf("admitted %v, endpoints without a Pod", out)
		}
		evs := a.events.take()
		if len(evs) != 11 {
			t.Fatalf("pass %d: %d Events; want 11 (10 endpoints and a summary)", pass, len(evs))
		}
		var actions []string
		for _, e := range evs[:10] {
			if e.reason != api.ReasonEndpointNotAllowed || !strings.Contains(e.note, "names no Pod") {
				t.Errorf("event %+v; want EndpointNotAllowed naming no Pod", e)
			}
			actions = append(actions, e.action)
		}
		// The same ten each pass, the lowest addresses: each is one series.
		if want := "Admit 198.18.0.1 on edge"; actions[0] != want || !slices.Contains(actions, "Admit 198.18.0.10 on edge") {
			t.Errorf("pass %d: actions %v; want the ten lowest addresses", pass, actions)
		}
		last := evs[10]
		if last.reason != api.ReasonEndpointNotAllowed || last.namespace != "shop" || last.name != "web" || !strings.Contains(last.note, "20 more endpoints") {
			t.Errorf("summary %+v; want EndpointNotAllowed on shop/web counting 20 more endpoints", last)
		}
	}
	if got := a.refusals(tenancy.WithoutPod); got != 60 {
		t.Errorf("refusals{reason=WithoutPod} = %v; want 60", got)
	}
}
