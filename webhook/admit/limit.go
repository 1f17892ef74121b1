package admit

import (
	"net/http"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// DefaultMaxInFlight is how many admissions a replica decides at once by
// default (--max-concurrent-admissions).
const DefaultMaxInFlight = 32

// LimitedServer is a webhook.Server whose handlers, together, decide at
// most a fixed number of admissions at once; the others wait their turn
// until the API server's own timeout gives up on them (its failurePolicy
// then decides). Each admission's inputs are bounded (api/bounds.go), so
// a replica's memory is bounded too, whatever a burst of pods says: one
// namespace cannot make the webhook run out of memory and take every
// opted-in pod of the cluster down with it.
type LimitedServer struct {
	webhook.Server
	slots   chan struct{}
	metrics *Metrics
}

// NewLimitedServer wraps s; max below 1 means DefaultMaxInFlight.
func NewLimitedServer(s webhook.Server, max int) *LimitedServer {
	if max < 1 {
		max = DefaultMaxInFlight
	}
	return &LimitedServer{Server: s, slots: make(chan struct{}, max)}
}

// SetMetrics counts the admissions in flight and waiting into m.
func (l *LimitedServer) SetMetrics(m *Metrics) { l.metrics = m }

// Register serves path with h, within the limit.
func (l *LimitedServer) Register(path string, h http.Handler) {
	l.Server.Register(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case l.slots <- struct{}{}:
		default:
			l.metrics.waiting(1)
			select {
			case l.slots <- struct{}{}:
				l.metrics.waiting(-1)
			case <-r.Context().Done():
				l.metrics.waiting(-1)
				http.Error(w, "stickydrain webhook: too many admissions at once", http.StatusServiceUnavailable)
				return
			}
		}
		l.metrics.inFlight(1)
		defer func() {
			l.metrics.inFlight(-1)
			<-l.slots
		}()
		h.ServeHTTP(w, r)
	}))
}
