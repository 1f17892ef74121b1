package reconcile

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestForgetDropsOnlyTheReleasedUpstreamsGauges: an upstream no Service
// maps any more leaves no gauge behind (a stale slots or drain gauge would
// keep an alert firing); the others stay.
func TestForgetDropsOnlyTheReleasedUpstreamsGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, up := range []string{"shop", "cart"} {
		for _, st := range []string{"active", "draining", "down"} {
			m.servers.WithLabelValues("edge", up, st).Set(1)
		}
		m.oldestDrain.WithLabelValues("edge", up).Set(1)
		m.slots.WithLabelValues("edge", up).Set(8)
		m.slotsUsed.WithLabelValues("edge", up).Set(3)
	}
	m.forget(upstreamRef{LB: "edge", Upstream: "shop"})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]int{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "upstream" {
					left[f.GetName()+" "+l.GetValue()]++
				}
			}
		}
	}
	for name, n := range left {
		if strings.HasSuffix(name, " shop") {
			t.Errorf("%s: %d series left after forget", name, n)
		}
	}
	if left["stickydrain_controller_servers cart"] != 3 || left["stickydrain_controller_slots cart"] != 1 || left["stickydrain_controller_oldest_drain_start_timestamp_seconds cart"] != 1 {
		t.Errorf("the other upstream's gauges went too: %v", left)
	}
}
