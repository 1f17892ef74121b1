package cluster_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stickydrain/stickydrain/test/cluster"
)

// -short means what `make test-unit` says: no control plane. Under it
// Start refuses (cluster.ErrShort), so a test that forgets
// cluster.SkipIfShort fails instead of turning the unit tier into the
// whole suite. Without -short this test runs itself with it.
func TestStartRefusesUnderShort(t *testing.T) {
	if testing.Short() {
		c, err := cluster.Start(context.Background(), cluster.Options{Log: t.Logf})
		if !errors.Is(err, cluster.ErrShort) {
			if c != nil {
				_ = c.Stop()
			}
			t.Fatalf("Start under -short: %v, want cluster.ErrShort", err)
		}
		return
	}
	out, err := exec.Command(os.Args[0], "-test.short", "-test.v", "-test.run", "^TestStartRefusesUnderShort$").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestStartRefusesUnderShort") {
		t.Fatalf("the same test under -short: %v\n%s", err, out)
	}
}
