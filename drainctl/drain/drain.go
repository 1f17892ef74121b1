// Package drain is drainctl's wait loop: it polls the session count until
// the pod is drained, the maximum wait passes, the app stops answering, an
// operator releases the drain, or it is interrupted.
package drain

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
	"github.com/stickydrain/stickydrain/drainctl/control"
	"github.com/stickydrain/stickydrain/drainctl/podinfo"
	"github.com/stickydrain/stickydrain/drainctl/source"
)

// Outcome is how a wait ended.
type Outcome int

// Outcomes, each with its own exit status (see cli).
const (
	Drained Outcome = iota
	Released
	MaxWaitReached
	Unreachable
	Interrupted
)

func (o Outcome) String() string {
	switch o {
	case Drained:
		return "drained"
	case Released:
		return "released"
	case MaxWaitReached:
		return "max-wait reached"
	case Unreachable:
		return "app unreachable"
	case Interrupted:
		return "interrupted"
	}
	return "unknown"
}

// Counter reads the session count once.
type Counter interface {
	Count(ctx context.Context) (source.Reading, error)
}

// Config is one wait.
type Config struct {
	params.Wait
	// Counter is nil for a timed drain (no --url).
	Counter Counter
	Log     *Logger
	// Control is the operator's control socket; nil: none.
	Control *control.Server
	// PodinfoEvery is how often the annotations file is re-read; 0 means 1s.
	PodinfoEvery time.Duration
}

// Result says how the wait ended.
type Result struct {
	Outcome Outcome
	Waited  time.Duration
	// LastCount is the last count read; -1 when none was.
	LastCount float64
	Polls     int
	Detected  string
}

// Heartbeat is the longest a wait goes without a progress line while the
// count does not change.
const Heartbeat = time.Minute

// Wait runs the loop. It ends:
//   - Drained: the count is ≤ Target and MinWait has passed (a count at the
//     target earlier is read again once MinWait passes: the load balancer may
//     have sent new sessions before its drain took effect);
//   - MaxWaitReached: MaxWait (or a shorter max-wait annotation) passed;
//   - Unreachable: UnreachableLimit polls in a row failed;
//   - Released: the release annotation appeared in the podinfo file;
//   - Interrupted: ctx ended (SIGTERM, SIGINT).
func Wait(ctx context.Context, cfg Config) Result {
	start := time.Now()
	maxWait := cfg.MaxWait
	res := Result{LastCount: -1}
	log := cfg.Log
	every := cfg.PodinfoEvery
	if every <= 0 {
		every = time.Second
	}
	var (
		failures    int
		lastLogged  = start
		logged      bool // a progress line since the last failure
		prevCount   float64
		lastErr     string
		podinfoErrs int
		released    bool
	)
	elapsed := func() time.Duration { return time.Since(start).Round(time.Second) }
	finish := func(o Outcome) Result {
		res.Outcome = o
		res.Waited = time.Since(start)
		return res
	}

	// checkPodinfo applies what operators asked, through the control
	// socket or the annotations; it reports true on release.
	checkPodinfo := func() bool {
		rel, d := cfg.Control.Asked()
		if d > 0 && d < maxWait {
			log.Log(fmt.Sprintf("max-wait shortened from %s to %s by the operator (drainctl shorten)", maxWait, d),
				"event", "max-wait-shortened", "max_wait", d)
			maxWait = d
		}
		if rel {
			log.Log(fmt.Sprintf("released by the operator (drainctl release) after %s", elapsed()),
				"event", "released", "waited", time.Since(start))
			return true
		}
		if cfg.Podinfo == "" {
			return false
		}
		ann, err := podinfo.Read(cfg.Podinfo)
		if err != nil {
			// Logged once per kind of error: the file may be missing in a
			// pod not made by the webhook; the drain goes on.
			if podinfoErrs == 0 {
				log.Log(fmt.Sprintf("cannot read operator annotations (release and max-wait): %v", err), "error", err.Error())
			}
			podinfoErrs++
			return false
		}
		if v, ok := ann[api.AnnotationRelease]; ok && v != "false" {
			log.Log(fmt.Sprintf("released by annotation %s=%q after %s", api.AnnotationRelease, v, elapsed()),
				"event", "released", "waited", time.Since(start))
			return true
		}
		if v, ok := ann[api.AnnotationMaxWait]; ok {
			d, err := time.ParseDuration(v)
			switch {
			case err != nil || d < 0:
				if v != lastErr {
					log.Log(fmt.Sprintf("ignoring annotation %s=%q: want a Go duration such as 30m", api.AnnotationMaxWait, v))
					lastErr = v
				}
			case d < maxWait:
				log.Log(fmt.Sprintf("max-wait shortened from %s to %s by annotation %s", maxWait, d, api.AnnotationMaxWait),
					"event", "max-wait-shortened", "max_wait", d)
				maxWait = d
			}
		}
		return false
	}

	if cfg.Counter == nil {
		log.Log(fmt.Sprintf("timed drain: no session-count URL, waiting %s", maxWait), "event", "start", "max_wait", maxWait)
	} else {
		log.Log(fmt.Sprintf("drain started: polling %s every %s, until %v sessions or %s (min-wait %s)",
			cfg.URL, cfg.Interval, cfg.Target, maxWait, cfg.MinWait), "event", "start", "url", cfg.URL, "max_wait", maxWait)
	}

	for {
		if checkPodinfo() {
			return finish(Released)
		}
		if time.Since(start) >= maxWait {
			log.Log(fmt.Sprintf("max-wait %s reached", maxWait), "event", "max-wait", "sessions", res.LastCount)
			return finish(MaxWaitReached)
		}

		atTarget := false
		if cfg.Counter != nil {
			pctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
			r, err := cfg.Counter.Count(pctx)
			cancel()
			if ctx.Err() != nil {
				return finish(Interrupted)
			}
			res.Polls++
			if err != nil {
				failures++
				log.Log(fmt.Sprintf("poll failed (%d of %d in a row): %v", failures, cfg.UnreachableLimit, err),
					"event", "poll-failed", "error", err.Error(), "failures", failures)
				logged = false
				if failures >= cfg.UnreachableLimit {
					log.Log(fmt.Sprintf("app unreachable: %d polls failed in a row; giving up after %s", failures, elapsed()),
						"event", "unreachable")
					return finish(Unreachable)
				}
			} else {
				failures = 0
				if res.Detected == "" && (cfg.Format == api.FormatAuto || cfg.Format == "") {
					log.Log(fmt.Sprintf("detected format %s", r.Format), "event", "detected", "format", r.Format)
				}
				res.Detected = r.Format
				res.LastCount = r.Count
				atTarget = r.Count <= cfg.Target
				if atTarget && time.Since(start) >= cfg.MinWait {
					log.Log(fmt.Sprintf("drained: %s sessions left after %s", fmtCount(r.Count), elapsed()),
						"event", "drained", "sessions", r.Count, "waited", time.Since(start))
					return finish(Drained)
				}
				line := fmt.Sprintf("draining: %s sessions left, waited %s of %s", fmtCount(r.Count), elapsed(), maxWait)
				if atTarget {
					line = fmt.Sprintf("draining: %s sessions left, holding until min-wait %s has passed", fmtCount(r.Count), cfg.MinWait)
				}
				// A line at each change, and a heartbeat while nothing changes.
				if r.Count != prevCount || !logged || time.Since(lastLogged) >= Heartbeat {
					log.Log(line, "event", "progress", "sessions", r.Count, "waited", time.Since(start))
					lastLogged, logged = time.Now(), true
				}
				prevCount = r.Count
			}
		}

		// Next wake-up: one interval with jitter, or the end of min-wait
		// when the target is already met, never past max-wait.
		sleep := jitter(cfg.Interval)
		if cfg.Counter == nil {
			sleep = maxWait - time.Since(start)
		}
		if atTarget {
			if d := cfg.MinWait - time.Since(start); d < sleep {
				sleep = d
			}
		}
		if d := maxWait - time.Since(start); d < sleep {
			sleep = d
		}
		if !sleepWatching(ctx, sleep, every, func() bool {
			// While asleep, react to release and a shortened max-wait.
			before := maxWait
			if checkPodinfo() {
				released = true
				return true
			}
			return maxWait != before && time.Since(start) >= maxWait
		}) {
			if ctx.Err() != nil {
				log.Log(fmt.Sprintf("interrupted after %s", elapsed()), "event", "interrupted")
				return finish(Interrupted)
			}
			if released {
				return finish(Released)
			}
		}
	}
}

// sleepWatching sleeps for d, calling check every `every`; it returns false
// early when ctx ends or check returns true.
func sleepWatching(ctx context.Context, d, every time.Duration, check func() bool) bool {
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-tick.C:
			if check() {
				return false
			}
		}
	}
}

// jitter spreads polls of many pods by ±10%.
func jitter(d time.Duration) time.Duration {
	f := 0.9 + 0.2*rand.Float64()
	return time.Duration(float64(d) * f)
}

func fmtCount(n float64) string {
	return strconv.FormatFloat(n, 'f', -1, 64)
}
