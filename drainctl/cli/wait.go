package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
	"github.com/stickydrain/stickydrain/drainctl/control"
	"github.com/stickydrain/stickydrain/drainctl/drain"
	"github.com/stickydrain/stickydrain/drainctl/source"
)

const waitSynopsis = `drainctl wait [flags] [-- COMMAND ARGS...]

Polls the session count at --url until it is at or below --target (but not
before --min-wait), --max-wait passes, --unreachable-limit polls in a row
fail, or an operator sets the stickydrain.io/release annotation (with
--podinfo). Without --url it waits --max-wait. A COMMAND after -- runs first
(an existing preStop hook kept by the webhook).

Examples:
  drainctl wait --url http://localhost:8080/sessions --max-wait 12h --podinfo /etc/podinfo/annotations
  drainctl wait --url http://localhost:9090/metrics --format prometheus \
      --metric 'tomcat_sessions_active_current_sessions{name="app"}'
  drainctl wait --url http://localhost:8080/manager/text/sessions?path=/app --idle-below 30m \
      --basic-auth-env TOMCAT_MANAGER_CREDENTIALS
`

func runWait(ctx context.Context, args []string, env Env) int {
	w := params.NewWait()
	fs := newFlagSet("wait", env, waitSynopsis)
	w.Bind(fs)
	// Version skew (docs/opting-in.md, "Versions"): a newer webhook may
	// write a flag this drainctl does not know. The drain goes on with the
	// flags it knows, and says what it ignored, rather than exit 2 and
	// skip the drain.
	args, ignored := unknownFlags(fs, args)
	if status, ok := parse(fs, args, env); !ok {
		return status
	}
	before := fs.Args()
	if len(before) > 0 && !hasDashDash(args) {
		fmt.Fprintf(env.Stderr, "drainctl wait: unexpected argument %q; a command to run first goes after --\n", before[0])
		return api.ExitUsage
	}
	if err := w.Validate(); err != nil {
		fmt.Fprintf(env.Stderr, "drainctl wait: %v\n", err)
		return api.ExitUsage
	}
	var counter drain.Counter
	if w.URL != "" {
		c, err := source.New(w.Source)
		if err != nil {
			fmt.Fprintf(env.Stderr, "drainctl wait: %v\n", err)
			return api.ExitUsage
		}
		counter = c
	}

	out, closeLog, err := logWriter(w, env)
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl wait: %v\n", err)
		return api.ExitError
	}
	defer closeLog()
	log := drain.NewLogger(out, w.LogFormat == api.LogJSON)
	// The operator's release or shorter max-wait, through kubectl exec:
	// listening from the start, so that one sent during the pod's own
	// preStop is kept.
	var ctl *control.Server
	if env.ControlSocket != "" {
		var err error
		if ctl, err = control.Listen(ctx, env.ControlSocket, w.MaxWait); err != nil {
			log.Log(fmt.Sprintf("drainctl release and shorten cannot reach this drain: %v", err), "event", "control-failed", "error", err.Error())
		}
	}
	for _, f := range ignored {
		msg := fmt.Sprintf("ignoring %s: not a flag of drainctl %s (written by a newer webhook?); draining with the flags it knows", f, Version)
		log.Log(msg, "event", "ignored-flag", "flag", f)
		if out != env.Stderr {
			fmt.Fprintln(env.Stderr, "drainctl wait: "+msg)
		}
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// The pod's own preStop hook first, whatever its kind; its failure is
	// logged, not fatal: the drain that follows protects the sessions.
	if w.PreSleep > 0 {
		preSleep(ctx, w.PreSleep, log)
	}
	if w.PreHTTPGet != "" {
		preHTTPGet(ctx, w.PreHTTPGet, w.PreHTTPHeaders, log)
	}
	if len(before) > 0 {
		runBefore(ctx, before, log)
	}
	res := drain.Wait(ctx, drain.Config{Wait: *w, Counter: counter, Log: log, Control: ctl})

	summary := fmt.Sprintf("drainctl: %s after %s (%d polls, last count %s)",
		res.Outcome, res.Waited.Round(time.Millisecond), res.Polls, countText(res.LastCount))
	log.Log(summary[len("drainctl: "):], "event", "summary", "outcome", res.Outcome.String(),
		"waited", res.Waited, "polls", res.Polls, "sessions", res.LastCount)
	if out != env.Stderr {
		// The hook's own output: the kubelet logs a failed hook's output
		// (its FailedPreStopHook Event says only "PreStopHook failed").
		fmt.Fprintln(env.Stderr, summary)
	}
	switch res.Outcome {
	case drain.Drained:
		return api.ExitDrained
	case drain.Released:
		return api.ExitReleased
	case drain.MaxWaitReached:
		return api.ExitMaxWait
	case drain.Unreachable:
		return api.ExitUnreachable
	default:
		return api.ExitInterrupted
	}
}

// unknownFlags takes out of args (up to a "--") the long flags fs does not
// define, written --name=value (as the webhook writes every flag) or bare
// --name followed by another flag or nothing, and returns them. Anything
// else (--name value: its arity is unknown) is left for the parser to
// refuse.
func unknownFlags(fs *pflag.FlagSet, args []string) (kept, ignored []string) {
	for i, a := range args {
		if a == "--" {
			return append(kept, args[i:]...), ignored
		}
		name, isLong := strings.CutPrefix(a, "--")
		name, _, withValue := strings.Cut(name, "=")
		alone := withValue || i+1 == len(args) || strings.HasPrefix(args[i+1], "-")
		if isLong && alone && name != "" && name != "help" && fs.Lookup(name) == nil {
			ignored = append(ignored, a)
			continue
		}
		kept = append(kept, a)
	}
	return kept, ignored
}

func hasDashDash(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return true
		}
	}
	return false
}

func countText(n float64) string {
	if n < 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

// logWriter picks where progress goes: --log-file; else the container's
// main stdout, so `kubectl logs` shows it (the kubelet discards a hook's own
// output); else stderr. On a terminal, stderr.
func logWriter(w *params.Wait, env Env) (io.Writer, func(), error) {
	if w.LogFile != "" {
		f, err := os.OpenFile(w.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("--%s: %w", api.ParamLogFile, err)
		}
		return f, func() { f.Close() }, nil
	}
	if f, ok := env.Stderr.(*os.File); ok && isTerminal(f) {
		return env.Stderr, func() {}, nil
	}
	if env.OpenMainStdout != nil && os.Getpid() != 1 {
		if f, err := env.OpenMainStdout(); err == nil {
			return f, func() { f.Close() }, nil
		}
	}
	return env.Stderr, func() {}, nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
