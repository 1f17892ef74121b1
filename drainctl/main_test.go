package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
	"github.com/stickydrain/stickydrain/internal/cmdline/cmdlinetest"
)

// These tests run drainctl as a real process, built once in TestMain, and
// check each way of ending by its exit status and its log.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "drainctl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "drainctl")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building drainctl: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type run struct {
	code     int
	stdout   string
	stderr   string
	log      string
	duration time.Duration
}

func drainctl(t *testing.T, args ...string) run {
	t.Helper()
	return drainctlWith(t, nil, args...)
}

// drainctlWith runs drainctl with a log file and calls during (if not nil)
// once it has started.
func drainctlWith(t *testing.T, during func(*os.Process), args ...string) run {
	t.Helper()
	return drainctlWithAttr(t, nil, during, args...)
}

// drainctlWithAttr is drainctlWith with the process' attributes.
func drainctlWithAttr(t *testing.T, attr *syscall.SysProcAttr, during func(*os.Process), args ...string) run {
	t.Helper()
	logFile := filepath.Join(t.TempDir(), "drainctl.log")
	if len(args) > 0 && args[0] == "wait" {
		args = append([]string{"wait", "--log-file", logFile}, args[1:]...)
	}
	cmd := exec.Command(binary, args...)
	cmd.SysProcAttr = attr
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during(cmd.Process)
	}
	err := cmd.Wait()
	r := run{stdout: stdout.String(), stderr: stderr.String(), duration: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(logFile)
	r.log = string(b)
	return r
}

// countServer serves the counts in turn, then the last one forever.
func countServer(t *testing.T, counts ...int) *httptest.Server {
	var i atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(i.Add(1)) - 1
		if n >= len(counts) {
			n = len(counts) - 1
		}
		fmt.Fprint(w, counts[n])
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestWaitExitsWhenDrained(t *testing.T) {
	srv := countServer(t, 3, 2, 0)
	r := drainctl(t, "wait", "--url", srv.URL, "--interval", "50ms", "--min-wait", "0s", "--max-wait", "30s")
	if r.code != api.ExitDrained {
		t.Fatalf("exit %d, want %d (drained)\nlog:\n%s\nstderr:\n%s", r.code, api.ExitDrained, r.log, r.stderr)
	}
	for _, want := range []string{"detected format number", "draining: 3 sessions left", "draining: 2 sessions left", "drained: 0 sessions left", "drained after"} {
		if !strings.Contains(r.log, want) {
			t.Errorf("log lacks %q:\n%s", want, r.log)
		}
	}
}

func TestWaitHoldsUntilMinWait(t *testing.T) {
	srv := countServer(t, 0)
	r := drainctl(t, "wait", "--url", srv.URL, "--interval", "50ms", "--min-wait", "600ms", "--max-wait", "30s")
	if r.code != api.ExitDrained {
		t.Fatalf("exit %d, want drained\n%s", r.code, r.log)
	}
	if r.duration < 600*time.Millisecond {
		t.Errorf("ended after %v, before --min-wait 600ms", r.duration)
	}
	if !strings.Contains(r.log, "holding until min-wait") {
		t.Errorf("log does not say it holds for min-wait:\n%s", r.log)
	}
}

func TestWaitGivesUpAtMaxWait(t *testing.T) {
	srv := countServer(t, 5)
	r := drainctl(t, "wait", "--url", srv.URL, "--interval", "50ms", "--min-wait", "0s", "--max-wait", "400ms")
	if r.code != api.ExitMaxWait {
		t.Fatalf("exit %d, want %d (max-wait)\n%s", r.code, api.ExitMaxWait, r.log)
	}
	if !strings.Contains(r.stderr, "max-wait reached") {
		t.Errorf("stderr lacks the summary the kubelet would put in its event: %q", r.stderr)
	}
}

func TestTimedDrainWithoutURL(t *testing.T) {
	r := drainctl(t, "wait", "--min-wait", "0s", "--max-wait", "300ms")
	if r.code != api.ExitMaxWait {
		t.Fatalf("exit %d, want %d\n%s", r.code, api.ExitMaxWait, r.log)
	}
	if r.duration < 300*time.Millisecond {
		t.Errorf("a timed drain of 300ms ended after %v", r.duration)
	}
	if !strings.Contains(r.log, "timed drain") {
		t.Errorf("log:\n%s", r.log)
	}
}

func TestWaitEndsWhenAppIsUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "stopping", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	r := drainctl(t, "wait", "--url", srv.URL, "--interval", "50ms", "--unreachable-limit", "3", "--max-wait", "30s")
	if r.code != api.ExitUnreachable {
		t.Fatalf("exit %d, want %d (unreachable)\n%s", r.code, api.ExitUnreachable, r.log)
	}
	if got := strings.Count(r.log, "poll failed"); got != 3 {
		t.Errorf("%d failed polls logged, want 3:\n%s", got, r.log)
	}
}

func TestWaitFailuresMustBeConsecutive(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		switch {
		case i > 8:
			fmt.Fprint(w, 0)
		case i%2 == 0:
			http.Error(w, "flaky", http.StatusBadGateway)
		default:
			fmt.Fprint(w, 4)
		}
	}))
	defer srv.Close()
	r := drainctl(t, "wait", "--url", srv.URL, "--interval", "30ms", "--unreachable-limit", "2", "--min-wait", "0s", "--max-wait", "30s")
	if r.code != api.ExitDrained {
		t.Fatalf("exit %d, want drained: one failure between successes must not count as two\n%s", r.code, r.log)
	}
}

func writeAnnotations(t *testing.T, path string, kv map[string]string) {
	t.Helper()
	var b strings.Builder
	for k, v := range kv {
		fmt.Fprintf(&b, "%s=%q\n", k, v)
	}
	// Atomically, as the kubelet swaps the downward-API files.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestWaitIsReleasedByAnnotation(t *testing.T) {
	srv := countServer(t, 9)
	podinfo := filepath.Join(t.TempDir(), "annotations")
	writeAnnotations(t, podinfo, map[string]string{"app": "x"})
	r := drainctlWith(t, func(*os.Process) {
		time.Sleep(300 * time.Millisecond)
		writeAnnotations(t, podinfo, map[string]string{"app": "x", "stickydrain.io/release": "true"})
	}, "wait", "--url", srv.URL, "--interval", "100ms", "--max-wait", "1m", "--podinfo", podinfo)
	if r.code != api.ExitReleased {
		t.Fatalf("exit %d, want %d (released)\n%s", r.code, api.ExitReleased, r.log)
	}
	if !strings.Contains(r.log, `released by annotation stickydrain.io/release="true"`) {
		t.Errorf("log:\n%s", r.log)
	}
}

func TestWaitHonoursShorterMaxWaitAnnotation(t *testing.T) {
	srv := countServer(t, 9)
	podinfo := filepath.Join(t.TempDir(), "annotations")
	writeAnnotations(t, podinfo, map[string]string{"stickydrain.io/max-wait": "300ms"})
	r := drainctl(t, "wait", "--url", srv.URL, "--interval", "100ms", "--min-wait", "0s", "--max-wait", "1h", "--podinfo", podinfo)
	if r.code != api.ExitMaxWait {
		t.Fatalf("exit %d, want %d\n%s", r.code, api.ExitMaxWait, r.log)
	}
	if !strings.Contains(r.log, "max-wait shortened from 1h0m0s to 300ms") {
		t.Errorf("log:\n%s", r.log)
	}
}

func TestWaitStopsOnSIGTERM(t *testing.T) {
	srv := countServer(t, 9)
	r := drainctlWith(t, func(p *os.Process) {
		time.Sleep(300 * time.Millisecond)
		p.Signal(syscall.SIGTERM)
	}, "wait", "--url", srv.URL, "--interval", "10s", "--max-wait", "1h")
	if r.code != api.ExitInterrupted {
		t.Fatalf("exit %d, want %d (interrupted)\n%s", r.code, api.ExitInterrupted, r.log)
	}
	if r.duration > 5*time.Second {
		t.Errorf("took %v to stop on SIGTERM: it should not wait out its interval", r.duration)
	}
}

// Version skew: a newer webhook writes a flag this drainctl does not know
// (as --name=value, as it writes every flag). The drain still happens,
// with the flags it knows, and the log says what was ignored — an exit 2
// would make the kubelet skip the drain.
func TestWaitIgnoresFlagsOfANewerWebhook(t *testing.T) {
	srv := countServer(t, 2, 0)
	r := drainctl(t, "wait", "--url="+srv.URL, "--interval=50ms", "--drain-from-the-future=yes", "--min-wait=0s", "--max-wait=30s", "--another-new-switch")
	if r.code != api.ExitDrained {
		t.Fatalf("exit %d, want %d (drained)\nlog:\n%s\nstderr:\n%s", r.code, api.ExitDrained, r.log, r.stderr)
	}
	for _, want := range []string{"ignoring --drain-from-the-future=yes: not a flag of drainctl", "ignoring --another-new-switch", "drained: 0 sessions left"} {
		if !strings.Contains(r.log, want) {
			t.Errorf("log lacks %q:\n%s", want, r.log)
		}
	}
	// What follows -- is the pod's own command, never taken for a flag.
	marker := filepath.Join(t.TempDir(), "marker")
	r = drainctl(t, "wait", "--min-wait=0s", "--max-wait=100ms", "--", "/bin/sh", "-c", "echo $0 > "+marker, "--not-ours")
	if r.code != api.ExitMaxWait || strings.Contains(r.log, "ignoring") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.log, r.stderr)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "--not-ours\n" {
		t.Errorf("the pod's command got %q, %v; want its own --not-ours", b, err)
	}
}

// The pod's own preStop sleep and httpGet, kept by the webhook, run before
// the drain: the sleep's time, then the GET with its headers, then the
// polls. A failing GET is logged and the drain goes on.
func TestWaitRunsThePodsOwnSleepAndHTTPGetFirst(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	var preAt, firstPoll time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/pre-stop":
			calls = append(calls, r.Header.Get("X-Drain")+" "+r.URL.RawQuery)
			preAt = time.Now()
		case "/count":
			if firstPoll.IsZero() {
				firstPoll = time.Now()
			}
			fmt.Fprint(w, 0)
		case "/broken":
			http.Error(w, "no", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	start := time.Now()
	r := drainctl(t, "wait", "--url="+srv.URL+"/count", "--interval=50ms", "--min-wait=0s", "--max-wait=30s",
		"--pre-sleep=400ms", "--pre-http-get="+srv.URL+"/pre-stop?who=pod", "--pre-http-header=X-Drain: yes")
	if r.code != api.ExitDrained {
		t.Fatalf("exit %d, want %d (drained)\nlog:\n%s\nstderr:\n%s", r.code, api.ExitDrained, r.log, r.stderr)
	}
	mu.Lock()
	gotCalls, gotPre, gotPoll := slices.Clone(calls), preAt, firstPoll
	mu.Unlock()
	if len(gotCalls) != 1 || gotCalls[0] != "yes who=pod" {
		t.Errorf("the pod's httpGet hook got %q, want one GET with X-Drain: yes and its query", gotCalls)
	}
	if gotPre.Sub(start) < 400*time.Millisecond || gotPoll.Before(gotPre) {
		t.Errorf("GET %v after the start (want after the 400ms sleep), first poll %v after it (want after the GET)", gotPre.Sub(start), gotPoll.Sub(gotPre))
	}
	for _, want := range []string{"the pod's own preStop sleep first: 400ms", "the pod's own preStop httpGet answered 200 OK", "drained: 0 sessions left"} {
		if !strings.Contains(r.log, want) {
			t.Errorf("log lacks %q:\n%s", want, r.log)
		}
	}
	r = drainctl(t, "wait", "--url="+srv.URL+"/count", "--interval=50ms", "--min-wait=0s", "--max-wait=30s", "--pre-http-get="+srv.URL+"/broken")
	if r.code != api.ExitDrained || !strings.Contains(r.log, "answered 500 Internal Server Error; draining anyway") {
		t.Errorf("a failing httpGet hook: exit %d\n%s", r.code, r.log)
	}
}

func TestWaitRunsTheOriginalHookFirst(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	r := drainctl(t, "wait", "--min-wait", "0s", "--max-wait", "100ms", "--", "/bin/sh", "-c", "echo original > "+marker)
	if r.code != api.ExitMaxWait {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.log, r.stderr)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "original\n" {
		t.Fatalf("the original command did not run: %q, %v", b, err)
	}
}

func TestWaitJSONLog(t *testing.T) {
	srv := countServer(t, 1, 0)
	r := drainctl(t, "wait", "--url", srv.URL, "--interval", "50ms", "--min-wait", "0s", "--log-format", "json")
	if r.code != api.ExitDrained {
		t.Fatalf("exit %d\n%s", r.code, r.log)
	}
	var events []string
	for _, line := range strings.Split(strings.TrimSpace(r.log), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		if e, ok := rec["event"].(string); ok {
			events = append(events, e)
		}
	}
	want := "start detected progress drained summary"
	if got := strings.Join(events, " "); got != want {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"wait", "--max-wait", "forever"}, `invalid argument "forever" for "--max-wait" flag: "forever" is not a duration; want a number with a unit`},
		{[]string{"wait", "--max-wait=forever"}, `invalid argument "forever" for "--max-wait" flag`},
		{[]string{"wait", "--maxwait", "1h"}, "unknown flag: --maxwait"},
		{[]string{"wait", "--interval"}, "flag needs an argument: --interval"},
		{[]string{"count", "--url", "http://localhost:1/", "--format", "xml"}, `invalid argument "xml" for "--format" flag: "xml" is not one of auto|number`},
		{[]string{"wait", "--format", "json", "--url", "http://localhost:1/"}, "--format json needs --json-path"},
		{[]string{"wait", "--url", "localhost:8080"}, "want an http:// or https:// URL"},
		{[]string{"wait", "stray"}, `unexpected argument "stray"`},
		{[]string{"wait", "--bearer-token-file", "/nonexistent", "--url", "http://localhost:1/"}, "--bearer-token-file"},
		{[]string{"count"}, "--url is required"},
		{[]string{"install"}, "want exactly one argument"},
		{[]string{"probe", "--url", "http://localhost:1/"}, `--get "": want the probe's http:// or https:// URL`},
		{[]string{"probe", "--get", "localhost:8080/healthz", "--url", "http://localhost:1/"}, "want the probe's http:// or https:// URL"},
		{[]string{"probe", "--get", "http://localhost:1/", "--url", "http://localhost:1/", "--requests", "0"}, "--requests 0: want 1 to 100"},
		{[]string{"probe", "--get", "http://localhost:1/"}, "--url is required"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{nil, "Usage:"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := drainctl(t, tt.args...)
			if r.code != api.ExitUsage {
				t.Errorf("exit %d, want %d (usage)", r.code, api.ExitUsage)
			}
			if !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q lacks %q", r.stderr, tt.want)
			}
		})
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"wait", "--help"}, {"help", "count"}, {"install", "--help"}} {
		r := drainctl(t, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Example") {
			t.Errorf("%v: exit %d, stdout %q", args, r.code, r.stdout)
		}
	}
	if r := drainctl(t, "version"); r.code != 0 || !strings.HasPrefix(r.stdout, "drainctl ") {
		t.Errorf("version: exit %d, %q", r.code, r.stdout)
	}
}

func TestCount(t *testing.T) {
	srv := countServer(t, 17)
	r := drainctl(t, "count", "--url", srv.URL)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "17" || !strings.Contains(r.stderr, "format: number") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	defer down.Close()
	if r := drainctl(t, "count", "--url", down.URL); r.code != api.ExitUnreachable {
		t.Errorf("count against a 404: exit %d, want %d", r.code, api.ExitUnreachable)
	}
}

// sessionServer is an app whose landing page makes a session for each
// cookie-less request, whose /healthz makes none, and whose /sessions
// counts them.
func sessionServer(t *testing.T) *httptest.Server {
	t.Helper()
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/sessions", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, n.Load()) })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("User-Agent") != "kube-probe/drainctl" {
			t.Errorf("probe's User-Agent %q", r.Header.Get("User-Agent"))
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/landing", func(w http.ResponseWriter, r *http.Request) {
		if _, err := r.Cookie("JSESSIONID"); err != nil {
			n.Add(1)
			http.SetCookie(w, &http.Cookie{Name: "JSESSIONID", Value: "x"})
		}
		fmt.Fprintln(w, "welcome")
	})
	// A redirect to the landing page, as Tomcat sends /shop to /shop/.
	mux.Handle("/shop", http.RedirectHandler("/landing", http.StatusFound))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestProbeTellsWhetherAProbeCreatesSessions(t *testing.T) {
	srv := sessionServer(t)
	for _, tt := range []struct {
		path, gain, says string
	}{
		{"/healthz", "0", "added 0 sessions (0 → 0)"},
		{"/landing", "3", "each one made a session"},
		{"/shop", "3", "each one made a session"}, // after the redirect
	} {
		r := drainctl(t, "probe", "--get", srv.URL+tt.path, "--url", srv.URL+"/sessions")
		if r.code != 0 || strings.TrimSpace(r.stdout) != tt.gain || !strings.Contains(r.stderr, tt.says) {
			t.Errorf("probe %s: exit %d, stdout %q, stderr %q; want %s and %q", tt.path, r.code, r.stdout, r.stderr, tt.gain, tt.says)
		}
	}
	if r := drainctl(t, "probe", "--get", srv.URL+"/landing", "--requests", "5", "--url", srv.URL+"/sessions"); strings.TrimSpace(r.stdout) != "5" {
		t.Errorf("--requests 5: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	if r := drainctl(t, "probe", "--get", "http://127.0.0.1:1/healthz", "--url", srv.URL+"/sessions"); r.code != api.ExitUnreachable || !strings.Contains(r.stderr, "the probe's GET") {
		t.Errorf("a probe URL that refuses: exit %d, stderr %q; want %d", r.code, r.stderr, api.ExitUnreachable)
	}
}

func TestInstall(t *testing.T) {
	dir := t.TempDir()
	r := drainctl(t, "install", dir)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	dst := filepath.Join(dir, "drainctl")
	fi, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode().Perm())
	}
	want, _ := os.ReadFile(binary)
	got, _ := os.ReadFile(dst)
	if !bytes.Equal(want, got) {
		t.Error("installed file differs from the binary")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("install left %d entries in the directory, want only drainctl", len(entries))
	}
	// Installing again over a running copy works (rename, not overwrite).
	out, err := exec.Command(dst, "install", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("the installed copy cannot reinstall itself: %v: %s", err, out)
	}
	if r := drainctl(t, "install", filepath.Join(dir, "missing")); r.code != api.ExitError {
		t.Errorf("install into a missing directory: exit %d, want %d", r.code, api.ExitError)
	}
}

// BenchmarkPollFootprint runs the real, stripped binary (built as `make
// build` does) polling a local server every 20ms and reports its peak RSS
// and the CPU time it spends per poll.
func BenchmarkPollFootprint(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "drainctl")
	build := exec.Command("go", "build", "-tags", "nethttpomithttp2", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		b.Fatal(err)
	}
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		polls.Add(1)
		fmt.Fprint(w, "# TYPE tomcat_sessions_active_current_sessions gauge\ntomcat_sessions_active_current_sessions{name=\"app\"} 3\n")
	}))
	defer srv.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		polls.Store(0)
		cmd := exec.Command(bin, "wait", "--url", srv.URL, "--format", "prometheus",
			"--metric", `tomcat_sessions_active_current_sessions{name="app"}`,
			"--interval", "20ms", "--min-wait", "0s", "--max-wait", "3s", "--log-file", filepath.Join(dir, "log"))
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		var hwm int64
		deadline := time.Now().Add(2500 * time.Millisecond)
		for time.Now().Before(deadline) {
			status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
			for _, line := range strings.Split(string(status), "\n") {
				var kb int64
				if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &kb); err == nil && kb > hwm {
					hwm = kb
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = cmd.Wait()
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		b.ReportMetric(float64(hwm)/1024, "peak-RSS-MiB")
		b.ReportMetric(float64(cpu.Microseconds())/float64(polls.Load()), "cpu-µs/poll")
		b.ReportMetric(float64(polls.Load()), "polls")
	}
	b.ReportMetric(float64(fi.Size())/(1<<20), "binary-MiB")
}

// TestHelpIsGolden: each command's --help, as the binary prints it (GNU
// style, sorted, with types and defaults), is the committed golden file.
func TestHelpIsGolden(t *testing.T) {
	for _, cmd := range []string{"wait", "count", "probe", "install"} {
		r := drainctl(t, cmd, "--help")
		if r.code != 0 {
			t.Fatalf("%s --help: exit %d, stderr %q", cmd, r.code, r.stderr)
		}
		cmdlinetest.GoldenText(t, r.stdout, filepath.Join("testdata", "help-"+cmd+".golden"))
	}
}

// TestTheDocsExamplesParse: every `drainctl wait` and `drainctl count`
// command line the docs and drainctl's own help show is accepted by
// drainctl's flag parser and validation, so that a doc cannot show a flag
// or a combination drainctl refuses.
func TestTheDocsExamplesParse(t *testing.T) {
	pages, _ := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	pages = append(pages, filepath.Join("..", "README.md"))
	var text strings.Builder
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		text.Write(b)
		text.WriteString("\n")
	}
	for _, cmd := range []string{"wait", "count"} {
		r := drainctl(t, cmd, "--help")
		text.WriteString(r.stdout)
	}
	// Join continued lines, drop comments and the synopsis' placeholders.
	joined := regexp.MustCompile(`\s*\\\n\s*`).ReplaceAllString(text.String(), " ")
	checked := 0
	for _, line := range strings.Split(joined, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "drainctl wait ") && !strings.HasPrefix(line, "drainctl count ") {
			continue
		}
		if i := strings.Index(line, "  "); i > 0 {
			line = line[:i] // a trailing comment: "  # …" or "  (…)"
		}
		if strings.Contains(line, "[flags]") {
			continue
		}
		args := shellWords(t, line)[1:]
		fs := pflag.NewFlagSet(args[0], pflag.ContinueOnError)
		w := params.NewWait()
		if args[0] == "wait" {
			w.Bind(fs)
		} else {
			w.BindSource(fs)
		}
		if err := fs.Parse(args[1:]); err != nil {
			t.Errorf("%s: %v", line, err)
			continue
		}
		var err error
		if args[0] == "wait" {
			err = w.Validate()
		} else {
			err = w.Source.Validate()
		}
		if err != nil {
			t.Errorf("%s: %v", line, err)
		}
		checked++
	}
	if checked < 8 {
		t.Errorf("checked %d examples; want every one the docs show (8 or more)", checked)
	}
}

// shellWords splits a command line as a shell would, for the quoting the
// docs use ('…' and "…").
func shellWords(t *testing.T, line string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("unbalanced quote in %q", line)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// inPodNetns runs a drainctl wait in a network namespace of its own, as
// a pod's, and calls during with a function that runs drainctl with args
// in that namespace (kubectl exec into the pod).
func inPodNetns(t *testing.T, during func(exec func(args ...string) run), args ...string) run {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	return drainctlWithAttr(t, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}, func(p *os.Process) {
		during(func(args ...string) run { return nsenter(t, p.Pid, []string{"--net"}, args...) })
	}, args...)
}

// nsenter runs drainctl with args in the namespaces of process pid that
// flags name (nsenter's --net, --mount), as kubectl exec into its
// container does.
func nsenter(t *testing.T, pid int, flags []string, args ...string) run {
	t.Helper()
	flags = append([]string{"--target", strconv.Itoa(pid)}, flags...)
	cmd := exec.Command("nsenter", append(append(flags, binary), args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := run{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReleaseAndShortenReachADrainUnderWay(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	// No drain runs in a pod of its own: said, exit 1.
	out, err := exec.Command("unshare", "--net", binary, "release").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != api.ExitError || !strings.Contains(string(out), "no drain runs in this pod") {
		t.Errorf("release with no drain: %v, %q", err, out)
	}
	// A timed drain (the pod's own loopback holds no app here).

	r := inPodNetns(t, func(exec func(...string) run) {
		// The socket listens from the start; retry until it does.
		var got run
		for i := 0; i < 50; i++ {
			if got = exec("shorten", "--max-wait", "2h"); !strings.Contains(got.stderr, "no drain runs") {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if got.code != api.ExitError || !strings.Contains(got.stderr, "max-wait 2h0m0s is not shorter than the drain's 1h0m0s") {
			t.Errorf("shorten to a longer max-wait: exit %d, %q", got.code, got.stderr)
		}
		if got = exec("shorten", "--max-wait", "30m"); got.code != 0 || strings.TrimSpace(got.stdout) != "ok: max-wait 30m0s" {
			t.Errorf("shorten: exit %d, %q %q", got.code, got.stdout, got.stderr)
		}
		if got = exec("release"); got.code != 0 || strings.TrimSpace(got.stdout) != "ok: released" {
			t.Errorf("release: exit %d, %q %q", got.code, got.stdout, got.stderr)
		}
	}, "wait", "--max-wait", "1h")
	if r.code != api.ExitReleased {
		t.Fatalf("exit %d, want %d (released)\n%s", r.code, api.ExitReleased, r.log)
	}
	for _, want := range []string{"max-wait shortened from 1h0m0s to 30m0s by the operator (drainctl shorten)", "released by the operator (drainctl release)"} {
		if !strings.Contains(r.log, want) {
			t.Errorf("log lacks %q:\n%s", want, r.log)
		}
	}
	if r.duration > 10*time.Second {
		t.Errorf("released after %v; want within a few seconds", r.duration)
	}
}

// TestReleaseReachesOnlyItsOwnContainersDrain: two pods with hostNetwork
// and hostPID on one node (one network namespace, one PID namespace; each
// container its own mount namespace, as every runtime gives it): a release
// run in the second container (kubectl exec) ends the second drain, not
// the first.
func TestReleaseReachesOnlyItsOwnContainersDrain(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network and mount namespaces")
	}
	release := func(pid int) run {
		var got run
		for i := 0; i < 50; i++ { // the socket listens from the start; retry until it does
			if got = nsenter(t, pid, []string{"--net", "--mount"}, "release"); !strings.Contains(got.stderr, "no drain runs") {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		return got
	}
	first := drainctlWithAttr(t, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}, func(p *os.Process) {
		// The second pod's container: the first's network, the node's
		// PID namespace, a mount namespace of its own.
		secondLog := filepath.Join(t.TempDir(), "second.log")
		second := exec.Command("nsenter", "--net=/proc/"+strconv.Itoa(p.Pid)+"/ns/net", "unshare", "--mount", binary, "wait", "--log-file", secondLog, "--max-wait", "1h")
		if err := second.Start(); err != nil {
			t.Fatal(err)
		}
		defer second.Process.Kill()
		// nsenter and unshare exec: the process is drainctl's, once it runs.
		var pid int
		for i := 0; i < 100 && pid == 0; i++ {
			if exe, _ := os.Readlink("/proc/" + strconv.Itoa(second.Process.Pid) + "/exe"); exe == binary {
				pid = second.Process.Pid
			}
			time.Sleep(20 * time.Millisecond)
		}
		if pid == 0 {
			t.Fatal("the second drain never started")
		}
		if got := release(pid); got.code != 0 || strings.TrimSpace(got.stdout) != "ok: released" {
			t.Errorf("release in the second container: exit %d, %q %q", got.code, got.stdout, got.stderr)
		}
		done := make(chan error, 1)
		go func() { done <- second.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != api.ExitReleased {
				b, _ := os.ReadFile(secondLog)
				t.Errorf("the second drain: %v, want exit %d (released)\n%s", err, api.ExitReleased, b)
			}
		case <-time.After(10 * time.Second):
			b, _ := os.ReadFile(secondLog)
			t.Errorf("the second drain still runs 10s after its release\n%s", b)
		}
		// The first still drains: released only now, in its own container.
		if err := p.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("the first drain ended with the second's release: %v", err)
		}
		if got := release(p.Pid); got.code != 0 || strings.TrimSpace(got.stdout) != "ok: released" {
			t.Errorf("release in the first container: exit %d, %q %q", got.code, got.stdout, got.stderr)
		}
	}, "wait", "--max-wait", "1h")
	if first.code != api.ExitReleased {
		t.Fatalf("the first drain: exit %d, want %d (released)\n%s", first.code, api.ExitReleased, first.log)
	}
}
