// Package liveness follows each load-balancer instance's process: it tells
// a restarted, reloaded or new process from the one the controller last
// filled, and says when a process has been filled since it started, so
// that its readiness marker can be set.
//
// The core, Tracker, is plain bookkeeping with no I/O: it is fed the
// identity each probe reads (HAProxy's Pid and start time, NGINX Plus'
// generation and load time) and the Services done on each instance
// (everything they ask of it applied, or their mapping refused), and
// answers two questions — did this instance become a new process (repair
// it now), and is it filled (mark it ready). Watcher is the loop that
// probes every instance about once a second and feeds the Tracker.
//
// Decision table of Tracker.Observe (identity as read by a probe):
//
//	known identity │ read identity │ result
//	───────────────┼───────────────┼──────────────────────────────────────
//	none           │ X             │ New: fill it; nothing done yet
//	X              │ X             │ nothing
//	X              │ Y             │ New: fill it again; done forgotten,
//	               │               │ marker due again once filled
//
// An instance counts as filled for identity X when every Service that maps
// onto its load balancer is done on it since X was first seen: its
// upstreams converged there, or its mapping was refused (a refused Service
// must not keep every instance of a shared load balancer unready). A
// Service recorded done under an identity other than the current one is
// ignored: it was made on a process that is gone.
package liveness

import (
	"sort"
	"sync"
)

// Tracker holds, per instance, the process identity last read and what
// is done on that process. It is safe for concurrent use.
type Tracker struct {
	mu   sync.Mutex
	inst map[string]*process
}

type process struct {
	identity string
	done     map[string]bool // Service keys done on this process
	marked   bool            // its readiness marker is set
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker { return &Tracker{inst: map[string]*process{}} }

// Observe records the identity a probe read on instance id and reports
// whether it is a process the Tracker had not seen: a first sight, a
// restart or a reload. An empty identity (a probe that failed) changes
// nothing.
func (t *Tracker) Observe(id, identity string) (isNew bool) {
	if identity == "" {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.inst[id]
	if p != nil && p.identity == identity {
		return false
	}
	t.inst[id] = &process{identity: identity, done: map[string]bool{}}
	return true
}

// Identity is the identity last observed on instance id ("" when none).
func (t *Tracker) Identity(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.inst[id]; p != nil {
		return p.identity
	}
	return ""
}

// Done records that service is done on instance id's process
// identity. It is ignored when identity is not the current one.
func (t *Tracker) Done(id, identity, service string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.inst[id]; p != nil && identity != "" && p.identity == identity {
		p.done[service] = true
	}
}

// Pending lists, sorted, the Services of required that are not done
// on instance id's current process. It is nil when the instance is filled.
// An instance never observed has every Service pending.
func (t *Tracker) Pending(id string, required []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.inst[id]
	var out []string
	for _, s := range required {
		if p == nil || !p.done[s] {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// MarkDue reports whether instance id is filled (every Service of required
// done) on its current process and its marker not yet set, and returns
// that process' identity for Marked.
func (t *Tracker) MarkDue(id string, required []string) (identity string, due bool) {
	if len(t.Pending(id, required)) > 0 {
		return "", false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.inst[id]
	if p == nil || p.marked {
		return "", false
	}
	return p.identity, true
}

// Marked records that instance id's marker is set on process identity.
func (t *Tracker) Marked(id, identity string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.inst[id]; p != nil && p.identity == identity {
		p.marked = true
	}
}

// IsMarked reports whether instance id's current process carries its
// marker.
func (t *Tracker) IsMarked(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.inst[id]
	return p != nil && p.marked
}

// Reset forgets instance id's process: the next Observe sees it as new,
// so that it is brought in step and marked again. For an instance that
// did not answer a probe, or whose marker went stale: it may have missed
// changes meanwhile.
func (t *Tracker) Reset(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.inst, id)
}

// Forget drops every instance not in keep (instances no longer listed).
func (t *Tracker) Forget(keep map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.inst {
		if !keep[id] {
			delete(t.inst, id)
		}
	}
}
