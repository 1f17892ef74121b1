package must

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// fatal records what Fatalf said and stops its goroutine, as testing.T
// does.
type fatal struct {
	testing.TB
	said string
}

func (f *fatal) Helper() {}

func (f *fatal) Fatalf(format string, args ...any) {
	f.said = fmt.Sprintf(format, args...)
	panic(f)
}

func TestEventuallyWaitsForTheConditionOrFailsNamingIt(t *testing.T) {
	n := 0
	start := time.Now()
	if at := Eventually(t, context.Background(), time.Millisecond, "three calls", func() bool { n++; return n == 3 }); n != 3 || at.Before(start) {
		t.Errorf("returned after %d calls at %v", n, at)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	f := &fatal{TB: t}
	func() {
		defer func() { _ = recover() }()
		Eventually(f, ctx, time.Millisecond, "never", func() bool { return false })
	}()
	if f.said != "waiting for never: context deadline exceeded" {
		t.Errorf("a condition that never holds failed with %q", f.said)
	}
}
