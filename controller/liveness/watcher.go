package liveness

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/stickydrain/stickydrain/controller/backend"
)

// Source is what the Watcher needs of the controller.
type Source interface {
	// Instances lists every instance, by load-balancer name, including
	// those of a Service-discovered load balancer that are not ready yet
	// (a fresh replica must be filled before it may become ready).
	Instances(ctx context.Context) (map[string][]backend.Instance, error)
	// Required lists the keys of the Services mapped onto load balancer
	// lb: each must be done on a process before it is filled.
	Required(ctx context.Context, lb string) ([]string, error)
	// Renew is told that instance inst of lb is a process not seen
	// before (a first sight, a restart, a reload, or back after missed
	// probes): every Service mapped onto lb is to be brought in step on it
	// now.
	Renew(lb string, inst backend.Instance)
}

// Watcher probes every instance each Every and feeds Tracker; it sets the
// readiness marker of each filled instance. It runs only on the leader
// (it changes load balancers).
type Watcher struct {
	Tracker *Tracker
	Source  Source
	// Every is the probe interval; 0 means 1s.
	Every time.Duration
	Log   logr.Logger
	// Probed, when set, counts each probe by load balancer and result
	// ("ok", "new", "error"), and Marks each marker set.
	Probed func(lb, result string)
	Marks  func(lb string)
	// StaleAfter, when set, is the marker age past which an instance is
	// filled and marked again; 0: the instance's own MarkerFreshFor.
	StaleAfter time.Duration
}

func (w *Watcher) staleAfter(hb backend.Heartbeater) time.Duration {
	if w.StaleAfter > 0 {
		return w.StaleAfter
	}
	return hb.MarkerFreshFor()
}

// Start probes until ctx ends.
func (w *Watcher) Start(ctx context.Context) error {
	every := w.Every
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		w.Probe(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Probe reads every instance's identity once, concurrently, renews the
// new ones and marks the filled ones.
func (w *Watcher) Probe(ctx context.Context) {
	all, err := w.Source.Instances(ctx)
	if err != nil {
		w.Log.Error(err, "listing load-balancer instances")
		return
	}
	keep := map[string]bool{}
	var wg sync.WaitGroup
	for lb, insts := range all {
		for _, inst := range insts {
			keep[inst.ID()] = true
			p, ok := inst.(backend.Prober)
			if !ok {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				id, err := p.Identity(pctx)
				if err != nil {
					// It may miss changes while unreachable: when it answers
					// again it is filled and marked again, as a new process.
					w.Tracker.Reset(inst.ID())
					w.count(lb, "error")
					w.Log.V(1).Info("probing instance", "lb", lb, "instance", inst.ID(), "error", err.Error())
					return
				}
				if hb, ok := inst.(backend.Heartbeater); ok && hb.HasMarker() && w.Tracker.IsMarked(inst.ID()) {
					// A marker nobody confirmed for a while (a partition of
					// the heartbeats, a stalled controller) is stale: fill and
					// mark the process again.
					if age, ok, err := hb.MarkerAge(pctx); err == nil && (!ok || age > w.staleAfter(hb)) {
						w.Log.Info("readiness marker stale or gone; bringing the instance in step before marking it again",
							"lb", lb, "instance", inst.ID(), "age", age.String(), "present", ok)
						w.Tracker.Reset(inst.ID())
					}
				}
				before := w.Tracker.Identity(inst.ID())
				if w.Tracker.Observe(inst.ID(), id) {
					w.count(lb, "new")
					restarted := before != ""
					if restarted {
						w.Log.Info("load-balancer instance is a new process (restart, reload or crash); bringing every upstream in step on it now",
							"lb", lb, "instance", inst.ID(), "was", before, "now", id)
					} else {
						w.Log.Info("load-balancer instance found; filling it", "lb", lb, "instance", inst.ID(), "process", id)
					}
					w.Source.Renew(lb, inst)
					return
				}
				w.count(lb, "ok")
			}()
		}
	}
	wg.Wait()
	w.Tracker.Forget(keep)
	for lb, insts := range all {
		w.Mark(ctx, lb, insts)
	}
}

// Mark sets the readiness marker on every instance of lb that is filled
// and not marked yet.
func (w *Watcher) Mark(ctx context.Context, lb string, insts []backend.Instance) {
	// Listing the load balancer's Services costs a copy of each from the
	// cache: only when some instance still waits for its marker.
	waiting := false
	for _, inst := range insts {
		if _, ok := inst.(backend.Marker); ok && !w.Tracker.IsMarked(inst.ID()) {
			waiting = true
		}
	}
	if !waiting {
		return
	}
	required, err := w.Source.Required(ctx, lb)
	if err != nil {
		w.Log.Error(err, "listing the Services mapped onto a load balancer", "lb", lb)
		return
	}
	for _, inst := range insts {
		m, ok := inst.(backend.Marker)
		if !ok {
			continue
		}
		id, due := w.Tracker.MarkDue(inst.ID(), required)
		if !due {
			continue
		}
		if err := m.MarkFilled(ctx, id); err != nil {
			w.Log.Error(err, "setting the readiness marker", "lb", lb, "instance", inst.ID())
			continue
		}
		w.Tracker.Marked(inst.ID(), id)
		if w.Marks != nil {
			w.Marks(lb)
		}
		w.Log.Info("load-balancer instance filled: readiness marker set", "lb", lb, "instance", inst.ID(), "process", id, "services", len(required))
	}
}

func (w *Watcher) count(lb, result string) {
	if w.Probed != nil {
		w.Probed(lb, result)
	}
}

// Heartbeat refreshes the readiness marker of every instance each Every.
// It runs on every controller replica, leader or not (NeedLeaderElection
// is false): the marker means "a controller reaches this instance", and a
// leader hand-over must not let it age out.
type Heartbeat struct {
	Instances func(ctx context.Context) (map[string][]backend.Instance, error)
	// Every is the interval; 0 means 500ms (the sample configuration
	// refuses a marker older than 2 s).
	Every time.Duration
	Log   logr.Logger
}

// NeedLeaderElection is false: every replica refreshes.
func (h *Heartbeat) NeedLeaderElection() bool { return false }

// Start refreshes until ctx ends.
func (h *Heartbeat) Start(ctx context.Context) error {
	every := h.Every
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		all, err := h.Instances(ctx)
		if err != nil {
			continue
		}
		var wg sync.WaitGroup
		for lb, insts := range all {
			for _, inst := range insts {
				hb, ok := inst.(backend.Heartbeater)
				if !ok {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, cancel := context.WithTimeout(ctx, every)
					defer cancel()
					if err := hb.Heartbeat(c); err != nil {
						h.Log.V(1).Info("refreshing the readiness marker", "lb", lb, "instance", inst.ID(), "error", err.Error())
					}
				}()
			}
		}
		wg.Wait()
	}
}
