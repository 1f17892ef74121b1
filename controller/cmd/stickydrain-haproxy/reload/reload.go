// Package reload is the HAProxy reload helper that the stickydrain-haproxy
// command runs beside HAProxy: it saves the server state before HAProxy
// reloads and gives the new worker what the old one had, so that a reload
// keeps every slot's address and drain, and every dynamic server. It is
// not a load-balancer backend: it uses the HAProxy backend's Runtime API
// client (controller/backend/haproxy) as the controller does.
package reload

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

	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
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
func SaveState(ctx context.Context, h *haproxy.Instance, path string) error {
	_, err := saveState(ctx, h, path)
	return err
}

// saveState is SaveState, returning the state it saved.
func saveState(ctx context.Context, h *haproxy.Instance, path string) (string, error) {
	state, err := h.ServersState(ctx)
	if err != nil {
		return "", fmt.Errorf("saving server state: %w", err)
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

// Reload saves the server state of h to stateFile (SaveState) and asks
// the master process to reload through its CLI at master (unix:///path or
// tcp://host:port, haproxy -W -S), then waits until a new worker answers
// on h's Runtime API. The old worker finishes its open connections; the
// new one starts from the configuration and stateFile, so every slot keeps
// its address and drain; Reload then removes stateFile, which is stale
// from that moment: a process that crashes and starts again later finds
// no old addresses to route by. Dynamic servers (mode dynamic) are not in
// the configuration, so the new worker starts without them: Reload adds
// back every one the old worker had, with its cookie and state, the moment
// the new worker answers (haproxy.Instance.ReplayDynamic), then sets
// "replayed" in its ready map (haproxy.Instance.MarkReplayed): the
// configuration's gate, which holds a new connection's first request while
// the process has neither "replayed" nor "filled", lets requests through
// from then on (docs/haproxy.md). A configuration that does not load
// leaves the old worker running and is reported.
func Reload(ctx context.Context, h *haproxy.Instance, master, stateFile string) error {
	before, err := h.Identity(ctx)
	if err != nil {
		return fmt.Errorf("reload: reading the running worker: %w", err)
	}
	state, err := saveState(ctx, h, stateFile)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	m, err := haproxy.New(master, h.Timeout())
	if err != nil {
		return fmt.Errorf("reload: master CLI: %w", err)
	}
	// The master answers a reload by re-executing itself, which closes the
	// connection: no answer is expected. Its CLI refuses connections for a
	// moment after it starts (and while it re-executes): try again then.
	for tries := 0; ; tries++ {
		_, err := m.Command(ctx, "reload")
		if err == nil || strings.Contains(err.Error(), "answers to") {
			break
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || tries == 50 {
			return fmt.Errorf("reload: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*h.Timeout())
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
			if err := h.MarkReplayed(ctx, after); err != nil {
				return fmt.Errorf("reload: the new worker runs with its servers, but %w: %w", ErrNotMarked, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reload: no new worker answered on %s (still %s); check the master's log for a configuration error: %w", h.ID(), before, ctx.Err())
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
