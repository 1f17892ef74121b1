package haproxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ServersState is what `show servers state` answers — every backend's
// servers with their address, port and admin state (drain, maintenance) —
// checked to be a version 1 state, as HAProxy's server-state-file wants
// it: what the reload helper (controller/cmd/stickydrain-haproxy/reload)
// saves before a reload and replays after it.
func (h *Instance) ServersState(ctx context.Context) (string, error) {
	outs, err := h.run(ctx, []string{"show servers state"})
	if err != nil {
		return "", fmt.Errorf("show servers state: %w", err)
	}
	state := strings.TrimSpace(outs[0]) + "\n"
	if !strings.HasPrefix(state, "1\n") {
		return "", fmt.Errorf("haproxy %s answered %q, not a version 1 state", h.id, firstLine(state))
	}
	return state, nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// Command sends cmds to the Runtime API (or a master CLI) on one
// connection and returns each command's answer: for what the backend has
// no method of its own (the reload helper's `reload` to the master).
func (h *Instance) Command(ctx context.Context, cmds ...string) ([]string, error) {
	return h.run(ctx, cmds)
}

// Timeout is how long each Runtime API request may take.
func (h *Instance) Timeout() time.Duration { return h.timeout }

// replayedKey is the key the reload helper sets in the ready map of a new
// worker once it holds every server the old one had (MarkReplayed). Only
// its presence counts.
const replayedKey = "replayed"

// MarkReplayed sets "replayed" in the ready map of the process named id,
// if a ready map is configured (WithReadyMap): the configuration's gate,
// which holds a new process's requests while it has neither "replayed"
// nor "filled", lets them through from then on (docs/haproxy.md). Like
// MarkFilled it reads the identity on the same connection; on another
// process (a second reload in between) it takes the key off again: that
// process was not replayed.
func (h *Instance) MarkReplayed(ctx context.Context, id string) error {
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
// answer, as the reload helper saves it — holds and the process lacks, with its
// address, cookie and state, all in one batch. Servers the process has
// are left as they are. It is what keeps drains through a reload in
// dynamic mode (dynamic servers are not in the configuration, so a new
// worker starts without them); in slot mode there is nothing to replay.
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
