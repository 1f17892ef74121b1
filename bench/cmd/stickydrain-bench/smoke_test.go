package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Every mode of `make bench` runs end to end at smoke size (seconds, not
// figures), so that a command the docs advertise cannot break unseen: the
// admission run once stopped at "webhook never answered: not mutated"
// (its pod had no owner, and a Namespace's opt-in no longer reached it).
// Nothing here is timed: the figures of a smoke run mean nothing.
func TestEveryBenchmarkModeRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes, HAProxy and the binaries (-short)")
	}
	for _, tc := range []struct {
		mode string
		run  func(ctx context.Context, dir string) (string, error)
		has  []string // what the section must report
	}{
		{"admission", func(ctx context.Context, dir string) (string, error) {
			return admission(ctx, dir, t.Logf, smokeSize, "")
		}, []string{"100/s fixed", "no-op webhook, 100/s fixed", "saturation, 64 clients", "with the webhook", "with the no-op webhook",
			"| p99 at 500/s |", "| CPU per admission at 1000/s |", "| pod CREATE latency added by the webhook, p99 |", "| resident memory after the 1000/s runs |"}},
		{"propagation", func(ctx context.Context, dir string) (string, error) {
			return propagation(ctx, dir, t.Logf, controllerRun{}, smokeSize, "")
		}, []string{"burst: 2 pods deleted at once", "trickle", "floor: minimal drainer",
			"| burst, endpoint terminating → drained on every instance, p50 |", "| trickle, p99 |", "peer: haproxy-ingress"}},
		{"scale", func(ctx context.Context, dir string) (string, error) {
			return scale(ctx, dir, t.Logf, controllerRun{}, smokeSize)
		}, []string{"| 500 |"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			section, err := tc.run(ctx, t.TempDir())
			if err != nil {
				t.Fatalf("stickydrain-bench --smoke %s: %v", tc.mode, err)
			}
			for _, h := range tc.has {
				if !strings.Contains(section, h) {
					t.Errorf("%s: the section does not report %q:\n%s", tc.mode, h, section)
				}
			}
		})
	}
}
