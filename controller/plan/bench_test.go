package plan

import (
	"net/netip"
	"testing"
)

// BenchmarkCalculate plans 10,000 servers of which 100 changed.
func BenchmarkCalculate(b *testing.B) {
	current := map[netip.AddrPort]State{}
	desired := map[netip.AddrPort]State{}
	for i := 0; i < 10000; i++ {
		a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i / 256), byte(i % 256)}), 8080)
		current[a] = Active
		desired[a] = Active
		if i%100 == 0 {
			desired[a] = Draining
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if n := len(Calculate(current, desired)); n != 100 {
			b.Fatalf("%d changes", n)
		}
	}
}
