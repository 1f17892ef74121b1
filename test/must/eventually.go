package must

import (
	"context"
	"testing"
	"time"
)

// Eventually checks cond at once, then every interval, until it holds, and
// returns when it did; it fails t, naming what it waited for, when ctx
// ends first. The one poll helper of the suites.
func Eventually(t testing.TB, ctx context.Context, every time.Duration, what string, cond func() bool) time.Time {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(every):
		}
	}
	return time.Now()
}
