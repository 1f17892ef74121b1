package reconcile

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/controller/endpoints"
)

// TestAbsentPodsAreReadAgainAfterTheTTL: a Pod found absent is not read
// again for podReadTTL, then is: it may exist by then.
func TestAbsentPodsAreReadAgainAfterTheTTL(t *testing.T) {
	a := newAdmission(t, nil, nil)
	clk := testingclock.NewFakeClock(time.Now())
	a.r.pods.clock = clk
	desired := map[netip.AddrPort]endpoints.Endpoint{addr("198.18.0.5"): active("shop", "ghost")}
	a.admit(t, desired)
	clk.Step(podReadTTL - time.Second)
	a.admit(t, desired)
	if got := a.liveReads(); got != 1 {
		t.Errorf("%d live reads within the TTL; want 1", got)
	}
	clk.Step(time.Second)
	a.admit(t, desired)
	if got := a.liveReads(); got != 2 {
		t.Errorf("%d live reads once the TTL passed; want 2", got)
	}
}

// TestAdmittedReadsACachedVersionOnce: an endpoint naming a cached Pod
// with another address costs one live read while the cache holds the
// version that read found; a new version is read again.
func TestAdmittedReadsACachedVersionOnce(t *testing.T) {
	pod := testPod("shop", "web-0", corev1.PodRunning, "198.18.0.5")
	a := newAdmission(t, []client.Object{pod}, []client.Object{pod.DeepCopy()})
	desired := map[netip.AddrPort]endpoints.Endpoint{addr("198.18.0.66"): active("shop", "web-0")}
	for pass := 0; pass < 3; pass++ {
		if out := a.admit(t, desired); len(out) != 0 {
			t.Fatalf("admitted %v, not the Pod's address", out)
		}
	}
	if got := a.liveReads(); got != 1 {
		t.Errorf("%d live reads of a Pod the cache holds at the version read; want 1", got)
	}
	var cached corev1.Pod
	if err := a.r.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), &cached); err != nil {
		t.Fatal(err)
	}
	cached.Labels = map[string]string{"new": "version"}
	if err := a.r.Client.Update(t.Context(), &cached); err != nil {
		t.Fatal(err)
	}
	a.admit(t, desired)
	if got := a.liveReads(); got != 2 {
		t.Errorf("%d live reads after the cached Pod changed; want 2", got)
	}
}

// TestAdmittedReadsTheRestOnLaterPasses: the endpoints the rate limit left
// unread are read on later passes, and a real Pod among them is admitted.
func TestAdmittedReadsTheRestOnLaterPasses(t *testing.T) {
	real := testPod("shop", "real", corev1.PodRunning, "198.19.0.1")
	a := newAdmission(t, nil, []client.Object{real})
	clk := testingclock.NewFakeClock(time.Now())
	a.r.pods.clock = clk
	desired := map[netip.AddrPort]endpoints.Endpoint{addr("198.19.0.1"): active("shop", "real")}
	for i := range 200 {
		desired[addr(fmt.Sprintf("198.18.%d.%d", i/250, i%250+1))] = active("shop", fmt.Sprintf("ghost-%d", i))
	}
	for pass := 1; ; pass++ {
		before := a.liveReads()
		out := a.admit(t, desired)
		if reads := a.liveReads() - before; reads > podReadBurst {
			t.Fatalf("pass %d: %d live reads; want at most %d", pass, reads, podReadBurst)
		}
		if len(out) == 1 {
			if _, ok := out[addr("198.19.0.1")]; !ok {
				t.Fatalf("admitted %v; want the real Pod only", out)
			}
			if pass != 5 {
				t.Errorf("the real Pod admitted on pass %d; want 5 (201 reads, 50 a pass)", pass)
			}
			break
		}
		if pass == 10 {
			t.Fatal("the real Pod not admitted in 10 passes")
		}
		clk.Step(3 * time.Second)
	}
}

// TestPodReadsKeepTheNewest: past its size, the oldest reads are
// forgotten first.
func TestPodReadsKeepTheNewest(t *testing.T) {
	p := &podReads{max: 3}
	key := func(i int) types.NamespacedName { return types.NamespacedName{Namespace: "shop", Name: fmt.Sprint(i)} }
	for i := range 5 {
		p.record(key(i), false, "")
	}
	p.record(key(2), false, "") // read again: the newest now
	p.record(key(5), false, "")
	if got := p.len(); got != 3 {
		t.Errorf("%d reads kept; want 3", got)
	}
	for i, want := range []bool{false, false, true, false, true, true} {
		if got := p.confirmed(key(i), false, ""); got != want {
			t.Errorf("Pod %d remembered %v; want %v", i, got, want)
		}
	}
	if p.confirmed(key(5), true, "1") {
		t.Error("a Pod read absent confirmed a cached one")
	}
}
