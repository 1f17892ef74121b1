package bootstrap

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
)

func TestExitSaysWhatAndPicksTheStatus(t *testing.T) {
	for _, tt := range []struct {
		err    error
		status int
		out    string
	}{
		{nil, 0, ""},
		{Usage(errors.New("--concurrent-reconciles=0: want 1 or more")), 2, "controller: --concurrent-reconciles=0: want 1 or more\n"},
		{fmt.Errorf("reading: %w", Usage(errors.New("bad"))), 2, "controller: reading: bad\n"},
		{errors.New("creating the manager: no kubeconfig"), 1, "controller: creating the manager: no kubeconfig\n"},
	} {
		var b bytes.Buffer
		if got := Exit("controller", tt.err, &b); got != tt.status || b.String() != tt.out {
			t.Errorf("Exit(%v) = %d, printed %q; want %d, %q", tt.err, got, b.String(), tt.status, tt.out)
		}
	}
	if Usage(nil) != nil {
		t.Error("Usage(nil) is not nil")
	}
}

// The container's memory limit becomes Go's soft limit at MemoryRatio of
// it, unless GOMEMLIMIT says otherwise; no limit changes nothing.
func TestTheMemoryLimitFollowsTheContainers(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("AUTOMEMLIMIT", "") // restored after the test
	os.Unsetenv("AUTOMEMLIMIT")
	limit := uint64(256 << 20)
	setMemoryLimit(logr.Discard(), memlimit.Limit(limit))
	if got, want := debug.SetMemoryLimit(-1), int64(float64(limit)*MemoryRatio); got != want {
		t.Errorf("with a 256 MiB limit: GOMEMLIMIT %d, want %d", got, want)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	setMemoryLimit(logr.Discard(), func() (uint64, error) { return 0, memlimit.ErrNoLimit })
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("without a limit: GOMEMLIMIT %d, want none", got)
	}
	t.Setenv("GOMEMLIMIT", "100MiB")
	debug.SetMemoryLimit(100 << 20) // as the runtime reads it at start
	setMemoryLimit(logr.Discard(), memlimit.Limit(256<<20))
	if got := debug.SetMemoryLimit(-1); got != 100<<20 {
		t.Errorf("with GOMEMLIMIT=100MiB set: GOMEMLIMIT %d, want it kept", got)
	}
}
