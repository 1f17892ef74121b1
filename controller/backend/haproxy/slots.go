// Slots: a backend's servers as `show servers state` lists them, and the
// steps that move endpoints into, between and out of them.

package haproxy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/plan"
)

type slot struct {
	backend string
	id      int
	name    string
	addr    netip.AddrPort
	free    bool
	admin   AdminState
	state   plan.State
}

// slots reads the backend's servers with `show servers state` on sess: in
// slot mode every server of the backend, in dynamic mode the ones the
// controller added (named by dynamicName).
func (h *Instance) slots(ctx context.Context, sess *session, upstream string) ([]slot, error) {
	outs, err := sess.run(ctx, []string{"show servers state " + upstream})
	if err != nil {
		return nil, err
	}
	out, err := parseServersState(outs[0], h.dynamic)
	if err != nil {
		return nil, fmt.Errorf("haproxy %s: show servers state %s: %w", h.id, upstream, err)
	}
	for _, s := range out {
		h.noteUnknown(upstream, s)
	}
	if len(out) == 0 && !h.dynamic {
		return nil, fmt.Errorf("haproxy %s: backend %s has no servers; give it a server-template: %w", h.id, upstream, backend.ErrCannotHold)
	}
	return out, nil
}

// parseServersState reads the answer to `show servers state <backend>`
// (format 1, the same from 2.6 to 3.2). In dynamic mode only the servers
// named by dynamicName count, and none is free.
func parseServersState(answer string, dynamic bool) ([]slot, error) {
	var out []slot
	for _, line := range strings.Split(answer, "\n") {
		if line == "" || strings.HasPrefix(line, "#") || line == "1" {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 19 {
			// An error message: "Can't find backend.", etc.
			if strings.Contains(answer, "Can't find backend") {
				return nil, fmt.Errorf("%s: %w", strings.TrimSpace(answer), backend.ErrCannotHold)
			}
			return nil, errors.New(strings.TrimSpace(answer))
		}
		if dynamic && !strings.HasPrefix(f[3], dynamicPrefix) {
			continue // the operator's own server
		}
		id, _ := strconv.Atoi(f[2])
		admin, err := strconv.ParseUint(f[6], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("server %s: srv_admin_state %q is not a number", f[3], f[6])
		}
		s := slot{backend: f[1], id: id, name: f[3], admin: AdminState(admin)}
		ip, err1 := netip.ParseAddr(f[4])
		port, err2 := strconv.ParseUint(f[18], 10, 16)
		if err1 != nil || err2 != nil || f[4] == freeAddr || port == 0 {
			s.free = true
		} else {
			s.addr = netip.AddrPortFrom(ip.Unmap(), uint16(port))
			s.state = s.admin.State()
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, nil
}

// noteUnknown logs srv_admin_state bits no supported version defines,
// once each per instance: a newer HAProxy may have added one. They never
// change what the server is read as.
func (h *Instance) noteUnknown(upstream string, s slot) {
	u := s.admin.Unknown()
	h.mu.Lock()
	news := u &^ h.unknown
	h.unknown |= u
	h.mu.Unlock()
	if news != 0 {
		h.log.Info("srv_admin_state has bits this version of stickydrain does not know; ignoring them",
			"instance", h.id, "server", upstream+"/"+s.name, "adminState", uint32(s.admin), "unknownBits", fmt.Sprintf("%#x", uint32(news)))
	}
}

// slotSteps are the commands of changes in slot mode: an added server
// takes a free slot's place (its address), a removed one gives it back.
// now runs first; later (the state of a slot given a new address) once
// addrs, the addresses now gives, are in place.
func (h *Instance) slotSteps(upstream string, slots []slot, changes []plan.Change, errs []error) (now, later []step, addrs []addrWant) {
	byAddr := map[netip.AddrPort]*slot{}
	var free []*slot
	for i := range slots {
		if slots[i].free {
			free = append(free, &slots[i])
		} else {
			byAddr[slots[i].addr] = &slots[i]
		}
	}
	srv := func(s *slot) string { return upstream + "/" + s.name }
	for i, ch := range changes {
		switch ch.Op {
		case plan.OpAdd:
			s := byAddr[ch.Addr]
			if s != nil {
				now = append(now, step{i, fmt.Sprintf("set server %s state %s", srv(s), stateWord(ch.State)), empty})
				continue
			}
			if len(free) == 0 {
				errs[i] = fmt.Errorf("haproxy %s: backend %s: no free server-template slot for %s (all %d in use); raise the server-template count: %w", h.id, upstream, ch.Addr, len(slots), backend.ErrCannotHold)
				continue
			}
			s, free = free[0], free[1:]
			now = append(now, step{i, fmt.Sprintf("set server %s addr %s port %d", srv(s), ch.Addr.Addr(), ch.Addr.Port()), addrChanged})
			addrs = append(addrs, addrWant{i, s.name, ch.Addr})
			later = append(later, step{i, fmt.Sprintf("set server %s state %s", srv(s), stateWord(ch.State)), empty})
		case plan.OpSet:
			s := byAddr[ch.Addr]
			if s == nil {
				errs[i] = fmt.Errorf("haproxy %s: backend %s: no server holds %s", h.id, upstream, ch.Addr)
				continue
			}
			now = append(now, step{i, fmt.Sprintf("set server %s state %s", srv(s), stateWord(ch.State)), empty})
		case plan.OpRemove:
			s := byAddr[ch.Addr]
			if s == nil {
				continue // already gone
			}
			now = append(now,
				step{i, fmt.Sprintf("set server %s state maint", srv(s)), empty},
				step{i, fmt.Sprintf("set server %s addr %s port 0", srv(s), freeAddr), addrChanged})
			addrs = append(addrs, addrWant{i, s.name, netip.AddrPort{}})
		}
	}
	return now, later, addrs
}
