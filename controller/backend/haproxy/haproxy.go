// Package haproxy drives HAProxy through its Runtime API (a unix or TCP
// stats socket at level admin).
//
// HAProxy 2.6 (Debian's) refuses `cookie` on `add server`, so an upstream is
// a backend of server-template slots with dynamic cookies:
//
//	backend shop
//	    cookie SRV insert indirect nocache dynamic
//	    dynamic-cookie-key <a secret shared by every replica>
//	    server-template s 1-50 0.0.0.0:0 disabled
//
// The controller owns every server of such a backend. A free slot has the
// address 0.0.0.0; an endpoint takes a free slot (`set server B/S addr IP
// port P`), gets its state (`set server B/S state ready|drain|maint`), and
// gives the slot back when it is removed (maint, then addr 0.0.0.0). The
// dynamic cookie is a hash of the key, address and port, so it is the same
// on every replica and after a restart. All changes to one backend go over
// one connection, as one batch.
//
// On HAProxy 3.0 and later, WithDynamicServers holds an upstream as
// servers the controller adds and deletes instead (see dynamic.go).
package haproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/plan"
)

const freeAddr = "0.0.0.0"

// Instance is one HAProxy process.
type Instance struct {
	network, address string
	timeout          time.Duration
	id               string

	// readyMap is the map file holding the readiness marker; empty: none.
	readyMap string
	// dynamic: servers are added and deleted (3.0+), not slots.
	dynamic bool
	log     logr.Logger

	mu sync.Mutex
	// unknown holds the srv_admin_state bits no version defines that were
	// seen (and logged) already: each is logged once.
	unknown AdminState
	// versionOK: the process was found recent enough for dynamic servers.
	versionOK bool
	// tls, when set, authenticates both ends (WithTLS).
	tls *TLSFiles
}

var (
	_ backend.Instance    = (*Instance)(nil)
	_ backend.Prober      = (*Instance)(nil)
	_ backend.Marker      = (*Instance)(nil)
	_ backend.Heartbeater = (*Instance)(nil)
)

// Option sets an instance option.
type Option func(*Instance)

// WithReadyMap names the map file of the readiness marker (see
// MarkFilled).
func WithReadyMap(path string) Option { return func(h *Instance) { h.readyMap = path } }

// WithDynamicServers holds upstreams as dynamic servers (HAProxy 3.0 and
// later) instead of server-template slots.
func WithDynamicServers() Option { return func(h *Instance) { h.dynamic = true } }

// WithLogger logs what the instance notices on its own (unknown
// srv_admin_state bits); default: nothing.
func WithLogger(l logr.Logger) Option { return func(h *Instance) { h.log = l } }

// TLSFiles authenticate both ends of a TCP Runtime API: the client
// certificate the controller presents and the CA that verifies HAProxy's.
// They are read at each connection, so renewed files are used at once.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
	// ServerName HAProxy's certificate must carry; default: the address's host.
	ServerName string
}

// WithTLS speaks TLS with a client certificate to the Runtime API (tcp://
// addresses only).
func WithTLS(f TLSFiles) Option { return func(h *Instance) { h.tls = &f } }

func (h *Instance) tlsConfig() (*tls.Config, error) {
	f := h.tls
	pair, err := backend.LoadClientCertificate(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, err
	}
	roots, err := backend.CAPool(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	name := f.ServerName
	if name == "" {
		name, _, _ = net.SplitHostPort(h.address)
	}
	return &tls.Config{Certificates: []tls.Certificate{*pair}, RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS12}, nil
}

// New returns the instance at addr: unix:///path or tcp://host:port.
func New(addr string, timeout time.Duration, opts ...Option) (*Instance, error) {
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("haproxy instance %q: %w", addr, err)
	}
	h := &Instance{timeout: timeout, id: addr, log: logr.Discard()}
	switch u.Scheme {
	case "unix":
		h.network, h.address = "unix", u.Path
	case "tcp":
		h.network, h.address = "tcp", u.Host
	default:
		return nil, fmt.Errorf("haproxy instance %q: want unix:///path or tcp://host:port", addr)
	}
	for _, o := range opts {
		o(h)
	}
	if h.tls != nil && h.network != "tcp" {
		return nil, fmt.Errorf("haproxy instance %q: TLS needs tcp://host:port", addr)
	}
	return h, nil
}

// ID is the instance's address.
func (h *Instance) ID() string { return h.id }

// run sends commands on one connection, separated by ';', and returns each
// command's output. The Runtime API ends each output with an empty line.
func (h *Instance) run(ctx context.Context, cmds []string) ([]string, error) {
	conn, err := h.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline := time.Now().Add(h.timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte(strings.Join(cmds, ";") + "\n")); err != nil {
		return nil, fmt.Errorf("haproxy %s: sending: %w", h.id, err)
	}
	var outs []string
	var cur []string
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			outs = append(outs, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("haproxy %s: reading: %w", h.id, err)
	}
	if len(cur) > 0 {
		outs = append(outs, strings.Join(cur, "\n"))
	}
	if len(outs) < len(cmds) {
		return outs, fmt.Errorf("haproxy %s: %d answers to %d commands", h.id, len(outs), len(cmds))
	}
	return outs, nil
}

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

// Identity is the worker's Pid and start time from `show info`: a
// reload (a new worker), a restart or a new replica reads differently,
// even in a container where every process has the same Pid.
func (h *Instance) Identity(ctx context.Context) (string, error) {
	m, err := h.Info(ctx)
	if err != nil {
		return "", err
	}
	return identity(m)
}

func identity(info map[string]string) (string, error) {
	pid, start := info["Pid"], info["Start_time_sec"]
	if pid == "" || start == "" {
		// Both are there on every supported version (2.6 and later).
		return "", errors.New("haproxy: show info lacks Pid or Start_time_sec")
	}
	return "pid " + pid + " started " + start, nil
}

// MarkFilled sets the key "filled" in the map file ReadyMap names (a map
// the configuration loads, empty on disk, so that a new process starts
// without it) on the process named identity. The readiness frontend of
// the sample configuration answers 200 only while the key is there. The
// identity is read on the same connection as the map is written, so the
// marker never lands on another process unnoticed; if it did, it is taken
// off again.
func (h *Instance) MarkFilled(ctx context.Context, id string) error {
	if h.readyMap == "" {
		return nil
	}
	if got, err := h.setOn(ctx, id, markerKey, now()); err != nil {
		return fmt.Errorf("haproxy %s: %w", h.id, err)
	} else if got != id {
		return fmt.Errorf("haproxy %s: the process changed (%s, filled %s) while marking it filled; taken off again", h.id, got, id)
	}
	return nil
}

// setOn sets key to value in the ready map of the process named id: it
// reads the identity on the same connection as it writes, and takes the
// key off again when another process answered, returning that one's
// identity.
func (h *Instance) setOn(ctx context.Context, id, key, value string) (string, error) {
	outs, err := h.run(ctx, []string{"show info", "del map " + h.readyMap + " " + key, "add map " + h.readyMap + " " + key + " " + value})
	if err != nil {
		return "", err
	}
	if out := strings.TrimSpace(outs[2]); out != "" {
		return "", fmt.Errorf("add map %s: %s", h.readyMap, out)
	}
	got, err := identity(parseInfo(outs[0]))
	if err != nil || got != id {
		_, _ = h.run(ctx, []string{"del map " + h.readyMap + " " + key})
	}
	return got, nil
}

// markerKey is the key MarkFilled sets in the ready map. Its value is
// the Unix time in milliseconds of the last confirmation (MarkFilled, then Heartbeat):
// the sample configuration's readiness frontend also refuses a marker
// older than a few seconds, so that an instance no controller can reach
// any more leaves rotation instead of routing with stale servers.
const markerKey = "filled"

func now() string { return strconv.FormatInt(time.Now().UnixMilli(), 10) }

// FreshFor is how old a marker may be and still be refreshed by
// Heartbeat: three heartbeats. One older was not confirmed for a while (a
// partition, a stalled controller): the process may have missed changes,
// so only MarkFilled, after a pass that brought it in step, sets it again.
// The sample configuration refuses a marker older than 2 s.
const FreshFor = 1500 * time.Millisecond

// MarkerFreshFor is FreshFor.
func (h *Instance) MarkerFreshFor() time.Duration { return FreshFor }

// Heartbeat refreshes the marker's time on the process answering if it
// carries one confirmed within FreshFor (`set map` changes an existing
// key only: a process that was never marked filled stays unmarked). Every
// controller replica calls it, the standby too, so that a leader
// hand-over never ages a marker out.
func (h *Instance) Heartbeat(ctx context.Context) error {
	if h.readyMap == "" {
		return nil
	}
	age, ok, err := h.MarkerAge(ctx)
	if err != nil || !ok || age > FreshFor {
		return err
	}
	outs, err := h.run(ctx, []string{"set map " + h.readyMap + " " + markerKey + " " + now()})
	if err != nil {
		return err
	}
	if out := strings.TrimSpace(outs[0]); out != "" && !strings.Contains(out, "not found") {
		return fmt.Errorf("haproxy %s: set map %s: %s", h.id, h.readyMap, out)
	}
	return nil
}

// HasMarker reports whether a ready map is configured.
func (h *Instance) HasMarker() bool { return h.readyMap != "" }

// MarkerAge reads how long ago the process' marker was last confirmed;
// ok is false when it carries none (or no ready map is configured).
func (h *Instance) MarkerAge(ctx context.Context) (age time.Duration, ok bool, err error) {
	if h.readyMap == "" {
		return 0, false, nil
	}
	outs, err := h.run(ctx, []string{"get map " + h.readyMap + " " + markerKey})
	if err != nil {
		return 0, false, err
	}
	out := outs[0]
	if !strings.Contains(out, "found=yes") {
		if strings.Contains(out, "found=no") {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("haproxy %s: get map %s: %s", h.id, h.readyMap, strings.TrimSpace(out))
	}
	_, v, _ := strings.Cut(out, `value="`)
	v, _, _ = strings.Cut(v, `"`)
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("haproxy %s: get map %s: marker %q is not a time in milliseconds", h.id, h.readyMap, v)
	}
	return time.Since(time.UnixMilli(ms)), true, nil
}

// Info reads `show info` fields (Pid, Uptime_sec, …), for restart
// detection and diagnostics.
func (h *Instance) Info(ctx context.Context) (map[string]string, error) {
	outs, err := h.run(ctx, []string{"show info"})
	if err != nil {
		return nil, err
	}
	m := parseInfo(outs[0])
	if len(m) == 0 {
		return nil, errors.New("haproxy: empty show info")
	}
	return m, nil
}

// parseInfo reads the "Name: value" lines of a `show info` answer.
func parseInfo(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}
