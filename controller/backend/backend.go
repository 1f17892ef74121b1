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
	// Servers reads the upstream's servers as the instance has them now.
	// It begins a pass, which the Apply that follows ends: until then the
	// instance may hold what the read leaves for the Apply (HAProxy: the
	// connection to the process it read).
	Servers(ctx context.Context, upstream string) (map[netip.AddrPort]plan.State, error)
	// Apply makes the changes server by server, never rewriting the whole
	// list. It returns one error per change, nil where it succeeded, and
	// keeps going after a failure. It ends the upstream's pass, even with
	// no changes.
	Apply(ctx context.Context, upstream string, changes []plan.Change) []error
}

// Normalizer is implemented by instances that cannot represent every
// state: before planning, the desired states are mapped to what the
// instance can hold (NGINX Plus stream upstreams have no drain, so
// draining becomes down there). It is called after Servers.
type Normalizer interface {
	Normalize(upstream string, desired map[netip.AddrPort]plan.State) map[netip.AddrPort]plan.State
}

// Capacity is implemented by instances whose upstreams hold a fixed
// number of servers (HAProxy's server-template slots): how many the
// upstream held and could hold when Servers last read it; ok is false
// when the number is not bounded (dynamic servers) or not read yet.
type Capacity interface {
	Slots(upstream string) (used, total int, ok bool)
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
