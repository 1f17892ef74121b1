package drain

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
	"github.com/stickydrain/stickydrain/drainctl/source"
)

// script is a Counter that answers from a list, then repeats the last.
type script struct {
	mu    sync.Mutex
	steps []step
	calls int
}

type step struct {
	n   float64
	err error
}

func (s *script) Count(context.Context) (source.Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.steps[min(s.calls, len(s.steps)-1)]
	s.calls++
	return source.Reading{Count: st.n, Format: api.FormatNumber}, st.err
}

func config(c Counter, mod func(*params.Wait)) (Config, *bytes.Buffer) {
	w := params.NewWait()
	w.URL = "http://localhost/sessions"
	w.Interval, w.MinWait, w.MaxWait = 20*time.Millisecond, 0, 5*time.Second
	if mod != nil {
		mod(w)
	}
	var log bytes.Buffer
	return Config{Wait: *w, Counter: c, Log: NewLogger(&log, false), PodinfoEvery: 10 * time.Millisecond}, &log
}

func TestWait(t *testing.T) {
	failed := errors.New("connection refused")
	tests := []struct {
		name  string
		steps []step
		mod   func(*params.Wait)
		want  Outcome
		polls int // 0: not checked
	}{
		{name: "ends drained when the count reaches zero", steps: []step{{n: 2}, {n: 1}, {n: 0}}, want: Drained, polls: 3},
		{name: "ends drained at a non-zero target", steps: []step{{n: 4}, {n: 2}}, mod: func(w *params.Wait) { w.Target = 2 }, want: Drained, polls: 2},
		{
			name:  "reads again at min-wait: sessions that arrived before the LB drain keep it waiting",
			steps: []step{{n: 0}, {n: 3}},
			mod: func(w *params.Wait) {
				w.MinWait, w.Interval, w.MaxWait = 100*time.Millisecond, time.Hour, 300*time.Millisecond
			},
			want: MaxWaitReached, polls: 2,
		},
		{name: "gives up at max-wait", steps: []step{{n: 9}}, mod: func(w *params.Wait) { w.MaxWait = 100 * time.Millisecond }, want: MaxWaitReached},
		{name: "ends unreachable after the limit of failures in a row", steps: []step{{n: 3}, {err: failed}, {err: failed}, {err: failed}},
			mod: func(w *params.Wait) { w.UnreachableLimit = 3 }, want: Unreachable, polls: 4},
		{name: "a success resets the failure count", steps: []step{{err: failed}, {n: 3}, {err: failed}, {n: 3}, {err: failed}, {n: 0}},
			mod: func(w *params.Wait) { w.UnreachableLimit = 2 }, want: Drained, polls: 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &script{steps: tt.steps}
			cfg, log := config(s, tt.mod)
			res := Wait(context.Background(), cfg)
			if res.Outcome != tt.want {
				t.Fatalf("outcome %v, want %v\nlog:\n%s", res.Outcome, tt.want, log)
			}
			if tt.polls != 0 && res.Polls != tt.polls {
				t.Errorf("%d polls, want %d\nlog:\n%s", res.Polls, tt.polls, log)
			}
		})
	}
}

func TestWaitNeverEndsDrainedBeforeMinWait(t *testing.T) {
	cfg, log := config(&script{steps: []step{{n: 0}}}, func(w *params.Wait) { w.MinWait = 150 * time.Millisecond })
	start := time.Now()
	res := Wait(context.Background(), cfg)
	if res.Outcome != Drained || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("outcome %v after %v; want drained no sooner than min-wait 150ms\n%s", res.Outcome, time.Since(start), log)
	}
}

func TestWaitInterrupted(t *testing.T) {
	cfg, _ := config(&script{steps: []step{{n: 5}}}, func(w *params.Wait) { w.Interval = time.Hour })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if res := Wait(ctx, cfg); res.Outcome != Interrupted {
		t.Fatalf("outcome %v, want interrupted", res.Outcome)
	}
}

func TestWaitLogsOnlyChanges(t *testing.T) {
	cfg, log := config(&script{steps: []step{{n: 3}, {n: 3}, {n: 3}, {n: 3}, {n: 2}, {n: 2}, {n: 0}}}, nil)
	if res := Wait(context.Background(), cfg); res.Outcome != Drained {
		t.Fatalf("outcome %v", res.Outcome)
	}
	if got := strings.Count(log.String(), "draining: "); got != 2 {
		t.Errorf("%d progress lines for counts 3,3,3,3,2,2,0; want 2 (one per change):\n%s", got, log)
	}
}
