package reconcile

import (
	"container/list"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// The live reads of Pods. An endpoint naming a Pod the cache lacks, or
// holds without the endpoint's address, is checked with the API server;
// whoever writes a Service's EndpointSlices chooses how many such
// endpoints there are, so what they cost is bounded here, for the whole
// controller (the client's own rate limit is off).
const (
	// podReadsPerSecond and podReadBurst: the token bucket of live reads.
	podReadsPerSecond = 20
	podReadBurst      = 50
	// podReadTTL: how long what a live read found is trusted while the
	// cache still holds what it held then.
	podReadTTL = 30 * time.Second
	// podReadsKept: how many reads are remembered; the oldest go first.
	podReadsKept = 10000
)

// errPodNotRead: the rate limit left no live read of a Pod for this pass.
// Its endpoint is refused now and checked again on a later pass, never
// admitted unread.
var errPodNotRead = errors.New("no live read of Pods left this pass")

// podReads remembers what recent live reads of Pods found, so that a pass
// does not read again what the cache and a recent read agree on (a Pod
// that exists nowhere, or one whose cached version a read confirmed), and
// rate-limits the reads. Its zero value is ready for use; clock, limiter,
// ttl and max may be set before its first use (tests).
type podReads struct {
	clock   clock.PassiveClock
	limiter flowcontrol.PassiveRateLimiter
	ttl     time.Duration
	max     int

	once  sync.Once
	mu    sync.Mutex
	reads map[types.NamespacedName]*list.Element
	order list.List // of *podRead, oldest first
}

type podRead struct {
	key types.NamespacedName
	// found: the Pod existed, at version (its resourceVersion).
	found   bool
	version string
	at      time.Time
}

func (p *podReads) init() {
	p.once.Do(func() {
		if p.clock == nil {
			p.clock = clock.RealClock{}
		}
		if p.limiter == nil {
			p.limiter = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(podReadsPerSecond, podReadBurst, p.clock)
		}
		if p.ttl == 0 {
			p.ttl = podReadTTL
		}
		if p.max == 0 {
			p.max = podReadsKept
		}
		p.reads = map[types.NamespacedName]*list.Element{}
	})
}

// confirmed reports whether a live read of key within the TTL found what
// the cache holds now: no Pod (cached false), or the Pod at version.
func (p *podReads) confirmed(key types.NamespacedName, cached bool, version string) bool {
	p.init()
	p.mu.Lock()
	defer p.mu.Unlock()
	el, ok := p.reads[key]
	if !ok {
		return false
	}
	r := el.Value.(*podRead)
	if p.clock.Since(r.at) >= p.ttl {
		p.order.Remove(el)
		delete(p.reads, key)
		return false
	}
	return r.found == cached && (!cached || (version != "" && r.version == version))
}

// record remembers what a live read of key found: no Pod (found false),
// or the Pod at version.
func (p *podReads) record(key types.NamespacedName, found bool, version string) {
	p.init()
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	if el, ok := p.reads[key]; ok {
		*el.Value.(*podRead) = podRead{key: key, found: found, version: version, at: now}
		p.order.MoveToBack(el)
	} else {
		p.reads[key] = p.order.PushBack(&podRead{key: key, found: found, version: version, at: now})
	}
	for p.order.Len() > p.max {
		el := p.order.Front()
		p.order.Remove(el)
		delete(p.reads, el.Value.(*podRead).key)
	}
}

// take reports whether a live read may be made now, and counts it.
func (p *podReads) take() bool {
	p.init()
	return p.limiter.TryAccept()
}

// len is how many reads are remembered.
func (p *podReads) len() int {
	p.init()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.order.Len()
}

// podNotRead reports whether err is a live read of a Pod the rate limit
// did not allow.
func podNotRead(err error) bool { return errors.Is(err, errPodNotRead) }
