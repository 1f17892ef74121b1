package reconcile

import (
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func req(ns, name string) ctrlreconcile.Request {
	return ctrlreconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

// TestOneNamespaceCannotQueueInFrontOfTheOthers: a namespace that queues a
// thousand Services at once (its own, or a flood of changes) does not make
// another namespace's one change wait for all of them.
func TestOneNamespaceCannotQueueInFrontOfTheOthers(t *testing.T) {
	q := queueFor("fair-test", nil)
	defer q.ShutDown()
	for i := range 1000 {
		q.Add(req("evil", "s"+strconv.Itoa(i)))
	}
	q.Add(req("shop", "web"))
	q.Add(req("shop", "api"))
	waitLen(t, q, 1002)
	var order []string
	for range 6 {
		it, _ := q.Get()
		order = append(order, it.Namespace+"/"+it.Name)
		q.Done(it)
	}
	pos := map[string]int{}
	for i, s := range order {
		pos[s] = i
	}
	web, okWeb := pos["shop/web"]
	apiPos, okAPI := pos["shop/api"]
	if !okWeb || !okAPI || web > 2 || apiPos > 4 {
		t.Errorf("the first six taken: %v; want shop's two among them, taking turns with evil's", order)
	}
}

// TestTheFairStepIsTakenOnce: the controller re-adds an item with the
// priority it was taken with; that must be the caller's, or each requeue
// would sink the item one step further.
func TestTheFairStepIsTakenOnce(t *testing.T) {
	q := newFairQueue(priorityqueue.New[ctrlreconcile.Request]("fair-test-once"))
	defer q.ShutDown()
	q.Add(req("evil", "a"))
	q.Add(req("evil", "b"))
	high := 10
	q.AddWithOpts(priorityqueue.AddOpts{Priority: &high}, req("evil", "c"))
	waitLen(t, q, 3)
	got := map[string]int{}
	for range 3 {
		it, p, _ := q.GetWithPriority()
		got[it.Name] = p
		q.Done(it)
	}
	if got["a"] != 0 || got["b"] != 0 || got["c"] != 10 {
		t.Errorf("priorities given back: %v; want the callers' (a 0, b 0, c 10)", got)
	}
	if len(q.waiting) != 0 || len(q.step) != 0 || len(q.base) != 0 {
		t.Errorf("state left once every item was taken: waiting %v, steps %d, priorities %d", q.waiting, len(q.step), len(q.base))
	}
}

func waitLen(t *testing.T, q interface{ Len() int }, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for q.Len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue length %d, want %d", q.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
