package plugin

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/api/params"
	"github.com/stickydrain/stickydrain/drainctl/drain"
	"github.com/stickydrain/stickydrain/drainctl/source"
)

// counts answers each poll with the next count, or fails for a negative.
type counts struct{ seq []float64 }

func (c *counts) Count(context.Context) (source.Reading, error) {
	n := c.seq[0]
	if len(c.seq) > 1 {
		c.seq = c.seq[1:]
	}
	if n < 0 {
		return source.Reading{}, errors.New("connection refused")
	}
	return source.Reading{Count: n, Format: "number"}, nil
}

// waitLog runs drainctl's own wait loop with its own logger and returns
// what it wrote: the sentences the parser must read.
func waitLog(t *testing.T, asJSON bool, seq []float64, edit func(*params.Wait)) string {
	t.Helper()
	w := params.NewWait()
	w.URL = "http://localhost:8080/sessions"
	w.Interval = time.Millisecond
	w.MinWait = 0
	w.MaxWait = time.Hour
	if edit != nil {
		edit(w)
	}
	var buf bytes.Buffer
	drain.Wait(context.Background(), drain.Config{Wait: *w, Counter: &counts{seq}, Log: drain.NewLogger(&buf, asJSON)})
	return "app: started\n" + buf.String() + "app: SIGTERM, bye\n"
}

func TestParseDrainLogReadsDrainctlsOwnLines(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		name := map[bool]string{false: "text", true: "json"}[asJSON]
		t.Run(name, func(t *testing.T) {
			// Drained: 3, 2, 0.
			out := waitLog(t, asJSON, []float64{3, 2, 0}, nil)
			if p := ParseDrainLog(strings.NewReader(out)); p.Phase != PhaseDrained || p.Sessions != 0 || p.MaxWait != time.Hour {
				t.Errorf("drained: %+v\nfrom\n%s", p, out)
			}
			// Still draining: the log ends at a progress line (max-wait
			// cuts the loop, but its line is dropped here).
			lines := strings.Split(waitLog(t, asJSON, []float64{7}, func(w *params.Wait) { w.MaxWait = 20 * time.Millisecond }), "\n")
			var cut []string
			for _, l := range lines {
				if strings.Contains(l, "reached") {
					break
				}
				cut = append(cut, l)
			}
			if p := ParseDrainLog(strings.NewReader(strings.Join(cut, "\n"))); p.Phase != PhaseDraining || p.Sessions != 7 || p.MaxWait != 20*time.Millisecond {
				t.Errorf("draining: %+v\nfrom\n%s", p, strings.Join(cut, "\n"))
			}
			// Max-wait reached with 7 left.
			out = waitLog(t, asJSON, []float64{7}, func(w *params.Wait) { w.MaxWait = 20 * time.Millisecond })
			if p := ParseDrainLog(strings.NewReader(out)); p.Phase != PhaseMaxWait || p.Sessions != 7 {
				t.Errorf("max-wait: %+v\nfrom\n%s", p, out)
			}
			// Unreachable: every poll fails.
			out = waitLog(t, asJSON, []float64{-1}, func(w *params.Wait) { w.UnreachableLimit = 3 })
			if p := ParseDrainLog(strings.NewReader(out)); p.Phase != PhaseUnreachable || p.Sessions != -1 {
				t.Errorf("unreachable: %+v\nfrom\n%s", p, out)
			}
			// Failing, not yet given up.
			out = waitLog(t, asJSON, []float64{4, -1}, func(w *params.Wait) { w.UnreachableLimit = 1000; w.MaxWait = 30 * time.Millisecond })
			cut = nil
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "reached") {
					break
				}
				cut = append(cut, l)
			}
			if p := ParseDrainLog(strings.NewReader(strings.Join(cut, "\n"))); p.Phase != PhaseFailing || p.Failures < 1 || p.Sessions != 4 {
				t.Errorf("failing: %+v", p)
			}
		})
	}
}

func TestParseDrainLogIgnoresOtherLines(t *testing.T) {
	log := `2026-12-06T10:00:00Z drainctl: drain started: polling http://localhost:8080/sessions every 2s, until 0 sessions or 12h0m0s (min-wait 10s)
{"time":"2026-12-06T10:00:01Z","logger":"app","msg":"drained: 0 sessions left after 1s"}
2026-12-06T10:00:02Z app: drainctl: drained: 0 sessions left after 2s
2026-12-06T10:00:03Z drainctl: draining: 12 sessions left, waited 3s of 12h0m0s
2026-12-06T10:00:04Z drainctl: max-wait shortened from 12h0m0s to 30m0s by annotation stickydrain.io/max-wait
not a line at all`
	p := ParseDrainLog(strings.NewReader(log))
	want := time.Date(2026, 12, 6, 10, 0, 4, 0, time.UTC) // the shortening is its latest line
	if p.Phase != PhaseDraining || p.Sessions != 12 || p.MaxWait != 30*time.Minute || !p.At.Equal(want) {
		t.Errorf("got %+v, want draining, 12 sessions, max-wait 30m, at %v", p, want)
	}
	if p := ParseDrainLog(strings.NewReader("app: hello\n")); p.Phase != PhaseNotStarted || p.Sessions != -1 || p.Line != "" {
		t.Errorf("no drainctl line: got %+v", p)
	}
}
