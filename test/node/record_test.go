package node

import (
	"os"
	"path/filepath"
	"testing"
)

// The kubelet's log of a preStop hook that failed (drainctl at max-wait),
// as kubelet 1.37 wrote it on the real node: klog puts the hook's output
// and the error on lines of their own (`message=<` … ` >`), before the
// pod's key.
func TestReadHookOfAFailedPreStop(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "kubelet-failed-prestop.log"))
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Dir: t.TempDir()}
	if err := os.MkdirAll(n.path("logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.path("logs", "kubelet.log"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	h, done, err := n.readHook("shop", "stuck-77df56ff5c-mh96l", "app")
	if err != nil || !done {
		t.Fatalf("readHook: done %v, %v", done, err)
	}
	want := "drainctl: max-wait reached after 4.001s (5 polls, last count 1)"
	if !h.Failed || !h.Completed || h.GracePeriod != 33 || h.Output != want {
		t.Errorf("hook %+v; want failed, completed, 33 s of grace, output %q", h, want)
	}
	if took := h.Ended.Sub(h.Started); took.Seconds() < 3.9 || took.Seconds() > 4.1 {
		t.Errorf("the hook took %v, want about 4 s", took)
	}
}
