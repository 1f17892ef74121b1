package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/framework"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/proc"
	"github.com/stickydrain/stickydrain/test/tcpfront"
)

// readyMap is the readiness marker's map file every HAProxy instance
// loads (the controller's configuration names one per load balancer).
func (e *Env) readyMap() string { return filepath.Join(e.Dir, "ready.map") }

// runHAProxy starts one instance of the environment's version and mode
// in dir.
func (e *Env) runHAProxy(dir string) (*haproxytest.HAProxy, error) {
	// Options.Readiness: the stricter rule (confirmed within 2 s) unless
	// a scenario asks for the sample's (filled).
	o := haproxytest.Options{Dir: dir, Key: "e2e-shared-key", ReadyMap: e.readyMap(), Bin: e.flavour.Bin, Gate: true, Readiness: e.readiness}
	if e.installed {
		// The installed controller, in a pod, reaches the host's
		// address, not a unix socket.
		port, err := proc.FreePort()
		if err != nil {
			return nil, err
		}
		o.RuntimeTCP = fmt.Sprintf("%s:%d", cluster.APIServerIP, port)
	}
	return haproxytest.RunWith(o, e.flavour.Backend("shop", 16))
}

// haproxies is a copy of the instances running now, for goroutines other
// than the test's (the observer, the demo's view).
func (e *Env) haproxies() []*haproxytest.HAProxy {
	e.lbMu.Lock()
	defer e.lbMu.Unlock()
	return append([]*haproxytest.HAProxy(nil), e.HAProxy...)
}

func (e *Env) frontTargets() []tcpfront.Target {
	var ts []tcpfront.Target
	for _, h := range e.haproxies() {
		ts = append(ts, tcpfront.Target{Addr: fmt.Sprintf("127.0.0.1:%d", h.Port), Ready: h.ReadyURL()})
	}
	return ts
}

// ReloadHAProxy reloads instance i as an operator would with the shipped
// procedure: `stickydrain-haproxy reload` saves the server state and asks
// the master to reload.
func (e *Env) ReloadHAProxy(ctx context.Context, i int) error {
	h := e.haproxies()[i]
	out, err := exec.CommandContext(ctx, e.built["controller/cmd/stickydrain-haproxy"], "reload",
		"--runtime", h.Address(), "--master", h.MasterAddress(), "--state-file", h.StateFile, "--ready-map", e.readyMap()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("stickydrain-haproxy reload: %w\n%s", err, out)
	}
	return nil
}

// RestartHAProxy kills instance i (SIGKILL to the master and its workers,
// as a crash) and starts it again at once with its state directory as it
// was (the last state the reload helper saved, if it left one), as the
// kubelet restarts a container. The front is told at the kill (the pod
// turns NotReady), or with FrontProbesOnly learns from its checks alone
// and keeps sending the new process users until its next check: those
// must be held by the gate until the controller has filled it, and served.
func (e *Env) RestartHAProxy(i int) error {
	h := e.haproxies()[i]
	done := e.noteKill()
	h.Kill()
	if !e.probesOnly {
		e.Front.MarkDown(fmt.Sprintf("127.0.0.1:%d", h.Port))
	}
	// Requests in flight through the killed process failed with it; a
	// connection sent to it from now on is refused (and tried on the next
	// instance by the front) or reaches the new process, where none may fail.
	done()
	return h.RestartKeepingState()
}

// killWindow is from a kill of a process in the users' path until the
// front stopped sending it connections: a request in flight through it,
// or sent to it before the front knew (as a Service still sends to a
// crashed pod until its endpoint turns not ready), fails with the crash.
type killWindow struct{ from, to time.Time }

// noteKill records that a process in the users' path is being killed
// now; the returned func closes the window once the front knows.
func (e *Env) noteKill() (done func()) {
	e.faultsMu.Lock()
	e.kills = append(e.kills, killWindow{from: time.Now()})
	n := len(e.kills) - 1
	e.faultsMu.Unlock()
	return func() {
		e.faultsMu.Lock()
		e.kills[n].to = time.Now()
		e.faultsMu.Unlock()
	}
}

// killedDuring reports whether a kill window overlaps from..to.
func (e *Env) killedDuring(from, to time.Time) bool {
	e.faultsMu.Lock()
	defer e.faultsMu.Unlock()
	for _, k := range e.kills {
		end := k.to
		if end.IsZero() {
			end = time.Now()
		}
		if !k.from.After(to) && !end.Before(from) {
			return true
		}
	}
	return false
}

// InstanceReady reports whether HAProxy instance i's readiness check
// passes now (it holds the controller's marker).
func (e *Env) InstanceReady(i int) bool {
	return e.Front.Healthy()[fmt.Sprintf("127.0.0.1:%d", e.haproxies()[i].Port)]
}

// filled reports whether HAProxy instance i holds a server for every pod
// that instance ref holds.
func (e *Env) filled(ctx context.Context, i, ref int) bool {
	for _, p := range e.Pods(ctx) {
		if len(p.LB) > max(i, ref) && p.LB[ref] != "-" && p.LB[i] == "-" {
			return false
		}
	}
	return true
}

// AddHAProxy starts one more HAProxy instance (a scale-up), adds it to
// the controller's configuration and to the front, where it takes traffic
// once its readiness check passes: once the controller has filled it.
func (e *Env) AddHAProxy() (int, error) {
	i := len(e.HAProxy)
	d := filepath.Join(e.Dir, fmt.Sprintf("haproxy-%d", i+1))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return 0, err
	}
	h, err := e.runHAProxy(d)
	if err != nil {
		return 0, err
	}
	e.lbMu.Lock()
	e.HAProxy = append(e.HAProxy, h)
	e.lbMu.Unlock()
	if err := linkControllerSocket(h); err != nil {
		return 0, err
	}
	if err := e.writeControllerConfig(); err != nil {
		return 0, err
	}
	e.Front.SetTargets(e.frontTargets())
	return i, nil
}

// RemoveHAProxy scales instance i away as a Service would: out of the
// front first (its endpoint goes), then stopped gracefully (SIGUSR1, the
// official image's STOPSIGNAL: open connections finish), then out of the
// controller's configuration.
func (e *Env) RemoveHAProxy(i int) error {
	e.lbMu.Lock()
	h := e.HAProxy[i]
	e.HAProxy = append(e.HAProxy[:i:i], e.HAProxy[i+1:]...)
	e.lbMu.Unlock()
	e.Front.SetTargets(e.frontTargets())
	h.SoftStop(10 * time.Second) // as its pod stops: open requests finish
	return e.writeControllerConfig()
}

// controllerSocket is the path the controller reaches instance h's
// Runtime API by: a symbolic link to its socket, which PartitionHAProxy
// takes away. Everything else (users, the observer, reloads) uses the
// socket itself.
func controllerSocket(h *haproxytest.HAProxy) string {
	return filepath.Join(filepath.Dir(h.Socket), "controller-path.sock")
}

func linkControllerSocket(h *haproxytest.HAProxy) error {
	_ = os.Remove(controllerSocket(h))
	return os.Symlink(h.Socket, controllerSocket(h))
}

// PartitionHAProxy cuts the controller off instance i's Runtime API for d
// (connections fail, as through a partition) while the instance keeps
// serving users, then joins them again.
func (e *Env) PartitionHAProxy(i int, d time.Duration) error {
	h := e.haproxies()[i]
	if err := os.Remove(controllerSocket(h)); err != nil {
		return err
	}
	time.Sleep(d)
	return linkControllerSocket(h)
}

// Leader is the index in Controllers of the replica holding the Lease,
// from their logs; -1 when none has it.
func (e *Env) Leader() int {
	for i, c := range e.controllers() {
		if c.Exited() {
			continue
		}
		b, err := os.ReadFile(c.Log)
		if err == nil && strings.Contains(strings.ToLower(string(b)), "successfully acquired lease") {
			return i
		}
	}
	return -1
}

// LeaderProc is the controller process holding the Lease, nil when none
// does. A replica killed and started again by the supervisor is a new
// process in the same place: compare processes, not places.
func (e *Env) LeaderProc() *framework.Controller {
	i := e.Leader()
	if i < 0 {
		return nil
	}
	return e.controllers()[i]
}

// KillLeader kills the controller replica holding the Lease with SIGKILL;
// the supervisor starts a new replica in its place, as the kubelet
// restarts the container, which joins as a standby.
func (e *Env) KillLeader(ctx context.Context) error {
	i := e.Leader()
	if i < 0 {
		return fmt.Errorf("no controller leads")
	}
	e.faultsMu.Lock()
	e.leaderless = append(e.leaderless, killWindow{from: time.Now()})
	n := len(e.leaderless) - 1
	e.faultsMu.Unlock()
	e.controllers()[i].Kill()
	go func() {
		for ctx.Err() == nil && e.Leader() < 0 {
			time.Sleep(100 * time.Millisecond)
		}
		e.faultsMu.Lock()
		e.leaderless[n].to = time.Now()
		e.faultsMu.Unlock()
	}()
	return nil
}

// leaderTakeover is how long a replica that has just acquired the Lease
// takes to drain what changed meanwhile: its caches sync, then one
// reconcile per Service.
const leaderTakeover = 3 * time.Second

// leaderlessThroughout reports whether no controller replica led (or the
// one that had just taken over was still catching up) from from to to:
// nothing could drain a pod whose whole terminating life fell in it.
func (e *Env) leaderlessThroughout(from, to time.Time) bool {
	e.faultsMu.Lock()
	defer e.faultsMu.Unlock()
	for _, w := range e.leaderless {
		end := w.to
		if end.IsZero() {
			end = time.Now()
		}
		if !from.Before(w.from) && !to.After(end.Add(leaderTakeover)) {
			return true
		}
	}
	return false
}

func (e *Env) controllers() []*framework.Controller {
	e.ctlMu.Lock()
	defer e.ctlMu.Unlock()
	return append([]*framework.Controller(nil), e.Controllers...)
}

// supervise restarts a controller replica that exited — leader election
// lost during an API server outage (controller-runtime then exits, by
// design), or killed — after a second, as the kubelet restarts a
// container of a Deployment's pod; until ctx ends.
func (e *Env) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		e.ctlMu.Lock()
		down := e.controllersDown
		e.ctlMu.Unlock()
		if down {
			continue
		}
		for i, c := range e.controllers() {
			if !c.Exited() {
				continue
			}
			time.Sleep(time.Second)
			if ctx.Err() != nil {
				return
			}
			e.ctlMu.Lock()
			n := len(e.controllerDirs) + 1
			dir := filepath.Join(e.Dir, fmt.Sprintf("controller-r%d", n))
			e.controllerDirs = append(e.controllerDirs, dir)
			e.ctlMu.Unlock()
			if err := os.MkdirAll(dir, 0o755); err != nil {
				continue
			}
			nc, err := e.runController(ctx, dir)
			if err != nil {
				e.log("restarting controller replica %d: %v", i+1, err)
				continue
			}
			e.ctlMu.Lock()
			e.procs = append(e.procs, nc.Proc)
			e.Controllers[i] = nc
			e.ctlMu.Unlock()
			e.log("controller replica %d exited; started again (log %s)", i+1, nc.Log)
		}
	}
}

// StopControllers stops every controller replica (SIGTERM, as deleting
// or upgrading its Deployment does) and keeps them down until
// StartControllers; the span counts as leaderless for the drains.
func (e *Env) StopControllers() {
	e.ctlMu.Lock()
	e.controllersDown = true
	e.ctlMu.Unlock()
	e.faultsMu.Lock()
	e.leaderless = append(e.leaderless, killWindow{from: time.Now()})
	e.faultsMu.Unlock()
	for _, c := range e.controllers() {
		c.Stop()
	}
}

// StartControllers lets the supervisor start every stopped replica again
// and waits until one leads.
func (e *Env) StartControllers(ctx context.Context) error {
	e.ctlMu.Lock()
	e.controllersDown = false
	e.ctlMu.Unlock()
	for e.Leader() < 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no controller leads after the restart: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	e.faultsMu.Lock()
	e.leaderless[len(e.leaderless)-1].to = time.Now()
	e.faultsMu.Unlock()
	return nil
}
