// A pass: a backend read on one session, and its changes applied on the
// same session, so that they reach the process that was read, or fail.

package haproxy

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/plan"
)

// pass is a backend's slots as read, and the session that read them: the
// pass's changes go to the process it read, on one connection.
type pass struct {
	h        *Instance
	upstream string
	slots    []slot
	sess     *session
}

var (
	_ backend.Pass     = (*pass)(nil)
	_ backend.Capacity = (*pass)(nil)
)

// Begin reads the servers the backend's slots hold, on a session the pass
// keeps for its Apply until Close.
func (h *Instance) Begin(ctx context.Context, upstream string) (backend.Pass, error) {
	if err := h.checkVersion(ctx); err != nil {
		return nil, err
	}
	sess, err := h.openSession(ctx)
	if err != nil {
		return nil, err
	}
	slots, err := h.slots(ctx, sess, upstream)
	if err != nil {
		sess.close()
		return nil, err
	}
	return &pass{h: h, upstream: upstream, slots: slots, sess: sess}, nil
}

// Servers is what the pass read.
func (p *pass) Servers() map[netip.AddrPort]plan.State { return serverStates(p.slots) }

// Slots says how many of the backend's server-template slots held a
// server when the pass read it, of how many; not in dynamic mode.
func (p *pass) Slots() (used, total int, ok bool) {
	if p.h.dynamic {
		return 0, 0, false
	}
	for _, s := range p.slots {
		if !s.free {
			used++
		}
	}
	return used, len(p.slots), true
}

// Close closes the pass's session.
func (p *pass) Close() { p.sess.close() }

func serverStates(slots []slot) map[netip.AddrPort]plan.State {
	out := map[netip.AddrPort]plan.State{}
	for _, s := range slots {
		if !s.free {
			out[s.addr] = s.state
		}
	}
	return out
}

func stateWord(s plan.State) string {
	switch s {
	case plan.Draining:
		return "drain"
	case plan.Down:
		return "maint"
	}
	return "ready"
}

// step is one Runtime API command of a batch, for the change at index
// change; ok says whether its answer means success.
type step struct {
	change int
	cmd    string
	ok     func(answer string) bool
}

func empty(answer string) bool { return answer == "" }

func addrChanged(answer string) bool {
	return strings.Contains(answer, "changed") || strings.Contains(answer, "no need to change")
}

// Apply makes the changes on the session the pass's read was made on (the
// same process, one connection), in one batch.
func (p *pass) Apply(ctx context.Context, changes []plan.Change) []error {
	h, upstream := p.h, p.upstream
	errs := make([]error, len(changes))
	if len(changes) == 0 {
		return errs
	}
	if h.dynamic {
		h.send(ctx, p.sess, h.dynamicSteps(upstream, p.slots, changes, errs), errs)
		return errs
	}
	now, later, addrs := h.slotSteps(upstream, p.slots, changes, errs)
	h.send(ctx, p.sess, now, errs)
	// From 3.0 an address change is applied a moment after its answer
	// (HAProxy's server_atomic_sync_task): the new address must be in
	// place before the slot takes traffic, and before the next read,
	// which would otherwise see the slot still free and fill another.
	if len(addrs) > 0 {
		if err := h.awaitAddrs(ctx, p.sess, upstream, addrs, errs); err != nil {
			for _, a := range addrs {
				if errs[a.change] == nil {
					errs[a.change] = err
				}
			}
		}
	}
	h.send(ctx, p.sess, later, errs)
	return errs
}

// send runs the steps as one batch on sess and records each failure in
// errs at its change's index; steps of a change that failed already are
// skipped.
func (h *Instance) send(ctx context.Context, sess *session, steps []step, errs []error) {
	var run []step
	for _, s := range steps {
		if errs[s.change] == nil {
			run = append(run, s)
		}
	}
	if len(run) == 0 {
		return
	}
	cmds := make([]string, len(run))
	for i, s := range run {
		cmds[i] = s.cmd
	}
	outs, err := sess.run(ctx, cmds)
	if err != nil && len(outs) == 0 {
		for _, s := range run {
			errs[s.change] = err
		}
		return
	}
	for i, s := range run {
		if errs[s.change] != nil {
			continue
		}
		if i >= len(outs) {
			errs[s.change] = fmt.Errorf("haproxy %s: no answer to %q", h.id, s.cmd)
			continue
		}
		if out := strings.TrimSpace(outs[i]); !s.ok(out) {
			errs[s.change] = fmt.Errorf("haproxy %s: %q: %s", h.id, s.cmd, out)
			if strings.HasPrefix(s.cmd, "add server ") {
				// The process answered that this backend takes no dynamic
				// server (its balance algorithm, a missing backend, …):
				// the operator's configuration, not a passing failure.
				errs[s.change] = fmt.Errorf("%w: %w", errs[s.change], backend.ErrCannotHold)
			}
		}
	}
}

// addrWant is the address a slot must show after a change (the zero
// AddrPort: free).
type addrWant struct {
	change int
	slot   string
	addr   netip.AddrPort
}

// awaitAddrs reads the backend until every slot shows the address it was
// given, for at most the instance's timeout.
func (h *Instance) awaitAddrs(ctx context.Context, sess *session, upstream string, want []addrWant, errs []error) error {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	for {
		outs, err := sess.run(ctx, []string{"show servers state " + upstream})
		if err != nil {
			return err
		}
		slots, err := parseServersState(outs[0], false)
		if err != nil {
			return fmt.Errorf("haproxy %s: show servers state %s: %w", h.id, upstream, err)
		}
		byName := map[string]slot{}
		for _, s := range slots {
			byName[s.name] = s
		}
		pending := ""
		for _, w := range want {
			s := byName[w.slot]
			if errs[w.change] == nil && (w.addr.IsValid() && s.addr != w.addr || !w.addr.IsValid() && !s.free) {
				pending = w.slot
				break
			}
		}
		if pending == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("haproxy %s: %s/%s does not show its new address: %w", h.id, upstream, pending, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}
