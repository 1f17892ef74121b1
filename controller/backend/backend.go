// Package backend is the small interface between the controller and a
// load-balancer instance; haproxy and nginxplus implement it.
package backend

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/stickydrain/stickydrain/controller/plan"
)

// ErrCannotHold marks the error of an instance that answered but cannot
// hold what an upstream asks of it: it has no such upstream, or no room
// for another server. Trying again will not help until the operator or
// the Service's owner changes something, and it is that Service's alone:
// it must not keep the instance out of rotation for every other Service
// of the load balancer.
var ErrCannotHold = errors.New("the load balancer cannot hold this upstream's servers")

// Instance is one running load balancer (one HAProxy process, one NGINX
// Plus API endpoint).
type Instance interface {
	// ID names the instance in logs and events (its address).
	ID() string
	// Begin reads the upstream's servers as the instance has them now and
	// returns the pass holding what it read, for the changes planned
	// from it. The caller owns the pass and must Close it, applied or
	// not; nothing of it lives in the instance.
	Begin(ctx context.Context, upstream string) (Pass, error)
}

// Pass is one read of an upstream on one instance and the changes made
// from it. One goroutine uses it; the instance may serve other passes
// (other upstreams, other callers) at the same time.
type Pass interface {
	// Servers is what Begin read: each server's address and state.
	Servers() map[netip.AddrPort]plan.State
	// Apply makes the changes server by server, never rewriting the whole
	// list, on what was read (HAProxy: the same process, on the
	// connection that read it). It returns one error per change, nil
	// where it succeeded, and keeps going after a failure.
	Apply(ctx context.Context, changes []plan.Change) []error
	// Close ends the pass and frees what it holds (HAProxy: the
	// connection, one of the few the Runtime API serves at once).
	Close()
}

// Read is a pass that only reads: the upstream's servers on inst now.
func Read(ctx context.Context, inst Instance, upstream string) (map[netip.AddrPort]plan.State, error) {
	p, err := inst.Begin(ctx, upstream)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.Servers(), nil
}

// Normalizer is implemented by passes on instances that cannot represent
// every state: before planning, the desired states are mapped to what the
// upstream read can hold (NGINX Plus stream upstreams have no drain, so
// draining becomes down there).
type Normalizer interface {
	Normalize(desired map[netip.AddrPort]plan.State) map[netip.AddrPort]plan.State
}

// Capacity is implemented by passes on upstreams that hold a fixed
// number of servers (HAProxy's server-template slots): how many the
// upstream held and could hold when the pass read it; ok is false when
// the number is not bounded (dynamic servers).
type Capacity interface {
	Slots() (used, total int, ok bool)
}

// Prober is implemented by instances that can tell one process from the
// next cheaply: a restart, a reload or a new replica reads as a new
// identity, which the controller repairs at once instead of at the next
// resync.
type Prober interface {
	// Identity names the process answering now (HAProxy: its Pid and
	// start time; NGINX Plus: its generation and load time).
	Identity(ctx context.Context) (string, error)
}

// Marker is implemented by instances whose readiness can depend on a
// marker that the controller sets once it has filled the process, so that
// a fresh process takes no traffic before it holds every server.
type Marker interface {
	// MarkFilled sets the marker on the process, but only if it is still
	// the one named identity; otherwise it takes the marker off again and
	// returns an error. Instances configured without a marker do nothing.
	MarkFilled(ctx context.Context, identity string) error
}

// Heartbeater is implemented by Markers whose marker ages: the controller
// confirms it every second, and an instance that no controller reaches
// any more drops out of rotation when its marker is too old.
type Heartbeater interface {
	// Heartbeat refreshes the marker of the process answering, if it
	// carries one confirmed recently; it never marks an unmarked process
	// nor revives a stale marker.
	Heartbeat(ctx context.Context) error
	// MarkerAge is how long ago the process' marker was last confirmed;
	// ok is false when it carries none.
	MarkerAge(ctx context.Context) (age time.Duration, ok bool, err error)
	// HasMarker reports whether the instance is configured with a marker
	// at all (HAProxy's readyMap); without one there is nothing to age.
	HasMarker() bool
	// MarkerFreshFor is the age past which a marker is stale: not
	// refreshed by Heartbeat, the instance filled and marked again.
	MarkerFreshFor() time.Duration
}
