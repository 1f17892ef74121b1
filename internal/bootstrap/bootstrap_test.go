package bootstrap

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
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
