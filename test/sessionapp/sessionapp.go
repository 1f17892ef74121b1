// Package sessionapp is the sample session-bound application of stickydrain's
// tests and demo: an HTTP server with cookie sessions (JSESSIONID, as Tomcat
// names it) that says in every response which pod and version served it, and
// exposes its live session count in every format drainctl reads.
//
// Routes:
//
//	POST /login?user=NAME        start a session; Set-Cookie JSESSIONID=<id>.<pod>
//	GET  /app/...                a request in the session (401 if this pod does not know it)
//	POST /logout                 end the session; the cookie is cleared
//	GET  /sessions               the count as a plain number
//	GET  /actuator/metrics/tomcat.sessions.active.current   Spring Boot actuator JSON
//	GET  /metrics                Prometheus text: tomcat_sessions_active_current_sessions
//	GET  /manager/text/list      Tomcat manager list (the app at /app)
//	GET  /manager/text/sessions?path=/app   Tomcat idle histogram (?wording=old for pre-9.0.17)
//	GET  /drain                  "DRAINING n" while sessions remain, else "IDLE"
//	GET  /ready                  readiness: 200, or 503 once shutting down
//
// Sessions expire after the idle timeout since their last request. Each
// response carries X-Pod and X-Version headers and a JSON body naming both.
package sessionapp

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// CookieName is the session cookie, as Tomcat names it.
const CookieName = "JSESSIONID"

// Config configures an App.
type Config struct {
	Pod         string
	Version     string
	IdleTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// App is the application. Its zero value is not usable; use New.
type App struct {
	cfg      Config
	mu       sync.Mutex
	sessions map[string]*session
	notReady atomic.Bool
	served   atomic.Int64
}

type session struct {
	id       string
	user     string
	created  time.Time
	lastSeen time.Time
	requests int
}

// Reply is the JSON body of /login, /app and /logout.
type Reply struct {
	Pod      string `json:"pod"`
	Version  string `json:"version"`
	Session  string `json:"session,omitempty"`
	User     string `json:"user,omitempty"`
	Requests int    `json:"requests,omitempty"`
	Error    string `json:"error,omitempty"`
}

// New returns an App.
func New(cfg Config) *App {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Minute
	}
	return &App{cfg: cfg, sessions: map[string]*session{}}
}

// SetReady flips the readiness endpoint.
func (a *App) SetReady(ready bool) { a.notReady.Store(!ready) }

// Count is the number of live (not expired) sessions.
func (a *App) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked()
	return len(a.sessions)
}

func (a *App) expireLocked() {
	now := a.cfg.Now()
	for id, s := range a.sessions {
		if now.Sub(s.lastSeen) >= a.cfg.IdleTimeout {
			delete(a.sessions, id)
		}
	}
}

// Handler returns the HTTP routes.
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", a.login)
	mux.HandleFunc("/app/", a.app)
	mux.HandleFunc("POST /logout", a.logout)
	mux.HandleFunc("GET /sessions", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d\n", a.Count())
	})
	mux.HandleFunc("GET /actuator/metrics/tomcat.sessions.active.current", a.actuator)
	mux.HandleFunc("GET /metrics", a.metrics)
	mux.HandleFunc("GET /manager/text/list", a.managerList)
	mux.HandleFunc("GET /manager/text/sessions", a.managerSessions)
	mux.HandleFunc("GET /drain", func(w http.ResponseWriter, r *http.Request) {
		if n := a.Count(); n > 0 {
			fmt.Fprintf(w, "DRAINING %d\n", n)
			return
		}
		fmt.Fprintln(w, "IDLE")
	})
	// A test flips readiness from outside, as an app whose readiness
	// fails for its own reasons (a dependency down, shutdown begun).
	mux.HandleFunc("POST /admin/ready", func(w http.ResponseWriter, r *http.Request) {
		a.SetReady(r.URL.Query().Get("ready") != "false")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		if a.notReady.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

func (a *App) reply(w http.ResponseWriter, status int, r Reply) {
	a.served.Add(1)
	r.Pod, r.Version = a.cfg.Pod, a.cfg.Version
	w.Header().Set("X-Pod", a.cfg.Pod)
	w.Header().Set("X-Version", a.cfg.Version)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(r)
}

func (a *App) login(w http.ResponseWriter, r *http.Request) {
	user := r.URL.Query().Get("user")
	if user == "" {
		user = "anonymous"
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	// Tomcat's jvmRoute form: <id>.<route>. Load balancers that stick on
	// JSESSIONID learn the server from the Set-Cookie.
	id := strings.ToUpper(hex.EncodeToString(b)) + "." + a.cfg.Pod
	now := a.cfg.Now()
	a.mu.Lock()
	a.sessions[id] = &session{id: id, user: user, created: now, lastSeen: now}
	a.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: id, Path: "/", HttpOnly: true})
	a.reply(w, http.StatusOK, Reply{Session: id, User: user})
}

func (a *App) find(r *http.Request) *session {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked()
	s := a.sessions[c.Value]
	if s != nil {
		s.lastSeen = a.cfg.Now()
		s.requests++
	}
	return s
}

func (a *App) app(w http.ResponseWriter, r *http.Request) {
	s := a.find(r)
	if s == nil {
		a.reply(w, http.StatusUnauthorized, Reply{Error: "no such session on this pod"})
		return
	}
	a.reply(w, http.StatusOK, Reply{Session: s.id, User: s.user, Requests: s.requests})
}

func (a *App) logout(w http.ResponseWriter, r *http.Request) {
	s := a.find(r)
	if s == nil {
		a.reply(w, http.StatusUnauthorized, Reply{Error: "no such session on this pod"})
		return
	}
	a.mu.Lock()
	delete(a.sessions, s.id)
	a.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1})
	a.reply(w, http.StatusOK, Reply{Session: s.id, User: s.user})
}

func (a *App) actuator(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/vnd.spring-boot.actuator.v3+json")
	fmt.Fprintf(w, `{"name":"tomcat.sessions.active.current","baseUnit":"sessions","measurements":[{"statistic":"VALUE","value":%d.0}],"availableTags":[]}`, a.Count())
}

func (a *App) metrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	fmt.Fprintf(w, "# HELP tomcat_sessions_active_current_sessions  \n# TYPE tomcat_sessions_active_current_sessions gauge\n")
	fmt.Fprintf(w, "tomcat_sessions_active_current_sessions{name=\"app\",pod=%q} %d.0\n", a.cfg.Pod, a.Count())
	fmt.Fprintf(w, "# HELP sessionapp_requests_total Requests answered.\n# TYPE sessionapp_requests_total counter\n")
	fmt.Fprintf(w, "sessionapp_requests_total %d\n", a.served.Load())
}

func (a *App) managerList(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "OK - Listed applications for virtual host [localhost]")
	fmt.Fprintln(w, "/:running:0:ROOT")
	fmt.Fprintln(w, "/manager:running:1:manager")
	fmt.Fprintf(w, "/app:running:%d:app##%s\n", a.Count(), a.cfg.Version)
}

// managerSessions writes the idle histogram as Tomcat's ManagerServlet
// does: buckets of one interval (timeout/60 minutes, at least 1), the last
// one open-ended.
func (a *App) managerSessions(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	path := r.URL.Query().Get("path")
	old := r.URL.Query().Get("wording") == "old"
	if path != "/app" {
		fmt.Fprintf(w, "FAIL - No context exists named [%s]\n", path)
		return
	}
	timeout := int(a.cfg.IdleTimeout / time.Minute)
	interval, buckets := 1, 60
	if timeout > 0 {
		interval = (timeout + 59) / 60
		buckets = (timeout + interval - 1) / interval
	}
	counts := make([]int, buckets+1)
	now := a.cfg.Now()
	a.mu.Lock()
	a.expireLocked()
	for _, s := range a.sessions {
		i := int(now.Sub(s.lastSeen)/time.Minute) / interval
		counts[min(i, buckets)]++
	}
	a.mu.Unlock()
	line := func(label string, n int) {
		if old {
			fmt.Fprintf(w, "%s minutes: %d sessions\n", label, n)
		} else {
			fmt.Fprintf(w, "Inactive for [%s] minutes: [%d] sessions\n", label, n)
		}
	}
	if old {
		fmt.Fprintf(w, "OK - Session information for application at context path %s\n", path)
		fmt.Fprintf(w, "Default maximum session inactive interval %d minutes\n", timeout)
	} else {
		fmt.Fprintf(w, "OK - Session information for application at context path [%s]\n", path)
		fmt.Fprintf(w, "Default maximum session inactive interval is [%d] minutes\n", timeout)
	}
	if counts[0] > 0 {
		line(fmt.Sprintf("<%d", interval), counts[0])
	}
	for i := 1; i < buckets; i++ {
		if counts[i] > 0 {
			line(fmt.Sprintf("%d - <%d", i*interval, (i+1)*interval), counts[i])
		}
	}
	if counts[buckets] > 0 {
		line(fmt.Sprintf(">=%d", buckets*interval), counts[buckets])
	}
}

// Users lists the users with live sessions, sorted (for tests and the demo).
func (a *App) Users() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked()
	var out []string
	for _, s := range a.sessions {
		out = append(out, s.user)
	}
	sort.Strings(out)
	return out
}
