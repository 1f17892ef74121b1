// Package haproxytest runs real HAProxy processes (Debian's haproxy, which
// test/deps.sh installs) for tests, configured as the sample
// configuration (manifests/samples/haproxy/haproxy.cfg) is: master-worker
// with a master CLI, a server-state-file loaded on reload, slots that
// take their address back from it, and a readiness frontend that answers
// 200 only while the controller's marker is set and was confirmed in the
// last 2 seconds.
package haproxytest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/test/proc"
)

// HAProxy is one running process.
type HAProxy struct {
	bin    string
	dir    string
	cfg    string
	Socket string // the Runtime API's unix socket
	// RuntimeTCP is the Runtime API's TCP address (host:port), when
	// Options.RuntimeTCP asked for one.
	RuntimeTCP string
	Master     string // the master CLI's unix socket
	Port       int    // the frontend port on 127.0.0.1
	// ReadyPort serves GET / with 200 once the controller has marked the
	// process filled (ReadyMap), 503 before.
	ReadyPort int
	ReadyMap  string // the marker's map file, as the configuration names it
	StateFile string // the server-state-file
	cmd       *exec.Cmd
	log       syncBuffer
}

// syncBuffer is a bytes.Buffer the process writes while tests read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// Backend is a backend of server-template slots, as in the example
// config, or, with Dynamic, one with no servers for the controller's
// dynamic mode (HAProxy 3.0 and later).
type Backend struct {
	Name    string
	Slots   int
	Dynamic bool
}

// Version is one HAProxy build the tests run against.
type Version struct {
	Series string // "2.6", "3.0", "3.2"
	Bin    string // the executable
}

// Name is "haproxy-<series>", a subtest name.
func (v Version) Name() string { return "haproxy-" + v.Series }

// AtLeast reports whether the series is major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(v.Series, "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// VersionsEnv names the HAProxy builds to test against, one "<series>
// <path>" per line (or separated by ';'), as test/tools/haproxy.sh prints
// them; `make test` sets it to 2.6, 3.0 and 3.2.
const VersionsEnv = "STICKYDRAIN_HAPROXY"

// Versions are the builds VersionsEnv names, or else the haproxy on
// PATH alone, with its series read from `haproxy -v`.
func Versions(t testing.TB) []Version {
	t.Helper()
	vs, err := versions(os.Getenv(VersionsEnv))
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func versions(env string) ([]Version, error) {
	var vs []Version
	for _, line := range strings.FieldsFunc(env, func(r rune) bool { return r == '\n' || r == ';' }) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("%s: %q is not \"<series> <path>\"", VersionsEnv, line)
		}
		vs = append(vs, Version{Series: f[0], Bin: f[1]})
	}
	if len(vs) > 0 {
		return vs, nil
	}
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return nil, fmt.Errorf("haproxy is not installed (test/deps.sh installs Debian's): %w", err)
	}
	out, err := exec.Command(bin, "-v").Output()
	if err != nil {
		return nil, fmt.Errorf("%s -v: %w", bin, err)
	}
	var ma, mi int
	if _, err := fmt.Sscanf(string(out), "HAProxy version %d.%d", &ma, &mi); err != nil {
		return nil, fmt.Errorf("%s -v: no version in %q", bin, firstLine(string(out)))
	}
	return []Version{{Series: fmt.Sprintf("%d.%d", ma, mi), Bin: bin}}, nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// ForEachVersion runs f as one subtest per version (Versions).
func ForEachVersion(t *testing.T, f func(t *testing.T, v Version)) {
	for _, v := range Versions(t) {
		t.Run(v.Name(), func(t *testing.T) { f(t, v) })
	}
}

// Flavour is one version in one of the controller's modes: server-template
// slots on every version, dynamic servers too on 3.0 and later.
type Flavour struct {
	Version
	Dynamic bool
}

// Name is "haproxy-<series>-slots" or "haproxy-<series>-dynamic".
func (f Flavour) Name() string {
	if f.Dynamic {
		return f.Version.Name() + "-dynamic"
	}
	return f.Version.Name() + "-slots"
}

// Backend is a backend of the flavour's kind: slots, or none for
// dynamic servers.
func (f Flavour) Backend(name string, slots int) Backend {
	return Backend{Name: name, Slots: slots, Dynamic: f.Dynamic}
}

// ForEachFlavour runs f as one subtest per version and mode.
func ForEachFlavour(t *testing.T, f func(t *testing.T, fl Flavour)) {
	for _, v := range Versions(t) {
		fls := []Flavour{{v, false}}
		if v.AtLeast(3, 0) {
			fls = append(fls, Flavour{v, true})
		}
		for _, fl := range fls {
			t.Run(fl.Name(), func(t *testing.T) { f(t, fl) })
		}
	}
}

// Start runs this version as the package's Start does.
func (v Version) Start(t testing.TB, key string, backends ...Backend) *HAProxy {
	t.Helper()
	return v.StartWith(t, Options{Key: key}, backends...)
}

// StartWith runs this version with o (Dir, Bin and Key are filled in when
// empty) as the package's Start does.
func (v Version) StartWith(t testing.TB, o Options, backends ...Backend) *HAProxy {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.Bin == "" {
		o.Bin = v.Bin
	}
	h, err := RunWith(o, backends...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}

// Start runs HAProxy with one frontend on a free port and the backends
// (the first is the frontend's default), each with dynamic cookies keyed
// by key. It stops when the test ends.
func Start(t testing.TB, key string, backends ...Backend) *HAProxy {
	t.Helper()
	h, err := Run(t.TempDir(), 0, key, backends...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}

// Run is Start outside tests: the configuration, socket and log live in
// dir; port 0 picks a free frontend port. Stop ends it.
func Run(dir string, port int, key string, backends ...Backend) (*HAProxy, error) {
	return RunWith(Options{Dir: dir, Port: port, Key: key}, backends...)
}

// Options configure RunWith.
type Options struct {
	Dir  string // configuration, sockets, state file and log
	Port int    // the frontend port; 0 picks a free one
	Key  string // the dynamic-cookie key
	// ReadyMap is the readiness marker's map file; several instances may
	// share one (the controller's configuration names one path per load
	// balancer). Default: ready.map in Dir.
	ReadyMap string
	// Bin is the haproxy executable; default: haproxy on PATH.
	Bin string
	// Gate holds a new process' requests until it has its servers, as
	// docs/haproxy.md configures it (GateFor). Without a controller
	// marking the process (or the reload helper), every request waits
	// GateLimit.
	Gate bool
	// GateLimit, when set, is the gate's limit in milliseconds instead
	// of GateLimit (a test of the limit itself need not wait 5 s).
	GateLimit int
	// Readiness is what the readiness frontend asks of the marker:
	// ReadyConfirmed (the default here) or ReadyFilled (the sample's).
	Readiness Readiness
	// RuntimeTCP, when set (host:port), adds a Runtime API socket on TCP
	// there, for a controller that cannot reach the unix socket (one in a
	// pod of the real node).
	RuntimeTCP string
	// RuntimeTLS, with RuntimeTCP, serves the Runtime API there over TLS
	// with client certificates instead, as docs/security.md configures it:
	// a TCP listener (`ssl crt CertKey ca-file CA verify required`)
	// relaying to the admin socket (a stats socket takes no ssl).
	RuntimeTLS *RuntimeTLS
}

// RuntimeTLS are the files of a mutually authenticated Runtime API socket.
type RuntimeTLS struct {
	CertKey string // HAProxy's certificate and key, one PEM file
	CA      string // the CA client certificates must chain to
}

// Readiness is what a process's readiness frontend asks of the
// controller's marker (docs/load-balancer-lifecycle.md, "Readiness").
type Readiness int

const (
	// ReadyConfirmed: filled, and confirmed by a controller within the
	// last 2 s. A partitioned instance leaves rotation; so does every
	// instance when every controller is down for 2 s.
	ReadyConfirmed Readiness = iota
	// ReadyFilled: filled by the controller (or replayed by the reload
	// helper) once, whatever happened since. A controller outage leaves
	// every instance in rotation, routing with what it has; so does a
	// partition.
	ReadyFilled
)

// ReadinessRules are the readiness frontend's rules for r on readyMap,
// indented as in a frontend section.
func ReadinessRules(r Readiness, readyMap string) string {
	if r == ReadyFilled {
		return fmt.Sprintf(`    http-request return status 200 content-type text/plain string ready if { str(filled),map(%[1]s) -m found } || { str(replayed),map(%[1]s) -m found }
    http-request return status 503 content-type text/plain string "not filled by stickydrain yet"
`, readyMap)
	}
	return fmt.Sprintf(`    http-request set-var(txn.filled) str(filled),map(%s,0)
    http-request set-var(txn.age) date(0,ms),sub(txn.filled)
    http-request return status 200 content-type text/plain string ready if { var(txn.filled) -m int gt 0 } { var(txn.age) -m int le 2000 }
    http-request return status 503 content-type text/plain string "not filled by stickydrain yet, or no controller for 2 s"
`, readyMap)
}

// GateLimit is how long the gate holds a request, in milliseconds, before
// it lets it through unfilled (the number the sample passes the action).
const GateLimit = 5000

// Gate is the gate of docs/haproxy.md on readyMap: a new process — a
// restart, a crash, a reload's new worker — holds each request until the
// ready map has "filled" (the controller) or "replayed" (the reload
// helper), looking every 10 ms, up to GateLimit. Global goes in the global
// section, Frontend in each user frontend, indented as there; both name
// the script at script (the sample's stickydrain-gate.lua, GateScript).
type Gate struct{ Global, Frontend string }

// GateFor is the gate's lines for readyMap and the script at script.
func GateFor(readyMap, script string) Gate { return gateFor(readyMap, script, GateLimit) }

func gateFor(readyMap, script string, limit int) Gate {
	return Gate{
		Global: fmt.Sprintf(`    setenv STICKYDRAIN_READY_MAP %s
    lua-load %s
`, readyMap, script),
		Frontend: fmt.Sprintf(`    http-request lua.stickydrain_gate %[2]d if !{ str(filled),map(%[1]s) -m found } !{ str(replayed),map(%[1]s) -m found }
`, readyMap, limit),
	}
}

// GateScript is the gate's Lua script in this checkout
// (manifests/samples/haproxy/stickydrain-gate.lua).
func GateScript() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "manifests", "samples", "haproxy", "stickydrain-gate.lua")
}

// RunWith is Run with every option.
func RunWith(o Options, backends ...Backend) (*HAProxy, error) {
	dir, port, key := o.Dir, o.Port, o.Key
	bin := o.Bin
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("haproxy"); err != nil {
			return nil, fmt.Errorf("haproxy is not installed (test/deps.sh installs Debian's): %w", err)
		}
	}
	var err error
	if port == 0 {
		if port, err = proc.FreePort(); err != nil {
			return nil, err
		}
	}
	readyPort, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	h := &HAProxy{bin: bin, dir: dir, Socket: filepath.Join(dir, "admin.sock"), Master: filepath.Join(dir, "master.sock"), Port: port,
		ReadyPort: readyPort, ReadyMap: o.ReadyMap, StateFile: filepath.Join(dir, "server-state")}
	if h.ReadyMap == "" {
		h.ReadyMap = filepath.Join(dir, "ready.map")
	}
	if _, err := os.Stat(h.ReadyMap); os.IsNotExist(err) {
		if err := os.WriteFile(h.ReadyMap, nil, 0o644); err != nil {
			return nil, err
		}
	}
	h.RuntimeTCP = o.RuntimeTCP
	tcpSocket := ""
	if o.RuntimeTCP != "" {
		tcpSocket = fmt.Sprintf("    stats socket ipv4@%s level admin\n", o.RuntimeTCP)
		if o.RuntimeTLS != nil {
			tcpSocket = "" // the listen section below, in front of the unix socket
		}
	}
	var gate Gate
	if o.Gate {
		gate = gateFor(h.ReadyMap, GateScript(), cmp.Or(o.GateLimit, GateLimit))
	}
	var b strings.Builder
	// Warnings (the gate's, a proxy's) go to the log the test reads.
	fmt.Fprintf(&b, `global
    log stderr format raw local0 warning
    stats socket %s level admin
%s%s`, h.Socket, tcpSocket, gate.Global)
	fmt.Fprintf(&b, `    stats timeout 30s
    server-state-file %s
defaults
    mode http
    option redispatch
    retries 2
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    load-server-state-from-file global
frontend www
    bind 127.0.0.1:%d
%s    default_backend %s
frontend ready
    bind 127.0.0.1:%d
%s`, h.StateFile, h.Port, gate.Frontend, backends[0].Name, h.ReadyPort, ReadinessRules(o.Readiness, h.ReadyMap))
	for _, be := range backends {
		if be.Dynamic {
			// No servers: the controller adds them (`add server … cookie`).
			fmt.Fprintf(&b, `backend %s
    balance roundrobin
    cookie SRV insert indirect nocache
`, be.Name)
			continue
		}
		fmt.Fprintf(&b, `backend %s
    balance roundrobin
    cookie SRV insert indirect nocache dynamic
    dynamic-cookie-key %s
    server-template pod 1-%d unfilled.invalid:1 disabled init-addr last,0.0.0.0
`, be.Name, key, be.Slots)
	}
	if t := o.RuntimeTLS; t != nil && o.RuntimeTCP != "" {
		// HAProxy's stats socket takes no ssl: TLS with client
		// certificates goes in a TCP listener that relays to the admin
		// socket, as docs/security.md configures it.
		fmt.Fprintf(&b, `listen stickydrain-runtime
    mode tcp
    bind ipv4@%s ssl crt %s ca-file %s verify required
    server cli unix@%s
`, o.RuntimeTCP, t.CertKey, t.CA, h.Socket)
	}
	h.cfg = filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(h.cfg, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command(bin, "-c", "-f", h.cfg).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("haproxy config check: %w\n%s", err, out)
	}
	if err := h.start(); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *HAProxy) start() error {
	_ = os.Remove(h.Socket)
	_ = os.Remove(h.Master)
	h.log.Reset()
	// Master-worker, as the official image and systemd unit run it: a
	// reload starts a new worker beside the old one.
	h.cmd = exec.Command(h.bin, "-W", "-db", "-S", h.Master, "-f", h.cfg)
	h.cmd.Stdout, h.cmd.Stderr = &h.log, &h.log
	// Its own process group, so that Stop ends the workers with the master.
	// No Pdeathsig: it fires when the OS thread that started the process
	// exits, which the Go runtime may do at any time, and a master killed so
	// leaves its worker serving with nobody to reload it (seen in tests).
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := h.cmd.Start(); err != nil {
		return fmt.Errorf("starting haproxy: %w", err)
	}
	// Instead of Pdeathsig, a watchdog ends the group if this process dies
	// (a test killed or timed out), and ends itself with the group.
	pg := h.cmd.Process.Pid
	wd := exec.Command("sh", "-c", fmt.Sprintf("while kill -0 %d 2>/dev/null && kill -0 -%d 2>/dev/null; do sleep 1; done; kill -KILL -%d 2>/dev/null", os.Getpid(), pg, pg))
	wd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := wd.Start(); err == nil {
		go func() { _ = wd.Wait() }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Both the worker's Runtime API and the master's CLI accept.
		if c, err := net.Dial("unix", h.Socket); err == nil {
			c.Close()
			if m, err := net.Dial("unix", h.Master); err == nil {
				m.Close()
				return nil
			}
		}
		if time.Now().After(deadline) {
			h.Stop()
			return fmt.Errorf("haproxy did not open its socket:\n%s", h.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart kills the master and its workers (SIGKILL, as a crash or an
// OOM kill would) and starts a new one from the same configuration, with
// no saved state: every runtime change is lost, as in a real restart, and
// the new process is not ready until the controller has filled it.
func (h *HAProxy) Restart() error {
	h.Stop()
	_ = os.Remove(h.StateFile)
	return h.start()
}

// RestartKeepingState is Restart with the server-state-file left where it
// is: a crash restart of a pod whose state directory (an emptyDir)
// outlives the container, so the new process loads the last saved state,
// however old.
func (h *HAProxy) RestartKeepingState() error {
	h.Stop()
	return h.start()
}

// Kill ends the master and its workers with SIGKILL and leaves them down.
func (h *HAProxy) Kill() { h.Stop() }

// Start starts a stopped HAProxy again (a fresh process, no saved state).
func (h *HAProxy) Start() error {
	_ = os.Remove(h.StateFile)
	return h.start()
}

// ReloadWithoutState sends the master SIGUSR2 without saving the server
// state first: what a plain `systemctl reload` or `kill -USR2` does with a
// server-state-file that nobody writes.
func (h *HAProxy) ReloadWithoutState() error {
	if h.cmd == nil || h.cmd.Process == nil {
		return fmt.Errorf("haproxy is not running")
	}
	return h.cmd.Process.Signal(syscall.SIGUSR2)
}

// Stop ends the process and its workers, and returns once every process
// of its group has exited and so closed its sockets (the master is reaped
// here; a worker can die a moment after it, and a connection it held
// fails only then).
func (h *HAProxy) Stop() {
	if h.cmd != nil && h.cmd.Process != nil && h.cmd.ProcessState == nil {
		group := groupMembers(h.cmd.Process.Pid)
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		_ = h.cmd.Wait()
		deadline := time.Now().Add(5 * time.Second)
		for _, pid := range group {
			for running(pid) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// groupMembers are the processes of process group pgid.
func groupMembers(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
			out = append(out, pid)
		}
	}
	return out
}

// running reports whether pid has not exited: it exists and is not a
// zombie (a zombie has closed its files).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state …: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X')
}

// SoftStop asks the master to stop gracefully (SIGUSR1, the official
// image's STOPSIGNAL): the workers stop listening, finish their open
// connections and exit. After within, whatever is left is killed.
func (h *HAProxy) SoftStop(within time.Duration) {
	if h.cmd == nil || h.cmd.Process == nil || h.cmd.ProcessState != nil {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGUSR1)
	done := make(chan struct{})
	go func() { _ = h.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL) // any worker left
}

// Rewrite changes the configuration file as an operator edits
// haproxy.cfg: edit gets the text and returns the new one, which must
// pass `haproxy -c`. The running process is not told: a reload (or a
// restart) reads it.
func (h *HAProxy) Rewrite(edit func(cfg string) (string, error)) error {
	old, err := os.ReadFile(h.cfg)
	if err != nil {
		return err
	}
	cfg, err := edit(string(old))
	if err != nil {
		return err
	}
	tmp := h.cfg + ".new"
	if err := os.WriteFile(tmp, []byte(cfg), 0o644); err != nil {
		return err
	}
	if out, err := exec.Command(h.bin, "-c", "-f", tmp).CombinedOutput(); err != nil {
		return fmt.Errorf("haproxy config check of the rewritten configuration: %w\n%s", err, out)
	}
	return os.Rename(tmp, h.cfg)
}

// Log is what the master and its workers printed.
func (h *HAProxy) Log() string { return h.log.String() }

// ReadyURL is the readiness frontend's URL.
func (h *HAProxy) ReadyURL() string { return fmt.Sprintf("http://127.0.0.1:%d/", h.ReadyPort) }

// MasterAddress is the master CLI's address.
func (h *HAProxy) MasterAddress() string { return "unix://" + h.Master }

// URL is the frontend's base URL.
func (h *HAProxy) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", h.Port) }

// Address is the Runtime API address for the controller's configuration.
func (h *HAProxy) Address() string { return "unix://" + h.Socket }

// Command sends one Runtime API command and fails on any answer but an
// empty one or an address change.
func (h *HAProxy) Command(ctx context.Context, cmd string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", h.Socket)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte(cmd + "\n")); err != nil {
		return err
	}
	out, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if s := strings.TrimSpace(string(out)); s != "" && !strings.Contains(s, "changed") {
		return fmt.Errorf("%s: %s", cmd, s)
	}
	return nil
}
