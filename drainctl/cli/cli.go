// Package cli is drainctl's command line: wait, count, probe, release,
// shorten, install, version and help. Main returns the process exit status.
package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
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

// Version is set at build time (-ldflags -X).
var Version = "dev"

// Env is what Main needs from the process, for tests.
type Env struct {
	Stdout, Stderr io.Writer
	// OpenMainStdout opens the container's main process stdout for logs.
	OpenMainStdout func() (io.WriteCloser, error)
	Executable     func() (string, error)
	// ControlSocket is where wait listens and release and shorten send
	// (api.ControlSocket); empty: wait listens nowhere.
	ControlSocket string
}

// DefaultEnv is the real process environment.
func DefaultEnv() Env {
	return Env{
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		OpenMainStdout: func() (io.WriteCloser, error) {
			pid, err := mainProcess("/proc", os.Getpid())
			if err != nil {
				return nil, err
			}
			return os.OpenFile(fmt.Sprintf("/proc/%d/fd/1", pid), os.O_WRONLY|os.O_APPEND, 0)
		},
		Executable:    os.Executable,
		ControlSocket: controlSocket(),
	}
}

// controlSocket is api.ControlSocket qualified by the container's mount
// namespace, which `kubectl exec` into the container (and the kubelet's
// preStop exec) shares with its drainctl wait, and no other container
// does: pods with hostNetwork share one abstract socket namespace, pods
// with hostPID one PID namespace too, and must not reach each other's
// drains.
func controlSocket() string {
	ns, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return api.ControlSocket
	}
	return api.ControlSocket + "/" + strings.Trim(strings.TrimPrefix(ns, "mnt:"), "[]")
}

// Main runs drainctl with args (without the program name).
func Main(ctx context.Context, args []string, env Env) int {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return api.ExitUsage
	}
	switch args[0] {
	case "wait":
		return runWait(ctx, args[1:], env)
	case "count":
		return runCount(ctx, args[1:], env)
	case "probe":
		return runProbe(ctx, args[1:], env)
	case "install":
		return runInstall(args[1:], env)
	case "release", "shorten":
		return runControl(ctx, args[0], args[1:], env)
	case "version", "--version", "-version":
		fmt.Fprintf(env.Stdout, "drainctl %s\n", Version)
		return 0
	case "help", "--help", "-help", "-h":
		if len(args) > 1 {
			return Main(ctx, []string{args[1], "--help"}, env)
		}
		fmt.Fprint(env.Stdout, usage)
		return 0
	}
	fmt.Fprintf(env.Stderr, "drainctl: unknown command %q; want wait, count, probe, release, shorten, install, version or help\n", args[0])
	return api.ExitUsage
}

const usage = `drainctl waits, in a pod's preStop hook, until the application's sessions have ended.

Usage:
  drainctl wait [flags] [-- COMMAND ARGS...]   poll the session count until drained
  drainctl count [flags]                       print the session count once
  drainctl probe --get URL [flags]             tell whether a probe's requests create sessions
  drainctl release                             end the drain running in this pod now
  drainctl shorten --max-wait DURATION         lower the max-wait of the drain running in this pod
  drainctl install DIR                         copy this binary into DIR (init containers)
  drainctl version
  drainctl help [COMMAND]

Examples:
  drainctl wait --url http://localhost:8080/manager/text/list --context /app \
      --basic-auth-file /etc/manager/credentials --max-wait 12h
  drainctl wait --url http://localhost:8080/actuator/metrics/tomcat.sessions.active.current
  drainctl wait --url http://localhost:8080/drain --format match --pattern DRAINING
  drainctl wait --max-wait 15m          (no URL: a timed drain)

Exit status of wait: 0 drained, 2 usage error, 3 max-wait reached, 4 app unreachable,
5 released by an operator, 6 interrupted, 1 other failure.
`

func newFlagSet(name string, env Env, synopsis string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	// Flags end at the first argument: what follows -- is a command.
	fs.SetInterspersed(false)
	fs.Usage = func() {
		fmt.Fprintf(env.Stdout, "%s\nFlags:\n%s", synopsis, fs.FlagUsages())
	}
	return fs
}

// parse parses flags; ok is false with the exit status when it should stop.
func parse(fs *pflag.FlagSet, args []string, env Env) (status int, ok bool) {
	// On an error print only the error, naming the flag; the full usage on
	// --help.
	help := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = help
	if errors.Is(err, pflag.ErrHelp) {
		fs.Usage()
		return 0, false
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl %s: %v\n(run 'drainctl %s --help' for the flags)\n", fs.Name(), err, fs.Name())
		return api.ExitUsage, false
	}
	return 0, true
}

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

// maxHookOutput is how much of the pod's own preStop command's output
// runBefore keeps for the log. The rest is read and counted, not kept: a
// hook that prints without end neither grows drainctl's memory nor blocks
// on a full pipe.
const maxHookOutput = 64 << 10

// hookOutputDelay is how long runBefore waits, once the command has
// exited, for its output to close: a process it started in the background
// may hold it open for as long as it runs, and the drain must not wait
// for that.
const hookOutputDelay = 2 * time.Second

// runBefore runs the pod's own preStop command. Its failure is logged, not
// fatal: the drain that follows is what protects the sessions.
func runBefore(ctx context.Context, argv []string, log *drain.Logger) {
	log.Log(fmt.Sprintf("running the original preStop command first: %s", strings.Join(argv, " ")), "event", "before")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out := &headBuffer{max: maxHookOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = hookOutputDelay
	err := cmd.Run()
	switch text := strings.TrimSpace(string(out.head)); {
	case out.total > int64(len(out.head)):
		log.Log(fmt.Sprintf("original preStop output (the first %d of %d bytes): %s", len(out.head), out.total, text))
	case out.total > 0:
		log.Log(fmt.Sprintf("original preStop output: %s", text))
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		log.Log(fmt.Sprintf("original preStop command exited but left its output open (a process in the background?); not waiting for it past %s", hookOutputDelay))
		err = nil
	}
	if err != nil {
		log.Log(fmt.Sprintf("original preStop command failed: %v; draining anyway", err), "event", "before-failed")
	}
}

// headBuffer keeps the first max bytes written to it and counts them all.
// As both Stdout and Stderr of an exec.Cmd it is written by one goroutine
// at a time (os/exec's promise for one comparable writer).
type headBuffer struct {
	head  []byte
	max   int
	total int64
}

func (b *headBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.head); room > 0 {
		b.head = append(b.head, p[:min(room, len(p))]...)
	}
	b.total += int64(len(p))
	return len(p), nil
}

// preSleep is the pod's own preStop sleep: the time a load balancer that
// learns from endpoints alone needs to stop sending new requests.
func preSleep(ctx context.Context, d time.Duration, log *drain.Logger) {
	log.Log(fmt.Sprintf("the pod's own preStop sleep first: %s", d), "event", "before")
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// preHTTPGet is the pod's own preStop httpGet, called as the kubelet calls
// it: a GET, the certificate not verified, any status accepted (logged),
// bounded by api.PreHTTPGetTimeout.
func preHTTPGet(ctx context.Context, url string, headers []string, log *drain.Logger) {
	log.Log(fmt.Sprintf("the pod's own preStop httpGet first: GET %s", url), "event", "before")
	ctx, cancel := context.WithTimeout(ctx, api.PreHTTPGetTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		log.Log(fmt.Sprintf("the pod's own preStop httpGet: %v; draining anyway", err), "event", "before-failed")
		return
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ":")
		req.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	c := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // as the kubelet's httpGet hook
		CheckRedirect: sameHostName,
	}
	resp, err := c.Do(req)
	if err != nil {
		log.Log(fmt.Sprintf("the pod's own preStop httpGet failed: %v; draining anyway", err), "event", "before-failed")
		return
	}
	// Read (a bounded part of) the body and throw it away, as the kubelet
	// does: never kept.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		log.Log(fmt.Sprintf("the pod's own preStop httpGet answered %s; draining anyway", resp.Status), "event", "before-failed")
		return
	}
	if loc := resp.Header.Get("Location"); isRedirect(resp.StatusCode) && loc != "" {
		log.Log(fmt.Sprintf("the pod's own preStop httpGet answered %s, a redirect to another host (%.200s), not followed, as the kubelet does not", resp.Status, loc))
		return
	}
	log.Log(fmt.Sprintf("the pod's own preStop httpGet answered %s", resp.Status))
}

// isRedirect reports whether status is one http.Client follows: one
// still standing in the final answer was refused by sameHostName.
func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// sameHostName is the redirect policy of the kubelet's lifecycle hook
// client (its httpprobe.RedirectChecker(false)): a redirect to another
// host name is not followed, its response is the answer; so the hook's
// headers reach no host its URL does not name.
func sameHostName(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
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

const countSynopsis = `drainctl count [flags]

Fetches the session count once and prints it: the number on stdout, the
detected format on stderr. Exit status 0, 2 usage error, 4 fetch or parse
failure.

Example:
  drainctl count --url http://localhost:8080/manager/text/list --context /app --basic-auth-env MANAGER
`

func runCount(ctx context.Context, args []string, env Env) int {
	w := params.NewWait()
	fs := newFlagSet("count", env, countSynopsis)
	w.BindSource(fs)
	if status, ok := parse(fs, args, env); !ok {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "drainctl count: unexpected argument %q\n", fs.Arg(0))
		return api.ExitUsage
	}
	if w.URL == "" {
		fmt.Fprintln(env.Stderr, "drainctl count: --url is required (e.g. --url http://localhost:8080/sessions)")
		return api.ExitUsage
	}
	c, ok := sourceClient("count", w, env)
	if !ok {
		return api.ExitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, w.RequestTimeout)
	defer cancel()
	r, err := c.Count(ctx)
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl count: %v\n", err)
		return api.ExitUnreachable
	}
	fmt.Fprintln(env.Stdout, countText(r.Count))
	fmt.Fprintf(env.Stderr, "format: %s\n", r.Format)
	return 0
}

// sourceClient is the count's client of w's source flags, for command
// name (count, probe); false once it has said why there is none.
func sourceClient(name string, w *params.Wait, env Env) (*source.Client, bool) {
	if err := w.Source.Validate(); err != nil {
		fmt.Fprintf(env.Stderr, "drainctl %s: %v\n", name, err)
		return nil, false
	}
	c, err := source.New(w.Source)
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl %s: %v\n", name, err)
		return nil, false
	}
	return c, true
}

const installSynopsis = `drainctl install DIR

Copies this binary to DIR/drainctl atomically (temporary file, fsync,
rename, mode 0755). The webhook's init container runs it to deliver
drainctl into images without a shell or cp.

Example:
  drainctl install /stickydrain/bin
`

func runInstall(args []string, env Env) int {
	fs := newFlagSet("install", env, installSynopsis)
	if status, ok := parse(fs, args, env); !ok {
		return status
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(env.Stderr, "drainctl install: want exactly one argument, the target directory (e.g. drainctl install /stickydrain/bin)")
		return api.ExitUsage
	}
	self, err := env.Executable()
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl install: locating this binary: %v\n", err)
		return api.ExitError
	}
	dst, err := Install(self, fs.Arg(0))
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl install: %v\n", err)
		return api.ExitError
	}
	fmt.Fprintf(env.Stdout, "installed %s\n", dst)
	return 0
}

// Install copies the file at src to dir/drainctl atomically and returns the
// installed path. A reader of dir/drainctl sees the old file or the whole
// new one, never part of it.
func Install(src, dir string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", src, err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, ".drainctl-*")
	if err != nil {
		return "", fmt.Errorf("creating a temporary file in %s: %w", dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		return "", fmt.Errorf("copying to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		return "", fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	dst := filepath.Join(dir, "drainctl")
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("renaming into place: %w", err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable; not all filesystems support it
		d.Close()
	}
	return dst, nil
}

const releaseSynopsis = `drainctl release

Ends the drain that drainctl wait runs in this pod (its preStop hook) now:
wait exits 5. Run it in the pod: kubectl exec POD -c CONTAINER --
/stickydrain/bin/drainctl release (kubectl stickydrain release does). It
reaches wait through a unix socket of the pod's own network namespace,
where the stickydrain.io/release annotation cannot: the kubelet no longer
refreshes a terminating pod's annotations file. Exit status 0 done, 1 no
drain runs in the pod, 2 usage error.
`

const shortenSynopsis = `drainctl shorten --max-wait DURATION

Lowers the max-wait of the drain that drainctl wait runs in this pod,
counted from the drain's start; a value not shorter than the one it runs
with is refused. Run it in the pod, as drainctl release. Exit status 0
done, 1 no drain runs in the pod or the value was refused, 2 usage error.
`

func runControl(ctx context.Context, name string, args []string, env Env) int {
	synopsis := releaseSynopsis
	if name == "shorten" {
		synopsis = shortenSynopsis
	}
	fs := newFlagSet(name, env, synopsis)
	maxWait := fs.Duration("max-wait", 0, "shorten: the drain's new max-wait (`duration`, e.g. 30m)")
	if status, ok := parse(fs, args, env); !ok {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "drainctl %s: unexpected argument %q\n", name, fs.Arg(0))
		return api.ExitUsage
	}
	req := api.ControlRelease
	if name == "shorten" {
		if *maxWait <= 0 {
			fmt.Fprintln(env.Stderr, "drainctl shorten: --max-wait is required, a positive duration such as 30m")
			return api.ExitUsage
		}
		req = api.ControlMaxWait + " " + maxWait.String()
	} else if fs.Changed("max-wait") {
		fmt.Fprintln(env.Stderr, "drainctl release: --max-wait belongs to drainctl shorten")
		return api.ExitUsage
	}
	if env.ControlSocket == "" {
		fmt.Fprintf(env.Stderr, "drainctl %s: no control socket\n", name)
		return api.ExitError
	}
	answer, err := control.Send(ctx, env.ControlSocket, req)
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl %s: %v\n", name, err)
		return api.ExitError
	}
	fmt.Fprintln(env.Stdout, answer)
	return 0
}
