// Package nginxplus is an emulator of the NGINX Plus API (ngx_http_api_module)
// for what stickydrain's controller uses. NGINX Plus is commercial and
// cannot be installed here; every result obtained against this emulator is
// an emulator result, and is reported as such.
//
// Covered, following the published API documentation (versions 1–9):
//   - GET /api/ — the version list; GET /api/{v}/ — the root endpoints;
//   - GET /api/{v}/nginx — version, build, address, generation,
//     load_timestamp, timestamp, pid, ppid;
//   - /api/{v}/http/upstreams/ and /api/{v}/stream/upstreams/: GET the map
//     of upstreams; GET one (peers with state up|draining|down, zone,
//     keepalive, zombies); GET, POST (201) its servers; GET, PATCH (200),
//     DELETE (200, the remaining servers) one server by ID;
//   - server objects with the documented defaults (weight 1, max_conns 0,
//     max_fails 1, fail_timeout 10s, slow_start 0s, backup false, down
//     false; http only: route, and drain shown only when true); IDs that are
//     never reused within a generation; duplicate addresses are allowed, as
//     in NGINX Plus (servers are told apart by ID);
//   - error bodies {"error":{"status","text","code"},"request_id","href"}
//     with the documented codes: UnknownVersion, PathNotFound,
//     MethodNotSupported, MethodDisabled (writes off, 405),
//     UpstreamNotFound, UpstreamServerNotFound, UpstreamStatic (no zone),
//     UpstreamConfFormatError (unknown parameter, missing server, bad
//     JSON, an "id" in the body), UpstreamBadAddress, UpstreamBadWeight,
//     UpstreamServerImmutable (changing backup or service);
//   - drain is accepted on http servers only ("drain" on a stream server is
//     an unknown parameter); trailing slashes are accepted as NGINX does;
//   - the fields request argument is ignored.
//
// Fault controls for tests: Reload and Restart (runtime changes lost and
// the configured servers back, unless the upstream has a state file —
// Upstream.State — whose servers, with their parameters, drain and down
// included, survive both, renumbered from 0 as NGINX Plus reads the file
// again; a reload advances the generation, a restart starts it at 1; both
// set a new load_timestamp), SetLatency, FailNext (the next n requests
// answer a given status), SetWritable.
//
// Not covered: statistics beyond zeroes (requests, responses, health
// checks), keyvals, caches, server zones, resolvers, SSL, the state file's
// format on disk (its effect is modelled), DNS-resolved (service) servers, sticky routes' effect on traffic; the
// emulator does not proxy traffic.
package nginxplus

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server is one upstream server as the API shows it.
type Server struct {
	ID          int    `json:"id"`
	Server      string `json:"server"`
	Service     string `json:"service,omitempty"`
	Weight      int    `json:"weight"`
	MaxConns    int    `json:"max_conns"`
	MaxFails    int    `json:"max_fails"`
	FailTimeout string `json:"fail_timeout"`
	SlowStart   string `json:"slow_start"`
	Route       string `json:"route"`
	Backup      bool   `json:"backup"`
	Down        bool   `json:"down"`
	Drain       bool   `json:"drain,omitempty"`
}

// Upstream is a configured upstream: its zone (empty: static, not
// changeable through the API) and its configured servers.
type Upstream struct {
	Name    string
	Zone    string
	Stream  bool
	Servers []Server
	// State is the upstream's `state` directive: the servers as the API
	// left them are kept across reloads and restarts (NGINX Plus then
	// takes its servers from the file, none from the configuration).
	State bool
}

type upstream struct {
	cfg     Upstream
	servers []Server
	nextID  int
}

// Emulator is an NGINX Plus API. Use New, then serve Handler.
type Emulator struct {
	mu         sync.Mutex
	configured []Upstream
	http       map[string]*upstream
	stream     map[string]*upstream
	generation uint64
	loaded     time.Time
	writable   bool
	maxVersion int
	latency    time.Duration
	failNext   int
	failStatus int
	requests   int
}

// Options configure an Emulator.
type Options struct {
	Upstreams []Upstream
	// ReadOnly is `api write=off`: POST, PATCH and DELETE answer 405.
	ReadOnly bool
	// MaxVersion is the newest API version served (default 9).
	MaxVersion int
}

// New returns an emulator with the configured upstreams loaded.
func New(opts Options) *Emulator {
	e := &Emulator{configured: opts.Upstreams, writable: !opts.ReadOnly, maxVersion: opts.MaxVersion}
	if e.maxVersion == 0 {
		e.maxVersion = 9
	}
	e.load()
	return e
}

func (e *Emulator) load() {
	old := map[string]*upstream{}
	for k, u := range e.http {
		old["http/"+k] = u
	}
	for k, u := range e.stream {
		old["stream/"+k] = u
	}
	e.http, e.stream = map[string]*upstream{}, map[string]*upstream{}
	for _, u := range e.configured {
		up := &upstream{cfg: u}
		servers := u.Servers
		kind := "http/"
		if u.Stream {
			kind = "stream/"
		}
		if prev := old[kind+u.Name]; u.State && prev != nil {
			servers = prev.servers
		}
		for _, s := range servers {
			s = withDefaults(s, u.Stream)
			s.ID = up.nextID
			up.nextID++
			up.servers = append(up.servers, s)
		}
		if u.Stream {
			e.stream[u.Name] = up
		} else {
			e.http[u.Name] = up
		}
	}
	e.generation++
	// load_timestamp is shown to the millisecond: two loads in the same
	// millisecond (tests) still read as two.
	now := time.Now().UTC()
	if prev := e.loaded.Truncate(time.Millisecond); !now.Truncate(time.Millisecond).After(prev) && !e.loaded.IsZero() {
		now = prev.Add(time.Millisecond)
	}
	e.loaded = now
}

// Restart is a restart: the generation starts again at 1, and every
// runtime change is lost but in upstreams with a state file.
func (e *Emulator) Restart() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.generation = 0
	e.load()
}

// Reload is a configuration reload: the generation advances, and every
// runtime change is lost but in upstreams with a state file.
func (e *Emulator) Reload() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.load()
}

// SetLatency delays every answer by d.
func (e *Emulator) SetLatency(d time.Duration) {
	e.mu.Lock()
	e.latency = d
	e.mu.Unlock()
}

// FailNext makes the next n requests answer status with an error body.
func (e *Emulator) FailNext(n, status int) {
	e.mu.Lock()
	e.failNext, e.failStatus = n, status
	e.mu.Unlock()
}

// SetWritable switches `api write=on` on or off.
func (e *Emulator) SetWritable(w bool) {
	e.mu.Lock()
	e.writable = w
	e.mu.Unlock()
}

// Requests counts the requests answered, for tests of API calls per change.
func (e *Emulator) Requests() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.requests
}

// Servers returns a copy of an upstream's servers (for test assertions).
func (e *Emulator) Servers(stream bool, name string) []Server {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.http
	if stream {
		m = e.stream
	}
	u := m[name]
	if u == nil {
		return nil
	}
	return append([]Server(nil), u.servers...)
}

func withDefaults(s Server, stream bool) Server {
	if s.Weight == 0 {
		s.Weight = 1
	}
	if s.MaxFails == 0 {
		s.MaxFails = 1
	}
	if s.FailTimeout == "" {
		s.FailTimeout = "10s"
	}
	if s.SlowStart == "" {
		s.SlowStart = "0s"
	}
	if stream {
		s.Route, s.Drain = "", false
	}
	return s
}

type apiError struct {
	Error struct {
		Status int    `json:"status"`
		Text   string `json:"text"`
		Code   string `json:"code"`
	} `json:"error"`
	RequestID string `json:"request_id"`
	Href      string `json:"href"`
}

func writeError(w http.ResponseWriter, status int, code, text string) {
	var e apiError
	e.Error.Status, e.Error.Text, e.Error.Code = status, text, code
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	e.RequestID = hex.EncodeToString(b)
	e.Href = "https://nginx.org/en/docs/http/ngx_http_api_module.html"
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Server", "nginx/1.29.3 (stickydrain NGINX Plus API emulator)")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Handler serves the API under /api/.
func (e *Emulator) Handler() http.Handler {
	return http.HandlerFunc(e.serve)
}

func (e *Emulator) serve(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.requests++
	latency := e.latency
	fail := 0
	if e.failNext > 0 {
		e.failNext--
		fail = e.failStatus
	}
	e.mu.Unlock()
	if latency > 0 {
		time.Sleep(latency)
	}
	if fail != 0 {
		writeError(w, fail, "EmulatorInjectedFault", "injected fault")
		return
	}
	path := strings.Trim(strings.TrimPrefix(r.URL.Path, "/api"), "/")
	if !strings.HasPrefix(r.URL.Path, "/api") {
		writeError(w, http.StatusNotFound, "PathNotFound", "path not found")
		return
	}
	parts := []string{}
	if path != "" {
		parts = strings.Split(path, "/")
	}
	if len(parts) == 0 {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, http.StatusMethodNotAllowed, "MethodNotSupported", "method not supported")
			return
		}
		var vs []int
		for v := 1; v <= e.maxVersion; v++ {
			vs = append(vs, v)
		}
		writeJSON(w, http.StatusOK, vs)
		return
	}
	v, err := strconv.Atoi(parts[0])
	if err != nil || v < 1 || v > e.maxVersion {
		writeError(w, http.StatusNotFound, "UnknownVersion", "unknown version")
		return
	}
	rest := parts[1:]
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case len(rest) == 0:
		if !e.allowGet(w, r) {
			return
		}
		writeJSON(w, http.StatusOK, []string{"nginx", "processes", "connections", "slabs", "http", "stream", "resolvers", "ssl", "workers"})
	case rest[0] == "nginx" && len(rest) == 1:
		if !e.allowGet(w, r) {
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"version": "1.29.3", "build": "nginx-plus-r35", "address": hostOnly(r.Host),
			"generation": e.generation, "load_timestamp": e.loaded.Format("2006-01-02T15:04:05.000Z"),
			"timestamp": time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), "pid": 4242, "ppid": 4241,
		})
	case (rest[0] == "http" || rest[0] == "stream") && len(rest) == 1:
		if !e.allowGet(w, r) {
			return
		}
		if rest[0] == "http" {
			writeJSON(w, http.StatusOK, []string{"requests", "server_zones", "location_zones", "caches", "limit_conns", "limit_reqs", "keyvals", "upstreams"})
		} else {
			writeJSON(w, http.StatusOK, []string{"server_zones", "limit_conns", "keyvals", "upstreams", "zone_sync"})
		}
	case (rest[0] == "http" || rest[0] == "stream") && len(rest) >= 2 && rest[1] == "upstreams":
		e.upstreams(w, r, rest[0] == "stream", rest[2:])
	default:
		writeError(w, http.StatusNotFound, "PathNotFound", "path not found")
	}
}

func (e *Emulator) allowGet(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	writeError(w, http.StatusMethodNotAllowed, "MethodNotSupported", "method not supported")
	return false
}

func (e *Emulator) allowWrite(w http.ResponseWriter) bool {
	if e.writable {
		return true
	}
	writeError(w, http.StatusMethodNotAllowed, "MethodDisabled", "method disabled")
	return false
}

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

func peerState(s Server) string {
	switch {
	case s.Down:
		return "down"
	case s.Drain:
		return "draining"
	}
	return "up"
}

func (e *Emulator) upstreamObject(u *upstream) map[string]any {
	peers := []map[string]any{}
	for _, s := range u.servers {
		p := map[string]any{
			"id": s.ID, "server": s.Server, "name": s.Server, "backup": s.Backup, "weight": s.Weight,
			"state": peerState(s), "active": 0, "requests": 0, "sent": 0, "received": 0, "fails": 0,
			"unavail": 0, "downtime": 0, "max_conns": s.MaxConns,
			"health_checks": map[string]any{"checks": 0, "fails": 0, "unhealthy": 0},
		}
		if !u.cfg.Stream {
			p["responses"] = map[string]any{"1xx": 0, "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0, "total": 0}
		} else {
			p["connections"] = 0
		}
		peers = append(peers, p)
	}
	obj := map[string]any{"peers": peers, "zone": u.cfg.Zone, "zombies": 0}
	if !u.cfg.Stream {
		obj["keepalive"] = 0
	}
	return obj
}

func (e *Emulator) upstreams(w http.ResponseWriter, r *http.Request, stream bool, rest []string) {
	m := e.http
	if stream {
		m = e.stream
	}
	if len(rest) == 0 {
		if !e.allowGet(w, r) {
			return
		}
		out := map[string]any{}
		for name, u := range m {
			out[name] = e.upstreamObject(u)
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	u := m[rest[0]]
	if u == nil {
		writeError(w, http.StatusNotFound, "UpstreamNotFound", "upstream not found")
		return
	}
	switch {
	case len(rest) == 1:
		if !e.allowGet(w, r) {
			return
		}
		writeJSON(w, http.StatusOK, e.upstreamObject(u))
	case len(rest) == 2 && rest[1] == "servers":
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			if u.cfg.Zone == "" {
				writeError(w, http.StatusBadRequest, "UpstreamStatic", "upstream is static")
				return
			}
			writeJSON(w, http.StatusOK, nonNil(u.servers))
		case http.MethodPost:
			if !e.allowWrite(w) {
				return
			}
			if u.cfg.Zone == "" {
				writeError(w, http.StatusBadRequest, "UpstreamStatic", "upstream is static")
				return
			}
			s, ok := e.decode(w, r, stream, Server{}, true)
			if !ok {
				return
			}
			s = withDefaults(s, stream)
			s.ID = u.nextID
			u.nextID++
			u.servers = append(u.servers, s)
			writeJSON(w, http.StatusCreated, s)
		default:
			writeError(w, http.StatusMethodNotAllowed, "MethodNotSupported", "method not supported")
		}
	case len(rest) == 3 && rest[1] == "servers":
		id, err := strconv.Atoi(rest[2])
		idx := -1
		for i, s := range u.servers {
			if err == nil && s.ID == id {
				idx = i
			}
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !e.allowWrite(w) {
			return
		}
		if idx < 0 {
			writeError(w, http.StatusNotFound, "UpstreamServerNotFound", "server not found")
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			writeJSON(w, http.StatusOK, u.servers[idx])
		case http.MethodPatch:
			s, ok := e.decode(w, r, stream, u.servers[idx], false)
			if !ok {
				return
			}
			u.servers[idx] = s
			writeJSON(w, http.StatusOK, s)
		case http.MethodDelete:
			u.servers = append(u.servers[:idx], u.servers[idx+1:]...)
			writeJSON(w, http.StatusOK, nonNil(u.servers))
		default:
			writeError(w, http.StatusMethodNotAllowed, "MethodNotSupported", "method not supported")
		}
	default:
		writeError(w, http.StatusNotFound, "PathNotFound", "path not found")
	}
}

func nonNil(s []Server) []Server {
	if s == nil {
		return []Server{}
	}
	return s
}

// decode applies a JSON body to base, with NGINX's checks: unknown
// parameters, an id, a missing server on POST, immutable fields on PATCH.
func (e *Emulator) decode(w http.ResponseWriter, r *http.Request, stream bool, base Server, create bool) (Server, bool) {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "UpstreamConfFormatError", "error while parsing")
		return base, false
	}
	allowed := map[string]bool{"server": true, "service": true, "weight": true, "max_conns": true, "max_fails": true,
		"fail_timeout": true, "slow_start": true, "backup": true, "down": true}
	if !stream {
		allowed["route"], allowed["drain"] = true, true
	}
	keys := make([]string, 0, len(body))
	for k := range body {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := base
	for _, k := range keys {
		raw := body[k]
		if !allowed[k] {
			writeError(w, http.StatusBadRequest, "UpstreamConfFormatError", fmt.Sprintf("unknown parameter \"%s\"", k))
			return base, false
		}
		bad := func(code, text string) (Server, bool) {
			writeError(w, http.StatusBadRequest, code, text)
			return base, false
		}
		var err error
		switch k {
		case "server":
			err = json.Unmarshal(raw, &s.Server)
			if err == nil {
				if _, _, perr := net.SplitHostPort(s.Server); perr != nil && net.ParseIP(s.Server) == nil {
					return bad("UpstreamBadAddress", fmt.Sprintf("invalid address \"%s\"", s.Server))
				}
			}
		case "service":
			if !create {
				return bad("UpstreamServerImmutable", "server \"service\" cannot be changed")
			}
			err = json.Unmarshal(raw, &s.Service)
		case "weight":
			err = json.Unmarshal(raw, &s.Weight)
			if err == nil && s.Weight < 1 {
				return bad("UpstreamBadWeight", "invalid \"weight\"")
			}
		case "max_conns":
			err = json.Unmarshal(raw, &s.MaxConns)
		case "max_fails":
			err = json.Unmarshal(raw, &s.MaxFails)
		case "fail_timeout":
			err = json.Unmarshal(raw, &s.FailTimeout)
		case "slow_start":
			err = json.Unmarshal(raw, &s.SlowStart)
		case "route":
			err = json.Unmarshal(raw, &s.Route)
		case "backup":
			var b bool
			err = json.Unmarshal(raw, &b)
			if err == nil && !create && b != base.Backup {
				return bad("UpstreamServerImmutable", "server \"backup\" cannot be changed")
			}
			s.Backup = b
		case "down":
			err = json.Unmarshal(raw, &s.Down)
		case "drain":
			err = json.Unmarshal(raw, &s.Drain)
		}
		if err != nil {
			return bad("UpstreamConfFormatError", fmt.Sprintf("invalid \"%s\" value", k))
		}
	}
	if create && s.Server == "" {
		writeError(w, http.StatusBadRequest, "UpstreamConfFormatError", "missing \"server\" argument")
		return base, false
	}
	return s, true
}
