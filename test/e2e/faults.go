package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/stickydrain/stickydrain/test/tcpfront"
)

// readyMap is the readiness marker's map file every HAProxy instance
// loads (the controller's configuration names one per load balancer).
func (e *Env) readyMap() string { return filepath.Join(e.Dir, "ready.map") }

func (e *Env) frontTargets() []tcpfront.Target {
	var ts []tcpfront.Target
	for _, h := range e.HAProxy {
		ts = append(ts, tcpfront.Target{Addr: fmt.Sprintf("127.0.0.1:%d", h.Port), Ready: h.ReadyURL()})
	}
	return ts
}

// ReloadHAProxy reloads instance i as an operator would with the shipped
// procedure: `stickydrain-haproxy reload` saves the server state and asks
// the master to reload.
func (e *Env) ReloadHAProxy(ctx context.Context, i int) error {
	h := e.HAProxy[i]
	out, err := exec.CommandContext(ctx, e.built["controller/cmd/stickydrain-haproxy"], "reload",
		"--runtime", h.Address(), "--master", h.MasterAddress(), "--state-file", h.StateFile).CombinedOutput()
	if err != nil {
		return fmt.Errorf("stickydrain-haproxy reload: %w\n%s", err, out)
	}
	return nil
}

// RestartHAProxy kills instance i (SIGKILL to the master and its workers,
// as a crash) and starts it again with nothing saved, as the kubelet
// restarts a container: the front takes it out of rotation when it dies
// (the pod turns NotReady), and it must take no traffic until the
// controller has filled it.
func (e *Env) RestartHAProxy(i int) error {
	e.noteKill()
	e.HAProxy[i].Kill()
	e.Front.MarkDown(fmt.Sprintf("127.0.0.1:%d", e.HAProxy[i].Port))
	return e.HAProxy[i].Start()
}

// noteKill records that a process in the users' path is being killed
// now: requests in flight through it fail, and are counted apart.
func (e *Env) noteKill() {
	e.faultsMu.Lock()
	e.kills = append(e.kills, time.Now())
	e.faultsMu.Unlock()
}

// killedDuring reports whether a kill happened between from and to.
func (e *Env) killedDuring(from, to time.Time) bool {
	e.faultsMu.Lock()
	defer e.faultsMu.Unlock()
	for _, k := range e.kills {
		if !k.Before(from) && !k.After(to) {
			return true
		}
	}
	return false
}

// InstanceReady reports whether HAProxy instance i's readiness check
// passes now (it holds the controller's marker).
func (e *Env) InstanceReady(i int) bool {
	return e.Front.Healthy()[fmt.Sprintf("127.0.0.1:%d", e.HAProxy[i].Port)]
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
