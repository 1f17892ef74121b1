package reconcile

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/endpoints"
	"github.com/stickydrain/stickydrain/controller/plan"
)

// What the Reconciler remembers between passes, in three collaborators,
// each with its own lock and its own invariants:
//
//	instancePool    one backend.Instance per instance address
//	drainLedger     per upstream: when each endpoint began to drain, whose
//	                pod each server is, which Events were told, and how many
//	                servers each instance was left with
//	ownershipIndex  the upstreams each Service held after its last pass
//
// None of them reads the cluster or a load balancer: a pass reads, asks
// them, and writes.

// instancePool holds one Instance per instance address, made on first use
// and kept across passes (a connection and what an Instance caches outlive
// a pass). Invariant: one Instance per address until reset.
type instancePool struct {
	mu     sync.Mutex
	byAddr map[string]backend.Instance
}

func newInstancePool() *instancePool {
	return &instancePool{byAddr: map[string]backend.Instance{}}
}

// get returns the Instances of addrs, in their order, making those not
// held yet with create.
func (p *instancePool) get(addrs []string, create func(addr string) (backend.Instance, error)) ([]backend.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]backend.Instance, 0, len(addrs))
	for _, a := range addrs {
		inst, ok := p.byAddr[a]
		if !ok {
			var err error
			if inst, err = create(a); err != nil {
				return nil, err
			}
			p.byAddr[a] = inst
		}
		out = append(out, inst)
	}
	return out, nil
}

// reset forgets every Instance: a new configuration may give an address
// another timeout or options.
func (p *instancePool) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.byAddr = map[string]backend.Instance{}
}

// passLimiter bounds the passes open at once on each instance, across
// every Service: a pass holds one connection to the instance (HAProxy's
// stats socket serves 10 by default), and one Service mapping many
// upstreams must not take every connection and time the other Services'
// passes out. Waiters are served in the order they came (a FIFO
// semaphore), so a Service with many upstreams waits its turn as others do.
type passLimiter struct {
	per int64
	mu  sync.Mutex
	sem map[string]*semaphore.Weighted
}

func newPassLimiter(per int) *passLimiter {
	return &passLimiter{per: int64(max(1, per)), sem: map[string]*semaphore.Weighted{}}
}

// begin waits for a pass on instance id (until ctx ends) and returns the
// function that ends it.
func (l *passLimiter) begin(ctx context.Context, id string) (done func(), err error) {
	l.mu.Lock()
	s := l.sem[id]
	if s == nil {
		s = semaphore.NewWeighted(l.per)
		l.sem[id] = s
	}
	l.mu.Unlock()
	if err := s.Acquire(ctx, 1); err != nil {
		return nil, fmt.Errorf("instance %s: every one of its %d passes is taken: %w", id, l.per, err)
	}
	return func() { s.Release(1) }, nil
}

// heldKey names one upstream on one instance (by its address).
type heldKey struct {
	instance string
	upstream upstreamRef
}

// announcement is one Event about a server of an upstream.
type announcement struct {
	upstream upstreamRef
	addr     netip.AddrPort
	reason   string
}

// goneServer is a server no longer desired, and the pod it was.
type goneServer struct {
	addr netip.AddrPort
	pod  endpoints.Endpoint
}

// drainLedger is what the controller knows of each upstream's drains.
// Invariants: an upstream's entries exist only while it has desired
// servers with a pod or terminating (observe adds them, forgetGone removes
// what is no longer desired and the upstream once empty); a server's
// drain start is the first time it was seen terminating, kept while it
// stays desired; an announcement's count only grows, until the server is
// removed.
type drainLedger struct {
	mu sync.Mutex
	// terminating: when each endpoint was first seen terminating.
	terminating map[upstreamRef]map[netip.AddrPort]time.Time
	// pods: the pod of each desired server, to name it in Events.
	pods map[upstreamRef]map[netip.AddrPort]endpoints.Endpoint
	// announced: the most instances each Event said had applied it.
	announced map[announcement]int
	// held: how many servers each instance's upstream was left with by
	// the last pass, to tell a process that lost them all.
	held map[heldKey]int
}

func newDrainLedger() *drainLedger {
	return &drainLedger{
		terminating: map[upstreamRef]map[netip.AddrPort]time.Time{},
		pods:        map[upstreamRef]map[netip.AddrPort]endpoints.Endpoint{},
		announced:   map[announcement]int{},
		held:        map[heldKey]int{},
	}
}

// observe records u's desired servers as seen at now — their pods, and
// when those terminating began to — and returns when the oldest drain
// under way began (zero when none is).
func (l *drainLedger) observe(u upstreamRef, desired map[netip.AddrPort]endpoints.Endpoint, now time.Time) (oldest time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pods, terminating := l.pods[u], l.terminating[u]
	if pods == nil {
		pods, terminating = map[netip.AddrPort]endpoints.Endpoint{}, map[netip.AddrPort]time.Time{}
		l.pods[u], l.terminating[u] = pods, terminating
	}
	for a, e := range desired {
		if e.PodName != "" {
			pods[a] = e
		}
		if e.Terminating {
			if _, ok := terminating[a]; !ok {
				terminating[a] = now
			}
		}
	}
	for a, e := range desired {
		if since, ok := terminating[a]; ok && e.State == plan.Draining && (oldest.IsZero() || since.Before(oldest)) {
			oldest = since
		}
	}
	return oldest
}

// since is when server a of u was first seen terminating.
func (l *drainLedger) since(u upstreamRef, a netip.AddrPort) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.terminating[u][a]
	return t, ok
}

// forgetGone forgets u's servers that are no longer desired, once the
// instances that answered no longer have them, and returns them with
// their pods (to announce). An upstream left with nothing is forgotten.
func (l *drainLedger) forgetGone(u upstreamRef, desired map[netip.AddrPort]endpoints.Endpoint) []goneServer {
	l.mu.Lock()
	defer l.mu.Unlock()
	terminating, pods := l.terminating[u], l.pods[u]
	for a := range terminating {
		if _, still := desired[a]; !still {
			delete(terminating, a)
		}
	}
	var gone []goneServer
	for a, pod := range pods {
		if _, still := desired[a]; !still {
			gone = append(gone, goneServer{a, pod})
			delete(pods, a)
		}
	}
	if len(pods) == 0 && len(terminating) == 0 {
		delete(l.pods, u)
		delete(l.terminating, u)
	}
	slices.SortFunc(gone, func(a, b goneServer) int { return a.addr.Compare(b.addr) })
	return gone
}

// tell records that an Event about key's server would say answered
// instances applied it, and reports whether it says more than the last
// one (and so should be sent). A Removed announcement forgets the
// server's: the address may come back with another pod.
func (l *drainLedger) tell(key announcement, answered int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	told := l.announced[key]
	if answered > told {
		l.announced[key] = answered
	}
	if key.reason == api.ReasonRemoved {
		delete(l.announced, announcement{key.upstream, key.addr, api.ReasonDraining})
		delete(l.announced, key)
	}
	return answered > told
}

// left records that the pass leaves n servers on one instance's upstream,
// and returns how many the last pass left there.
func (l *drainLedger) left(key heldKey, n int) (had int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	had = l.held[key]
	l.held[key] = n
	return had
}

// ownershipIndex is, for each Service, the upstreams it held after its
// last pass: those it owns, and those it could not give up yet. A Service
// is in it until a pass finds it holds nothing, so that its upstreams are
// emptied when it goes.
type ownershipIndex struct {
	mu    sync.Mutex
	known map[types.NamespacedName][]upstreamRef
}

func newOwnershipIndex() *ownershipIndex {
	return &ownershipIndex{known: map[types.NamespacedName][]upstreamRef{}}
}

// set records what svc holds; holding nothing removes it.
func (o *ownershipIndex) set(svc types.NamespacedName, ups []upstreamRef) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(ups) == 0 {
		delete(o.known, svc)
		return
	}
	o.known[svc] = slices.Clone(ups)
}

// held is what svc held after its last pass.
func (o *ownershipIndex) held(svc types.NamespacedName) []upstreamRef {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.known[svc])
}

// has reports whether svc holds anything.
func (o *ownershipIndex) has(svc types.NamespacedName) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.known[svc]
	return ok
}

// services lists the Services that hold something, sorted.
func (o *ownershipIndex) services() []types.NamespacedName {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]types.NamespacedName, 0, len(o.known))
	for k := range o.known {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return out
}
