package plan

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var (
	a = netip.MustParseAddrPort("198.18.0.1:8080")
	b = netip.MustParseAddrPort("198.18.0.2:8080")
	c = netip.MustParseAddrPort("[2001:db8::1]:8080")
)

func TestCalculate(t *testing.T) {
	tests := []struct {
		name             string
		current, desired map[netip.AddrPort]State
		want             []Change
	}{
		{"adds a new server", nil, map[netip.AddrPort]State{a: Active}, []Change{{Op: OpAdd, Addr: a, State: Active}}},
		{"drains a terminating server", map[netip.AddrPort]State{a: Active}, map[netip.AddrPort]State{a: Draining},
			[]Change{{Op: OpSet, Addr: a, State: Draining, From: Active}}},
		{"removes a server that is gone", map[netip.AddrPort]State{a: Draining, b: Active}, map[netip.AddrPort]State{b: Active},
			[]Change{{Op: OpRemove, Addr: a, From: Draining}}},
		{"re-adds drains lost in a load-balancer restart", map[netip.AddrPort]State{}, map[netip.AddrPort]State{a: Draining, b: Active},
			[]Change{{Op: OpAdd, Addr: a, State: Draining}, {Op: OpAdd, Addr: b, State: Active}}},
		{"orders adds, sets, removes, then by address", map[netip.AddrPort]State{c: Active, b: Active}, map[netip.AddrPort]State{a: Active, b: Down},
			[]Change{{Op: OpAdd, Addr: a, State: Active}, {Op: OpSet, Addr: b, State: Down, From: Active}, {Op: OpRemove, Addr: c, From: Active}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Calculate(tt.current, tt.desired), cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
				t.Errorf("Calculate (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCalculateIsIdempotent: once the changes are applied, there is
// nothing left to do.
func TestCalculateIsIdempotent(t *testing.T) {
	current := map[netip.AddrPort]State{a: Active, c: Draining}
	desired := map[netip.AddrPort]State{a: Draining, b: Active}
	for _, ch := range Calculate(current, desired) {
		switch ch.Op {
		case OpAdd, OpSet:
			current[ch.Addr] = ch.State
		case OpRemove:
			delete(current, ch.Addr)
		}
	}
	if got := Calculate(current, desired); len(got) != 0 {
		t.Errorf("second Calculate = %v, want none", got)
	}
}
