package podhost

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/stickydrain/stickydrain/test/cluster"
)

// Pods start and stop on their own goroutines: two of them taking an
// address at once must get two addresses (and -race must see no race, as
// it did in CI when alloc ran outside the lock release took).
func TestPodIPsAreTakenAndGivenBackSafelyFromManyPods(t *testing.T) {
	n := &network{prefix: netip.MustParsePrefix("198.18.0.0/24")}
	for i := 2; i < 202; i++ {
		n.free = append(n.free, netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}))
	}
	var mu sync.Mutex
	held := map[netip.Addr]int{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 200 {
				a, err := n.alloc()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				held[a]++
				if held[a] > 1 {
					t.Errorf("goroutine %d: %s handed out twice", g, a)
				}
				mu.Unlock()
				mu.Lock()
				held[a]--
				mu.Unlock()
				n.release(a)
			}
		})
	}
	wg.Wait()
	if len(n.free) != 200 {
		t.Errorf("%d addresses free after every pod gave its back, want 200", len(n.free))
	}
}

// The real node's pods and Services run in 198.18.0.0/15 too, on the same
// machine and, since make test runs two lanes at once, at the same time as
// pod hosts: a pod host must never take their /24s (it once could, one
// draw in 256 each: a bridge and routes fighting the node's).
func TestNoPodHostTakesTheRealNodesRanges(t *testing.T) {
	for _, p := range []string{"198.18.0.0/24", cluster.RealNodePodCIDR, cluster.ServiceCIDR} {
		if !Reserved(netip.MustParsePrefix(p)) {
			t.Errorf("%s is not reserved", p)
		}
	}
	if Reserved(netip.MustParsePrefix("198.18.1.0/24")) || Reserved(netip.MustParsePrefix("198.19.199.0/24")) {
		t.Error("an ordinary /24 is reserved")
	}
}
