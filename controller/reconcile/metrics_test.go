package reconcile

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/endpoints"
	"github.com/stickydrain/stickydrain/controller/plan"
)

// TestForgetDropsOnlyTheReleasedUpstreamsGauges: an upstream no Service
// maps any more leaves no gauge behind (a stale slots or drain gauge would
// keep an alert firing); the others stay.
func TestForgetDropsOnlyTheReleasedUpstreamsGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, up := range []string{"shop", "cart"} {
		for _, st := range []string{"active", "draining", "down"} {
			m.servers.WithLabelValues("edge", up, st).Set(1)
		}
		m.oldestDrain.WithLabelValues("edge", up).Set(1)
		m.slots.WithLabelValues("edge", up).Set(8)
		m.slotsUsed.WithLabelValues("edge", up).Set(3)
	}
	m.forget(upstreamRef{LB: "edge", Upstream: "shop"})
	left := seriesByUpstream(t, reg)
	for name, n := range left {
		if strings.HasSuffix(name, " shop") {
			t.Errorf("%s: %d series left after forget", name, n)
		}
	}
	if left["stickydrain_controller_servers cart"] != 3 || left["stickydrain_controller_slots cart"] != 1 || left["stickydrain_controller_oldest_drain_start_timestamp_seconds cart"] != 1 {
		t.Errorf("the other upstream's gauges went too: %v", left)
	}
}

// TestCountersStartAtZero: the counters alerts take increase() and rate()
// of exist at 0 before their first count — every result of a
// configuration change from the start, every load balancer's errors and
// refusals once it is configured — and a load balancer taken out of the
// configuration leaves none behind.
func TestCountersStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	two := &config.Config{LoadBalancers: []config.LoadBalancer{{Name: "edge"}, {Name: "plus"}}}
	m.loadBalancers(nil, two)
	m.lbErrors.WithLabelValues("edge", "read").Inc()
	series := func() map[string]float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, f := range families {
			for _, s := range f.GetMetric() {
				var labels []string
				for _, l := range s.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = s.GetCounter().GetValue()
			}
		}
		return out
	}
	got := series()
	for name, want := range map[string]float64{
		"stickydrain_controller_config_changes_total{result=applied}":               0,
		"stickydrain_controller_config_changes_total{result=invalid}":               0,
		"stickydrain_controller_config_changes_total{result=revoking}":              0,
		"stickydrain_controller_config_changes_total{result=error}":                 0,
		"stickydrain_controller_lb_errors_total{call=read,lb=edge}":                 1,
		"stickydrain_controller_lb_errors_total{call=apply,lb=plus}":                0,
		"stickydrain_controller_lb_errors_total{call=discover,lb=plus}":             0,
		"stickydrain_controller_refusals_total{lb=edge,reason=NamespaceNotAllowed}": 0,
		"stickydrain_controller_refusals_total{lb=plus,reason=OutsideCIDRs}":        0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s: %v (there: %v), want %v", name, v, ok, want)
		}
	}
	if _, ok := got["stickydrain_controller_refusals_total{lb=edge,reason=UnknownLoadBalancer}"]; ok {
		t.Errorf("UnknownLoadBalancer started under a configured load balancer's name")
	}
	m.loadBalancers(two, &config.Config{LoadBalancers: []config.LoadBalancer{{Name: "edge"}}})
	for name := range series() {
		if strings.Contains(name, "lb=plus") {
			t.Errorf("%s left after plus left the configuration", name)
		}
	}
	if _, ok := series()["stickydrain_controller_lb_errors_total{call=read,lb=edge}"]; !ok {
		t.Errorf("edge's counts went with plus")
	}
}

// An upstream name labels series only once an instance of the operator's
// load balancer has read it: names a user writes into an annotation that
// no instance has (thousands, across Services) make no series.
func TestGaugesOnlyForUpstreamsAnInstanceHas(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Metrics: m}
	counts := map[plan.State]int{plan.Active: 2}
	for i := range 1000 {
		r.recordGauges(upstreamRef{LB: "edge", Upstream: fmt.Sprintf("bogus%d", i)}, []instanceResult{{}, {}}, counts, time.Now(), time.Now())
	}
	r.recordGauges(upstreamRef{LB: "edge", Upstream: "shop"}, []instanceResult{{}, {read: true}}, counts, time.Now(), time.Now())
	upstreams := map[string]bool{}
	for key := range seriesByUpstream(t, reg) {
		_, up, _ := strings.Cut(key, " ")
		upstreams[up] = true
	}
	if len(upstreams) != 1 || !upstreams["shop"] {
		t.Errorf("series for upstreams %v; want shop's only", upstreams)
	}
	// The drain over: its series go, even on a pass no instance answered.
	r.recordGauges(upstreamRef{LB: "edge", Upstream: "shop"}, []instanceResult{{}, {}}, counts, time.Time{}, time.Time{})
	for key := range seriesByUpstream(t, reg) {
		if strings.Contains(key, "oldest_drain") || strings.Contains(key, "drain_deadline") {
			t.Errorf("%s left once the drain ended, on a pass that read no instance", key)
		}
	}
}

// seriesByUpstream counts reg's series by "metric upstream", for those
// labelled by upstream.
func seriesByUpstream(t *testing.T, reg *prometheus.Registry) map[string]int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "upstream" {
					out[f.GetName()+" "+l.GetValue()]++
				}
			}
		}
	}
	return out
}

// The drain deadline is the first grace period to end among the pods of
// the upstream's draining servers, read from the cache: a pod of the same
// name but another uid (a StatefulSet's next) and pods not terminating do
// not count; none draining gives none.
func TestTheDrainDeadlineIsTheFirstGracePeriodToEnd(t *testing.T) {
	at := func(s int) *metav1.Time { return &metav1.Time{Time: time.Unix(1_800_000_000+int64(s), 0)} }
	pod := func(name, uid string, deleted *metav1.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(uid), DeletionTimestamp: deleted, Finalizers: []string{"test/keep"}}}
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		pod("web-a", "a", at(600)), pod("web-b", "b", at(300)), pod("web-c", "c-next", at(100)), pod("web-d", "d", nil)).Build()}
	ep := func(name, uid string, st plan.State) endpoints.Endpoint {
		return endpoints.Endpoint{State: st, PodNamespace: "shop", PodName: name, PodUID: types.UID(uid), Terminating: st == plan.Draining}
	}
	desired := map[netip.AddrPort]endpoints.Endpoint{
		netip.MustParseAddrPort("198.18.0.1:8080"): ep("web-a", "a", plan.Draining),
		netip.MustParseAddrPort("198.18.0.2:8080"): ep("web-b", "b", plan.Draining),
		netip.MustParseAddrPort("198.18.0.3:8080"): ep("web-c", "c", plan.Draining), // the pod of that name is another
		netip.MustParseAddrPort("198.18.0.4:8080"): ep("web-d", "d", plan.Active),
		netip.MustParseAddrPort("198.18.0.5:8080"): ep("web-gone", "e", plan.Draining),
	}
	if got := r.drainDeadline(context.Background(), desired); !got.Equal(at(300).Time) {
		t.Errorf("deadline %v, want web-b's %v", got, at(300).Time)
	}
	delete(desired, netip.MustParseAddrPort("198.18.0.1:8080"))
	delete(desired, netip.MustParseAddrPort("198.18.0.2:8080"))
	if got := r.drainDeadline(context.Background(), desired); !got.IsZero() {
		t.Errorf("no drain of a known pod: deadline %v, want none", got)
	}
}
