package haproxy

// Dynamic servers (HAProxy 3.0 and later; 2.6 refuses `cookie` on `add
// server`). The backend needs no server lines, only a dynamic balance
// algorithm and a cookie:
//
//	backend shop
//	    balance roundrobin
//	    cookie SRV insert indirect nocache
//
// Each endpoint is a server named dynamicName(addr), added with the cookie
// dynamicCookie(addr): both depend on the address alone, so every replica
// and every restarted process gives an endpoint the same name and cookie,
// and a user's cookie keeps reaching its pod whichever instance answers.
// A removal takes HAProxy's safe sequence: maintenance, `shutdown
// sessions`, `wait … srv-removable`, `del server`. No slot limit, no slot
// leak; but dynamic servers are not in the configuration, so a reload or
// a restart starts with none until they are added again (the reload
// helper adds them back at once; the controller's liveness check within
// a probe interval).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/stickydrain/stickydrain/controller/plan"
)

// dynamicPrefix starts the name of every server the controller adds; the
// backend's other servers (the operator's own) are left alone.
const dynamicPrefix = "sd_"

// dynamicName is the server name of addr: sd_198.18.0.5_8080.
func dynamicName(addr netip.AddrPort) string {
	return dynamicPrefix + addr.Addr().String() + "_" + strconv.Itoa(int(addr.Port()))
}

// dynamicCookie is the cookie value of addr: 16 hex digits of a SHA-256
// of the address, the same on every replica and after any restart.
func dynamicCookie(addr netip.AddrPort) string {
	sum := sha256.Sum256([]byte("stickydrain/" + addr.String()))
	return hex.EncodeToString(sum[:8])
}

// dynamicSteps are the commands of changes in dynamic mode.
func (h *Instance) dynamicSteps(upstream string, servers []slot, changes []plan.Change, errs []error) []step {
	have := map[netip.AddrPort]bool{}
	for _, s := range servers {
		if !s.free {
			have[s.addr] = true
		}
	}
	var steps []step
	for i, ch := range changes {
		srv := upstream + "/" + dynamicName(ch.Addr)
		switch ch.Op {
		case plan.OpAdd:
			if !have[ch.Addr] {
				// A new server starts in maintenance; the state below
				// takes it out.
				steps = append(steps, step{i, fmt.Sprintf("add server %s %s cookie %s", srv, ch.Addr, dynamicCookie(ch.Addr)), added})
			}
			steps = append(steps, step{i, fmt.Sprintf("set server %s state %s", srv, stateWord(ch.State)), empty})
		case plan.OpSet:
			if !have[ch.Addr] {
				errs[i] = fmt.Errorf("haproxy %s: backend %s: no server %s", h.id, upstream, dynamicName(ch.Addr))
				continue
			}
			steps = append(steps, step{i, fmt.Sprintf("set server %s state %s", srv, stateWord(ch.State)), empty})
		case plan.OpRemove:
			if !have[ch.Addr] {
				continue // already gone
			}
			steps = append(steps,
				step{i, "set server " + srv + " state maint", empty},
				step{i, "shutdown sessions server " + srv, empty},
				// Its answer does not matter: del server refuses a server
				// that still has connections, and the next pass tries again.
				step{i, "wait 1s srv-removable " + srv, func(string) bool { return true }},
				step{i, "del server " + srv, deleted})
		}
	}
	return steps
}

func added(answer string) bool {
	// "Already exists a server with the same name": added by a batch whose
	// answer was lost; the state step that follows makes it right.
	return strings.Contains(answer, "New server registered") || strings.Contains(answer, "Already exists")
}

func deleted(answer string) bool {
	return strings.Contains(answer, "Server deleted") || strings.Contains(answer, "No such server")
}

// checkVersion refuses dynamic mode on a process older than 3.0, once
// per instance, naming the version it runs.
func (h *Instance) checkVersion(ctx context.Context) error {
	if !h.dynamic {
		return nil
	}
	h.mu.Lock()
	ok := h.versionOK
	h.mu.Unlock()
	if ok {
		return nil
	}
	info, err := h.Info(ctx)
	if err != nil {
		return err
	}
	v := info["Version"]
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return fmt.Errorf("haproxy %s: show info: version %q is not major.minor…", h.id, v)
	}
	if major < 3 {
		return fmt.Errorf("haproxy %s: mode %q needs HAProxy 3.0 or later, and this process runs %s; use mode %q (server-template slots) with it", h.id, "dynamic", v, "slots")
	}
	h.mu.Lock()
	h.versionOK = true
	h.mu.Unlock()
	return nil
}
