package reconcile

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// fairQueue is controller-runtime's priority queue, shared fairly among
// namespaces: an item is queued below the items its namespace already has
// waiting (one priority step each), so one namespace's thousand Services
// wait behind one another and not in front of another namespace's one.
// Among namespaces it comes out close to taking turns; within one, the
// priority queue's own order holds (first come, first served; the
// initial list after live changes).
//
// The step is the wrapper's own: GetWithPriority returns the priority the
// item was added with, so the controller's re-adds (a requeue, an error)
// carry the caller's priority and the step is taken again, never twice.
type fairQueue struct {
	priorityqueue.PriorityQueue[ctrlreconcile.Request]

	mu      sync.Mutex
	waiting map[string]int                // items per namespace, added and not yet taken
	step    map[ctrlreconcile.Request]int // each waiting item's step below its caller's priority
	base    map[ctrlreconcile.Request]int // and that priority
}

func newFairQueue(inner priorityqueue.PriorityQueue[ctrlreconcile.Request]) *fairQueue {
	return &fairQueue{PriorityQueue: inner, waiting: map[string]int{}, step: map[ctrlreconcile.Request]int{}, base: map[ctrlreconcile.Request]int{}}
}

// queueFor is the controller's queue (controller.Options.NewQueue).
func queueFor(name string, rl workqueue.TypedRateLimiter[ctrlreconcile.Request]) workqueue.TypedRateLimitingInterface[ctrlreconcile.Request] {
	return newFairQueue(priorityqueue.New(name, func(o *priorityqueue.Opts[ctrlreconcile.Request]) { o.RateLimiter = rl }))
}

func (q *fairQueue) AddWithOpts(o priorityqueue.AddOpts, items ...ctrlreconcile.Request) {
	for _, it := range items {
		p := 0
		if o.Priority != nil {
			p = *o.Priority
		}
		q.mu.Lock()
		step, queued := q.step[it]
		if !queued {
			step = q.waiting[it.Namespace]
			q.waiting[it.Namespace]++
			q.step[it] = step
			q.base[it] = p
		} else if p > q.base[it] {
			q.base[it] = p // the queue keeps an item's highest priority
		}
		q.mu.Unlock()
		fair := p - step
		q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{After: o.After, RateLimited: o.RateLimited, Priority: &fair}, it)
	}
}

func (q *fairQueue) Add(item ctrlreconcile.Request) { q.AddWithOpts(priorityqueue.AddOpts{}, item) }

func (q *fairQueue) AddAfter(item ctrlreconcile.Request, d time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: d}, item)
}

func (q *fairQueue) AddRateLimited(item ctrlreconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

func (q *fairQueue) GetWithPriority() (ctrlreconcile.Request, int, bool) {
	it, p, shutdown := q.PriorityQueue.GetWithPriority()
	if shutdown {
		return it, p, shutdown
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, queued := q.step[it]; queued {
		p = q.base[it]
		delete(q.step, it)
		delete(q.base, it)
		if q.waiting[it.Namespace]--; q.waiting[it.Namespace] <= 0 {
			delete(q.waiting, it.Namespace)
		}
	}
	return it, p, false
}

func (q *fairQueue) Get() (ctrlreconcile.Request, bool) {
	it, _, shutdown := q.GetWithPriority()
	return it, shutdown
}
