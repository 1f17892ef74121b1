package cluster

import (
	"context"
	"testing"
)

// StartT starts a cluster for a test and stops it when the test ends,
// printing the control-plane logs if the test failed.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Log == nil {
		opts.Log = t.Logf
	}
	c, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control-plane logs:\n%s", c.Logs(30))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stopping control plane: %v", err)
		}
	})
	return c
}

// LockRealNodeT is LockRealNode for a test, released when it ends (if a
// cluster has not taken it over and released it before).
func LockRealNodeT(t testing.TB) *RealNodeLock {
	t.Helper()
	l, err := LockRealNode(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Release)
	return l
}
