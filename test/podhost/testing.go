package podhost

import (
	"context"
	"testing"
)

// StartT starts a Host for a test and stops it when the test ends.
func StartT(t testing.TB, opts Options) *Host {
	t.Helper()
	if opts.Log == nil {
		opts.Log = t.Logf
	}
	h, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting the pod host: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Stop(); err != nil {
			t.Errorf("stopping the pod host: %v", err)
		}
	})
	return h
}
