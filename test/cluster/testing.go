package cluster

import (
	"context"
	"errors"
	"flag"
	"testing"
)

// ErrShort is Start's answer in a test binary run with -short.
var ErrShort = errors.New("cluster: a control plane was asked for under -short (make test-unit); the test must call cluster.SkipIfShort (cluster.StartT does) first")

// StartT starts a cluster for a test and stops it when the test ends,
// printing the control-plane logs if the test failed.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	SkipIfShort(t)
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

// SkipIfShort skips a test that needs a control plane when the tests run
// with -short (make test-unit): -short means no control plane, and Start
// refuses to start one then, so that a test that forgets is caught.
func SkipIfShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a control plane; -short (make test-unit) runs only the tests that do not")
	}
}

// inShortTests reports whether this process is a test binary run with
// -short.
func inShortTests() bool {
	return testing.Testing() && flag.Parsed() && testing.Short()
}
