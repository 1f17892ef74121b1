package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/drivers"
	"github.com/stickydrain/stickydrain/controller/tenancy"
)

// TestOwnedDecidesEachServiceOnce: deciding whether a Service owns its
// upstream claims it once — the ownership check among the Services mapping
// the upstream reuses the Service's own verdict instead of reading its
// Namespace's labels again — and still finds the older Service that owns
// an upstream two Services map.
func TestOwnedDecidesEachServiceOnce(t *testing.T) {
	cfg, err := config.Parse([]byte(`
loadBalancers:
  - name: edge
    type: haproxy
    instances: {static: ["tcp://127.0.0.1:1"]}
    allowedNamespaces: {selector: {matchLabels: {team: shop}}}
    upstreams: [{name: web}]
`), drivers.New())
	if err != nil {
		t.Fatal(err)
	}
	p, err := tenancy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !p.NeedsNamespaceLabels() {
		t.Fatal("the rule selects namespaces by label; the policy should read them")
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	svc := func(name string, age time.Duration) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name,
			CreationTimestamp: metav1.NewTime(time.Now().Add(-age).Truncate(time.Second)),
			Annotations:       map[string]string{api.AnnotationUpstreams: "edge/web"}}}
	}
	older, newer := svc("web", time.Hour), svc("web-2", time.Minute)
	nsGets := 0
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "shop"}}}, older).
		WithIndex(&corev1.Service{}, indexUpstream, byUpstream).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Namespace); ok {
				nsGets++
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, Recorder: rec, Metrics: m, current: cfg, policy: p}
	ctx := context.Background()
	ups, err := ParseUpstreams(older.Annotations[api.AnnotationUpstreams], cfg)
	if err != nil {
		t.Fatal(err)
	}

	owned, refused, err := r.owned(ctx, p, older, ups)
	if err != nil || len(owned) != 1 || len(refused) != 0 {
		t.Fatalf("the only Service mapping edge/web: owned %v, refused %v, %v", owned, refused, err)
	}
	if nsGets != 1 {
		t.Errorf("deciding one Service read its Namespace %d times; want once", nsGets)
	}

	// A second, newer Service mapping the same upstream: it does not own
	// it (the older one does, a conflict Event says so), and the older
	// one is claimed once, itself not again.
	if err := c.Create(ctx, newer); err != nil {
		t.Fatal(err)
	}
	nsGets = 0
	owned, _, err = r.owned(ctx, p, newer, ups)
	if err != nil || len(owned) != 0 {
		t.Fatalf("a newer Service mapping an upstream an older one holds: owned %v, %v", owned, err)
	}
	if nsGets != 2 {
		t.Errorf("deciding the newer Service read Namespaces %d times; want twice (itself, and the older Service)", nsGets)
	}
	select {
	case e := <-rec.Events:
		if want := api.ReasonUpstreamConflict; !strings.Contains(e, want) {
			t.Errorf("event %q; want %s", e, want)
		}
	default:
		t.Error("no UpstreamConflict Event for the newer Service")
	}
}
