// Package nginxplus drives NGINX Plus through its API with
// github.com/nginx/nginx-plus-go-client, server by server: POST to add,
// PATCH drain=true to drain, PATCH down to take down, DELETE to remove,
// each by the ID read for ip:port just before the write. It never calls UpdateHTTPServers,
// which rewrites the whole list and deletes what it was not given, and a
// PATCH never carries the address: an ID read before a reload may name
// another server after it, and the PATCH's answer tells which.
//
// The client cannot send drain=false (the field is omitempty), so a server
// leaves drain by being deleted and added again. Stream upstreams have no
// drain in NGINX Plus: a terminating endpoint of a stream upstream is
// marked down, which stops new connections (existing ones run on).
package nginxplus

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nginx/nginx-plus-go-client/v3/client"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/plan"
)

// Versions are the API versions this backend speaks.
var Versions = []int{4, 5, 6, 7, 8, 9}

// Instance is one NGINX Plus API endpoint (http(s)://host:port/api).
type Instance struct {
	id     string
	http   *http.Client
	pinned int
	mu     sync.Mutex
	c      *client.NginxClient
	// version is the API version negotiated with c; patch speaks it too.
	version int
	gen     uint64
	loaded  string
	restart int
	// checked is when /nginx was last read. Its generation tells a reload
	// or restart apart for the logs; repairs need no such signal (every
	// pass reads the servers), so it is read at most every checkEvery, not
	// on every pass, which keeps a drain to three API calls.
	checked    time.Time
	checkEvery time.Duration
}

// restartCheckEvery is how often /nginx is read for restart detection.
const restartCheckEvery = 5 * time.Second

var (
	_ backend.Instance   = (*Instance)(nil)
	_ backend.Prober     = (*Instance)(nil)
	_ backend.Pass       = (*pass)(nil)
	_ backend.Normalizer = (*pass)(nil)
)

// New returns the instance at addr with lb's options.
func New(addr string, lb config.LoadBalancer) (*Instance, error) {
	o := lb.NGINXPlus
	if o == nil {
		o = &config.NGINXPlusOptions{}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	if usesTLS(o) {
		tc := &tls.Config{InsecureSkipVerify: o.InsecureSkipVerify, ServerName: o.ServerName, MinVersion: tls.VersionTLS12} //nolint:gosec // asked for in the configuration
		if o.CAFile != "" {
			pool, err := backend.CAPool(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("nginx-plus %s: nginxPlus.caFile: %w", addr, err)
			}
			tc.RootCAs = pool
		}
		if o.CertFile != "" {
			// Read at each handshake: a renewed certificate is used on
			// the next connection.
			tc.GetClientCertificate = backend.ClientCertificate(o.CertFile, o.KeyFile)
			if _, err := backend.LoadClientCertificate(o.CertFile, o.KeyFile); err != nil {
				return nil, fmt.Errorf("nginx-plus %s: nginxPlus.certFile, keyFile: %w", addr, err)
			}
		}
		tr.TLSClientConfig = tc
	}
	hdr := http.Header{}
	if o.BasicAuthFile != "" {
		b, err := os.ReadFile(o.BasicAuthFile)
		if err != nil {
			return nil, fmt.Errorf("nginx-plus %s: nginxPlus.basicAuthFile: %w", addr, err)
		}
		user, pass, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
		if !ok {
			return nil, fmt.Errorf("nginx-plus %s: nginxPlus.basicAuthFile %s: want user:password", addr, o.BasicAuthFile)
		}
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.SetBasicAuth(user, pass)
		hdr.Set("Authorization", r.Header.Get("Authorization"))
	}
	if o.HeaderFile != "" {
		b, err := os.ReadFile(o.HeaderFile)
		if err != nil {
			return nil, fmt.Errorf("nginx-plus %s: nginxPlus.headerFile: %w", addr, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok || strings.TrimSpace(k) == "" {
				return nil, fmt.Errorf("nginx-plus %s: nginxPlus.headerFile %s line %d: want 'Name: value'", addr, o.HeaderFile, n)
			}
			hdr.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	return &Instance{
		id:     addr,
		http:   &http.Client{Timeout: lb.Timeout.Duration, Transport: headerTransport{tr, hdr}},
		pinned: o.APIVersion,

		checkEvery: restartCheckEvery,
	}, nil
}

type headerTransport struct {
	rt  http.RoundTripper
	hdr http.Header
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.hdr) > 0 {
		r = r.Clone(r.Context())
		for k, vs := range h.hdr {
			r.Header[k] = vs
		}
	}
	return h.rt.RoundTrip(r)
}

// ID is the API address.
func (n *Instance) ID() string { return n.id }

// Restarts counts the restarts (or reloads) seen through /nginx.
func (n *Instance) Restarts() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.restart
}

// client negotiates the API version once: the newest the server lists
// that this backend speaks, or the pinned one if the server lists it.
func (n *Instance) client(ctx context.Context) (*client.NginxClient, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.c != nil {
		return n.c, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.id+"/", nil)
	if err != nil {
		return nil, fmt.Errorf("nginx-plus %s: %w", n.id, err)
	}
	resp, err := n.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("nginx-plus %s: listing API versions: %w", n.id, err)
	}
	defer resp.Body.Close()
	var offered []int
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&offered) != nil {
		return nil, fmt.Errorf("nginx-plus %s: listing API versions: status %s", n.id, resp.Status)
	}
	v := 0
	for _, o := range offered {
		if slices.Contains(Versions, o) && o > v && (n.pinned == 0 || o == n.pinned) {
			v = o
		}
	}
	if v == 0 {
		return nil, fmt.Errorf("nginx-plus %s: no common API version: it offers %v, stickydrain speaks %v (pinned %d)", n.id, offered, Versions, n.pinned)
	}
	c, err := client.NewNginxClient(n.id, client.WithHTTPClient(n.http), client.WithAPIVersion(v))
	if err != nil {
		return nil, fmt.Errorf("nginx-plus %s: %w", n.id, err)
	}
	n.c, n.version = c, v
	return c, nil
}

func errCode(err error) string {
	var se client.StatusError
	if errors.As(err, &se) {
		return se.Code()
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// apiError is an NGINX Plus API error answer.
type apiError struct {
	Status int
	Code   string
	Text   string
}

func (e *apiError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("status %d %s (not an NGINX Plus API answer)", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("status %d, %s: %s", e.Status, e.Code, e.Text)
}

// patch sets fields of the server with id in an http or stream upstream,
// never its address, and returns the address the answer names. The
// client's Update…Server always sends "server", and a PATCH carrying it
// moves the server with that ID to the address: if a reload renumbered
// the servers (NGINX Plus reads its state file again from ID 0) between
// the read of the ID and the PATCH, another server would be moved onto
// this one's address, and its own sessions lost.
func (n *Instance) patch(ctx context.Context, kind, upstream string, id int, fields map[string]bool) (string, error) {
	body, err := json.Marshal(fields)
	if err != nil {
		return "", err
	}
	var answer struct {
		Server string `json:"server"`
	}
	if err := n.server(ctx, http.MethodPatch, kind, upstream, id, body, &answer); err != nil {
		return "", err
	}
	return answer.Server, nil
}

// server sends method to the server with id in an http or stream
// upstream, with body as JSON when there is one, and decodes a 200 answer
// into answer; any other status is an *apiError with NGINX Plus's code.
func (n *Instance) server(ctx context.Context, method, kind, upstream string, id int, body []byte, answer any) error {
	n.mu.Lock()
	v := n.version
	n.mu.Unlock()
	u := fmt.Sprintf("%s/%d/%s/upstreams/%s/servers/%d", n.id, v, kind, url.PathEscape(upstream), id)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := n.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				Text string `json:"text"`
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		return &apiError{Status: resp.StatusCode, Code: e.Error.Code, Text: e.Error.Text}
	}
	if err := json.Unmarshal(raw, answer); err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	}
	return nil
}

// checkDue reports whether /nginx is due for a read, and marks it read.
func (n *Instance) checkDue() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if time.Since(n.checked) < n.checkEvery {
		return false
	}
	n.checked = time.Now()
	return true
}

// Identity is /nginx's generation and load time: both change on a reload,
// the load time on a restart.
func (n *Instance) Identity(ctx context.Context) (string, error) {
	c, err := n.client(ctx)
	if err != nil {
		return "", err
	}
	info, err := c.GetNginxInfo(ctx)
	if err != nil {
		return "", fmt.Errorf("nginx-plus %s: reading /nginx: %w", n.id, err)
	}
	return fmt.Sprintf("generation %d loaded %s", info.Generation, info.LoadTimestamp), nil
}

// pass is one upstream's servers as read, and whether it is a stream
// upstream (which has no drain).
type pass struct {
	n        *Instance
	upstream string
	stream   bool
	servers  map[netip.AddrPort]plan.State
}

// Begin reads the upstream's servers (an http upstream, else a stream
// one), after checking /nginx for a restart.
func (n *Instance) Begin(ctx context.Context, upstream string) (backend.Pass, error) {
	p := &pass{n: n, upstream: upstream}
	var err error
	if p.servers, p.stream, err = n.servers(ctx, upstream); err != nil {
		return nil, err
	}
	return p, nil
}

// Servers is what the pass read.
func (p *pass) Servers() map[netip.AddrPort]plan.State { return p.servers }

// Close does nothing: every API call is a request of its own.
func (p *pass) Close() {}

// servers reads the upstream's servers and whether it is a stream
// upstream.
func (n *Instance) servers(ctx context.Context, upstream string) (map[netip.AddrPort]plan.State, bool, error) {
	c, err := n.client(ctx)
	if err != nil {
		return nil, false, err
	}
	if n.checkDue() {
		if info, err := c.GetNginxInfo(ctx); err == nil {
			n.mu.Lock()
			if n.gen != 0 && (info.Generation != n.gen || info.LoadTimestamp != n.loaded) {
				n.restart++
				logf.FromContext(ctx).Info("NGINX Plus restarted or reloaded; every pass repairs what it lost", "instance", n.id,
					"generation", info.Generation, "loadTimestamp", info.LoadTimestamp)
			}
			n.gen, n.loaded = info.Generation, info.LoadTimestamp
			n.mu.Unlock()
		}
	}
	out := map[netip.AddrPort]plan.State{}
	servers, err := c.GetHTTPServers(ctx, upstream)
	if errCode(err) == "UpstreamNotFound" {
		streams, serr := c.GetStreamServers(ctx, upstream)
		if serr != nil {
			if errCode(serr) == "UpstreamNotFound" {
				serr = fmt.Errorf("%w: %w", serr, backend.ErrCannotHold)
			}
			return nil, false, fmt.Errorf("nginx-plus %s: upstream %s is neither an http nor a stream upstream: %w", n.id, upstream, serr)
		}
		for _, s := range streams {
			if a, ok := parse(s.Server); ok {
				out[a] = state(false, ptr.Deref(s.Down, false))
			}
		}
		return out, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("nginx-plus %s: %w", n.id, err)
	}
	for _, s := range servers {
		if a, ok := parse(s.Server); ok {
			out[a] = state(s.Drain, ptr.Deref(s.Down, false))
		}
	}
	return out, false, nil
}

func parse(s string) (netip.AddrPort, bool) {
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()), true
}

func state(drain, down bool) plan.State {
	switch {
	case down:
		return plan.Down
	case drain:
		return plan.Draining
	}
	return plan.Active
}

// Normalize maps draining to down on stream upstreams, which have no drain.
func (p *pass) Normalize(desired map[netip.AddrPort]plan.State) map[netip.AddrPort]plan.State {
	if !p.stream {
		return desired
	}
	out := make(map[netip.AddrPort]plan.State, len(desired))
	for a, s := range desired {
		if s == plan.Draining {
			s = plan.Down
		}
		out[a] = s
	}
	return out
}

// Apply makes the changes one server at a time, going on after failures.
// Servers are found by address: the IDs are read once per Apply, right
// before its first write, never taken from an earlier read (a reload
// renumbers them), and read again whenever an answer shows they moved.
func (p *pass) Apply(ctx context.Context, changes []plan.Change) []error {
	n, upstream, stream := p.n, p.upstream, p.stream
	errs := make([]error, len(changes))
	if len(changes) == 0 {
		return errs
	}
	c, err := n.client(ctx)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	ids := &serverIDs{c: c, upstream: upstream}
	for i, ch := range changes {
		if stream {
			errs[i] = n.applyStream(ctx, c, upstream, ch)
		} else {
			errs[i] = n.applyHTTP(ctx, c, ids, ch)
		}
		if errs[i] != nil {
			errs[i] = fmt.Errorf("nginx-plus %s: %s %s %s: %w", n.id, ch.Op, upstream, ch.Addr, errs[i])
		}
	}
	return errs
}

// serverIDs are an http upstream's servers by address, read at most once
// per Apply until an answer shows they moved.
type serverIDs struct {
	c        *client.NginxClient
	upstream string
	read     map[string]client.UpstreamServer // address → server, nil until read
}

// find is the server at address, reading the upstream if it was not read
// since the last change of IDs.
func (s *serverIDs) find(ctx context.Context, server string) (client.UpstreamServer, error) {
	if s.read == nil {
		servers, err := s.c.GetHTTPServers(ctx, s.upstream)
		if err != nil {
			return client.UpstreamServer{}, err
		}
		s.set(servers)
	}
	if srv, ok := s.read[server]; ok {
		return srv, nil
	}
	for addr, srv := range s.read { // the same address written otherwise
		if names(addr, server) {
			return srv, nil
		}
	}
	return client.UpstreamServer{}, client.ErrServerNotFound
}

// stale drops what was read: the next find reads again.
func (s *serverIDs) stale() { s.read = nil }

// set takes servers (a DELETE's answer: the servers left, with their IDs)
// as what was read.
func (s *serverIDs) set(servers []client.UpstreamServer) {
	s.read = make(map[string]client.UpstreamServer, len(servers))
	for _, srv := range servers {
		s.read[srv.Server] = srv
	}
}

// names reports whether a PATCH's answered address is server. An answer
// without one (NGINX Plus documents the server object as the answer) is
// taken as the server asked for.
func names(answered, server string) bool {
	if answered == "" || answered == server {
		return true
	}
	a, aok := parse(answered)
	s, sok := parse(server)
	return aok && sok && a == s
}

// describe writes fields as drain=true down=false, in a fixed order.
func describe(fields map[string]bool) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, fields[k])
	}
	return strings.Join(parts, " ")
}

func (n *Instance) applyHTTP(ctx context.Context, c *client.NginxClient, ids *serverIDs, ch plan.Change) error {
	upstream, server := ids.upstream, ch.Addr.String()
	set := func(fields map[string]bool) error {
		srv, err := ids.find(ctx, server)
		if err != nil {
			return err
		}
		got, err := n.patch(ctx, "http", upstream, srv.ID, fields)
		switch {
		case errCode(err) == "UpstreamServerNotFound":
			// The ID went away since the read (a reload, another
			// writer): read again, once.
			ids.stale()
			if srv, err = ids.find(ctx, server); err != nil {
				return err
			}
			got, err = n.patch(ctx, "http", upstream, srv.ID, fields)
		}
		switch {
		case err != nil:
			return err
		case !names(got, server):
			ids.stale()
			return fmt.Errorf("server ID %d, read as %s's just before, names %s: a reload renumbered the servers in between; %s was set %s by mistake and the pass runs again to put it back", srv.ID, server, got, got, describe(fields))
		}
		return nil
	}
	switch ch.Op {
	case plan.OpAdd:
		if err := c.AddHTTPServer(ctx, upstream, client.UpstreamServer{Server: server, Down: ptr.To(ch.State == plan.Down)}); err != nil {
			return err
		}
		ids.stale() // a new ID
		if ch.State == plan.Draining {
			return set(map[string]bool{"drain": true})
		}
		return nil
	case plan.OpSet:
		switch {
		case ch.State == plan.Draining:
			return set(map[string]bool{"drain": true, "down": false})
		case ch.State == plan.Down:
			return set(map[string]bool{"down": true})
		case ch.From == plan.Draining:
			// drain=false cannot be sent: delete and add again.
			if err := n.remove(ctx, ids, server); err != nil {
				return err
			}
			err := c.AddHTTPServer(ctx, upstream, client.UpstreamServer{Server: server})
			ids.stale()
			return err
		default:
			return set(map[string]bool{"down": false})
		}
	case plan.OpRemove:
		err := n.remove(ctx, ids, server)
		if errors.Is(err, client.ErrServerNotFound) {
			return nil
		}
		return err
	}
	return nil
}

// remove deletes the server at address by the ID read just before, and
// checks the answer (the servers left): if the ID named another server (a
// reload renumbered them in between), that one is added back at once as
// it was, and the mistake is reported.
func (n *Instance) remove(ctx context.Context, ids *serverIDs, server string) error {
	srv, err := ids.find(ctx, server)
	if err != nil {
		return err
	}
	before := ids.read
	ids.stale()
	left, err := n.deleteByID(ctx, ids.upstream, srv.ID)
	if errCode(err) == "UpstreamServerNotFound" {
		if srv, err = ids.find(ctx, server); err != nil {
			return err
		}
		before = ids.read
		ids.stale()
		left, err = n.deleteByID(ctx, ids.upstream, srv.ID)
	}
	if err != nil {
		return err
	}
	still, gone := false, []client.UpstreamServer{}
	remaining := map[string]bool{}
	for _, l := range left {
		remaining[l.Server] = true
		if names(l.Server, server) {
			still = true
		}
	}
	for addr, b := range before {
		if !remaining[addr] && !names(addr, server) {
			gone = append(gone, b)
		}
	}
	if !still {
		// The answer is the upstream as it is now: the next change of this
		// Apply needs no read of its own.
		ids.set(left)
		return nil
	}
	var errs []error
	for _, g := range gone {
		// Put it back as it was; a drain comes back as a drain.
		if err := ids.c.AddHTTPServer(ctx, ids.upstream, client.UpstreamServer{Server: g.Server, Down: g.Down}); err != nil {
			errs = append(errs, fmt.Errorf("adding %s back: %w", g.Server, err))
			continue
		}
		if g.Drain {
			added, err := ids.find(ctx, g.Server)
			if err == nil {
				_, err = n.patch(ctx, "http", ids.upstream, added.ID, map[string]bool{"drain": true})
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("draining %s again: %w", g.Server, err))
			}
			ids.stale()
		}
	}
	addrs := make([]string, len(gone))
	for i, g := range gone {
		addrs[i] = g.Server
	}
	return fmt.Errorf("server ID %d, read as %s's just before, named another server when deleted (a reload renumbered them in between): %v deleted by mistake and added back, %s still there; the pass runs again: %w", srv.ID, server, addrs, server, errors.Join(errs...))
}

// deleteByID deletes the server with id and returns the servers left, as
// NGINX Plus answers a DELETE.
func (n *Instance) deleteByID(ctx context.Context, upstream string, id int) ([]client.UpstreamServer, error) {
	var left []client.UpstreamServer
	if err := n.server(ctx, http.MethodDelete, "http", upstream, id, nil, &left); err != nil {
		return nil, err
	}
	return left, nil
}

func (n *Instance) applyStream(ctx context.Context, c *client.NginxClient, upstream string, ch plan.Change) error {
	server := ch.Addr.String()
	down := ch.State != plan.Active
	switch ch.Op {
	case plan.OpAdd:
		return c.AddStreamServer(ctx, upstream, client.StreamUpstreamServer{Server: server, Down: ptr.To(down)})
	case plan.OpSet:
		servers, err := c.GetStreamServers(ctx, upstream)
		if err != nil {
			return err
		}
		for _, s := range servers {
			if s.Server == server {
				got, err := n.patch(ctx, "stream", upstream, s.ID, map[string]bool{"down": down})
				if err == nil && !names(got, server) {
					return fmt.Errorf("stream server ID %d, just read as %s's, names %s: the upstream changed under this pass; %s was set down=%v by mistake and the next pass puts it back", s.ID, server, got, got, down)
				}
				return err
			}
		}
		return client.ErrServerNotFound
	case plan.OpRemove:
		err := c.DeleteStreamServer(ctx, upstream, server)
		if errors.Is(err, client.ErrServerNotFound) {
			return nil
		}
		return err
	}
	return nil
}
