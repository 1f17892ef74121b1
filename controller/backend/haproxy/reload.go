package haproxy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// SaveState writes what `show servers state` answers — every backend's
// servers with their address, port and admin state (drain, maintenance) —
// to path, as HAProxy's server-state-file wants it. It writes a
// temporary file beside path and renames it, so a reload never reads half
// a file. With
//
//	global
//	    server-state-file /var/lib/haproxy/server-state
//	defaults
//	    load-server-state-from-file global
//	backend shop
//	    server-template pod 1-64 unfilled.invalid:1 disabled init-addr last,0.0.0.0
//
// the next process starts with every slot as the running one had it.
// Each part of the server-template line matters, as tried on 2.6:
// `init-addr last` is what restores the address, and HAProxy applies it
// only to servers configured with a host name (hence unfilled.invalid, never
// resolved: no libc in the list); `0.0.0.0` after it gives a fresh slot an
// address family, without which `set server … addr` is refused; and the
// port must not be 0, or HAProxy reads the restored port as an offset to
// the client's port and the server takes no request.
func (h *Instance) SaveState(ctx context.Context, path string) error {
	_, err := h.saveState(ctx, path)
	return err
}

// saveState is SaveState, returning the state it saved.
func (h *Instance) saveState(ctx context.Context, path string) (string, error) {
	outs, err := h.run(ctx, []string{"show servers state"})
	if err != nil {
		return "", fmt.Errorf("saving server state: %w", err)
	}
	state := strings.TrimSpace(outs[0]) + "\n"
	if !strings.HasPrefix(state, "1\n") {
		return "", fmt.Errorf("saving server state: haproxy %s answered %q, not a version 1 state", h.id, firstLine(state))
	}
	return state, writeAtomically(path, state)
}

// writeAtomically writes a temporary file beside path and renames it.
func writeAtomically(path, state string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("saving server state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(state); err != nil {
		tmp.Close()
		return fmt.Errorf("saving server state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("saving server state: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("saving server state: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("saving server state: %w", err)
	}
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// Reload saves the server state to stateFile (SaveState) and asks the
// master process to reload through its CLI at master (unix:///path or
// tcp://host:port, haproxy -W -S), then waits until a new worker answers
// on the Runtime API. The old worker finishes its open connections; the
// new one starts from the configuration and stateFile, so every slot keeps
// its address and drain; Reload then removes stateFile, which is stale
// from that moment: a process that crashes and starts again later finds
// no old addresses to route by. Dynamic servers (mode dynamic) are not in the
// configuration, so the new worker starts without them: Reload adds back
// every one the old worker had, with its cookie and state, the moment the
// new worker answers (see ReplayDynamic), then sets the key "replayed" in
// the ready map (WithReadyMap) of the new worker: the configuration's
// gate, which holds a new connection's first request while the process
// has neither "replayed" nor "filled", lets requests through from then on
// (docs/haproxy.md). A configuration that does not load leaves the old
// worker running and is reported.
func (h *Instance) Reload(ctx context.Context, master, stateFile string) error {
	before, err := h.Identity(ctx)
	if err != nil {
		return fmt.Errorf("reload: reading the running worker: %w", err)
	}
	state, err := h.saveState(ctx, stateFile)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	m, err := New(master, h.timeout)
	if err != nil {
		return fmt.Errorf("reload: master CLI: %w", err)
	}
	// The master answers a reload by re-executing itself, which closes the
	// connection: no answer is expected. Its CLI refuses connections for a
	// moment after it starts (and while it re-executes): try again then.
	for tries := 0; ; tries++ {
		_, err := m.run(ctx, []string{"reload"})
		if err == nil || strings.Contains(err.Error(), "answers to") {
			break
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || tries == 50 {
			return fmt.Errorf("reload: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*h.timeout)
	defer cancel()
	for {
		after, err := h.Identity(ctx)
		if err == nil && after != before {
			// The new worker has read the file: it is stale from now on,
			// and a process that crashes and starts again must not route
			// by it (the gate holds that one until the controller fills it).
			if err := os.Remove(stateFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("reload: the new worker runs, but the used server-state-file must go (a restart would route by it): %w", err)
			}
			if err := h.ReplayDynamic(ctx, state); err != nil {
				return fmt.Errorf("reload: the new worker runs, but %w", err)
			}
			if err := h.markReplayed(ctx, after); err != nil {
				return fmt.Errorf("reload: the new worker runs with its servers, but %w: %w", ErrNotMarked, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reload: no new worker answered on %s (still %s); check the master's log for a configuration error: %w", h.id, before, ctx.Err())
		// In dynamic mode the new worker lacks its servers until they
		// are replayed (its gate holds requests meanwhile): look often.
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ErrNotMarked is in the error of a reload that is done — the new worker
// runs and holds every server — but whose "replayed" key could not be set
// (a ready map haproxy.cfg does not load, say): the gate then opens only
// when the controller marks the process filled.
var ErrNotMarked = errors.New(`"replayed" not set`)

// replayedKey is the key Reload sets in the ready map of a new worker once
// it holds every server the old one had. Only its presence counts.
const replayedKey = "replayed"

// markReplayed sets replayedKey on the process named id, if a ready map is
// configured. Like MarkFilled it reads the identity on the same
// connection; on another process (a second reload in between) it takes the
// key off again: that process was not replayed.
func (h *Instance) markReplayed(ctx context.Context, id string) error {
	if h.readyMap == "" {
		return nil
	}
	if got, err := h.setOn(ctx, id, replayedKey, "1"); err != nil {
		return fmt.Errorf("setting %q in %s: %w", replayedKey, h.readyMap, err)
	} else if got != id {
		return fmt.Errorf("the process changed (%s, replayed %s) while marking it replayed; taken off again", got, id)
	}
	return nil
}

// ReplayDynamic adds to the running process every dynamic server (one the
// controller added, named sd_…) that state — a `show servers state`
// answer, as SaveState saves it — holds and the process lacks, with its
// address, cookie and state, all in one batch. Servers the process has
// are left as they are. It is what keeps drains through a reload in
// dynamic mode; in slot mode there is nothing to replay.
func (h *Instance) ReplayDynamic(ctx context.Context, state string) error {
	saved := dynamicServers(state)
	if len(saved) == 0 {
		return nil
	}
	outs, err := h.run(ctx, []string{"show servers state"})
	if err != nil {
		return fmt.Errorf("replaying dynamic servers: %w", err)
	}
	have := map[string]bool{}
	for _, s := range dynamicServers(outs[0]) {
		have[s.backend+"/"+s.name] = true
	}
	var steps []step
	for _, s := range saved {
		srv := s.backend + "/" + s.name
		if have[srv] {
			continue
		}
		steps = append(steps,
			step{cmd: fmt.Sprintf("add server %s %s cookie %s", srv, s.addr, dynamicCookie(s.addr)), ok: added},
			step{cmd: fmt.Sprintf("set server %s state %s", srv, stateWord(s.state)), ok: empty})
	}
	if len(steps) == 0 {
		return nil
	}
	cmds := make([]string, len(steps))
	for i, s := range steps {
		cmds[i] = s.cmd
	}
	outs, err = h.run(ctx, cmds)
	if err != nil {
		return fmt.Errorf("replaying dynamic servers: %w", err)
	}
	var errs []error
	for i, s := range steps {
		if out := strings.TrimSpace(outs[i]); !s.ok(out) {
			errs = append(errs, fmt.Errorf("%q: %s", s.cmd, out))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("replaying dynamic servers on haproxy %s: %w", h.id, errors.Join(errs...))
	}
	return nil
}

// dynamicServers are the servers named sd_… that hold an address in a
// `show servers state` answer of every backend.
func dynamicServers(state string) []slot {
	all, _ := parseServersState(state, true)
	var out []slot
	for _, s := range all {
		if !s.free {
			out = append(out, s)
		}
	}
	return out
}
