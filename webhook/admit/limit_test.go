package admit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// recordingServer keeps what is registered on it.
type recordingServer struct {
	webhook.Server
	handlers map[string]http.Handler
}

func (s *recordingServer) Register(path string, h http.Handler) { s.handlers[path] = h }

// Admissions beyond the limit wait for a slot, across every path, and
// one whose caller gives up is answered 503 without being decided: a
// burst of pods cannot make a replica decide more than the limit at once.
func TestAdmissionsInFlightAreBounded(t *testing.T) {
	rec := &recordingServer{handlers: map[string]http.Handler{}}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	l := NewLimitedServer(rec, 3)
	l.SetMetrics(m)
	var now, most, decided atomic.Int32
	release := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		for {
			if m := most.Load(); n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		now.Add(-1)
		decided.Add(1)
	})
	l.Register("/a", slow)
	l.Register("/b", slow)
	var wg sync.WaitGroup
	for i := range 10 {
		path := []string{"/a", "/b"}[i%2]
		wg.Go(func() {
			rec.handlers[path].ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, path, nil))
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(m.admitting.WithLabelValues("waiting")) != 7 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := testutil.ToFloat64(m.admitting.WithLabelValues("waiting")); got != 7 {
		t.Fatalf("waiting gauge %v; want 7 of 10 with 3 slots", got)
	}
	if got := testutil.ToFloat64(m.admitting.WithLabelValues("deciding")); got != 3 {
		t.Errorf("deciding gauge %v; want 3", got)
	}
	// A caller that gives up while waiting: 503, never decided.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	w := httptest.NewRecorder()
	rec.handlers["/a"].ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/a", nil).WithContext(ctx))
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("a caller that gave up: %d; want 503", w.Code)
	}
	close(release)
	wg.Wait()
	if most.Load() != 3 || decided.Load() != 10 {
		t.Errorf("at most %d decided at once, %d decided; want 3 and 10", most.Load(), decided.Load())
	}
	for _, s := range []string{"waiting", "deciding"} {
		if got := testutil.ToFloat64(m.admitting.WithLabelValues(s)); got != 0 {
			t.Errorf("%s gauge %v after the burst; want 0", s, got)
		}
	}
}
