package sessionapp

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
	"github.com/stickydrain/stickydrain/drainctl/source"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newServer(t *testing.T) (*App, *httptest.Server, *clock) {
	clk := &clock{t: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
	app := New(Config{Pod: "web-1", Version: "v7", IdleTimeout: 30 * time.Minute, Now: clk.now})
	srv := httptest.NewServer(app.Handler())
	t.Cleanup(srv.Close)
	return app, srv, clk
}

func client(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar}
}

func do(t *testing.T, c *http.Client, method, url string) (int, Reply) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r Reply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("%s %s: body is not a Reply: %v", method, url, err)
	}
	if resp.Header.Get("X-Pod") != "web-1" || resp.Header.Get("X-Version") != "v7" {
		t.Errorf("%s %s: X-Pod %q X-Version %q", method, url, resp.Header.Get("X-Pod"), resp.Header.Get("X-Version"))
	}
	return resp.StatusCode, r
}

func TestSessionLifecycle(t *testing.T) {
	app, srv, clk := newServer(t)
	alice := client(t)

	code, r := do(t, alice, "POST", srv.URL+"/login?user=alice")
	if code != 200 || r.Pod != "web-1" || r.Version != "v7" || !strings.HasSuffix(r.Session, ".web-1") {
		t.Fatalf("login: %d %+v", code, r)
	}
	code, r = do(t, alice, "GET", srv.URL+"/app/cart")
	if code != 200 || r.User != "alice" || r.Requests != 1 {
		t.Fatalf("request in session: %d %+v", code, r)
	}
	if code, _ := do(t, client(t), "GET", srv.URL+"/app/cart"); code != http.StatusUnauthorized {
		t.Errorf("request without a session: %d, want 401", code)
	}
	if n := app.Count(); n != 1 {
		t.Errorf("Count = %d, want 1", n)
	}
	if code, _ := do(t, alice, "POST", srv.URL+"/logout"); code != 200 {
		t.Fatalf("logout: %d", code)
	}
	if code, _ := do(t, alice, "GET", srv.URL+"/app/cart"); code != http.StatusUnauthorized {
		t.Errorf("request after logout: %d, want 401", code)
	}

	bob := client(t)
	do(t, bob, "POST", srv.URL+"/login?user=bob")
	clk.add(29 * time.Minute)
	if code, _ := do(t, bob, "GET", srv.URL+"/app/"); code != 200 {
		t.Fatalf("request before idle expiry: %d", code)
	}
	clk.add(29 * time.Minute) // idle since the last request, not since login
	if n := app.Count(); n != 1 {
		t.Errorf("Count after 29m idle = %d, want 1", n)
	}
	clk.add(time.Minute)
	if n := app.Count(); n != 0 {
		t.Errorf("Count after 30m idle = %d, want 0 (expired)", n)
	}
}

// TestCountEndpointsReadByDrainctl checks every count endpoint with the
// parser drainctl itself uses, explicit and auto-detected.
func TestCountEndpointsReadByDrainctl(t *testing.T) {
	app, srv, clk := newServer(t)
	for _, u := range []string{"a", "b", "c"} {
		do(t, client(t), "POST", srv.URL+"/login?user="+u)
	}
	clk.add(10 * time.Minute)
	do(t, client(t), "POST", srv.URL+"/login?user=d") // active now; a, b, c idle 10m
	if diff := cmp.Diff([]string{"a", "b", "c", "d"}, app.Users()); diff != "" {
		t.Fatalf("users (-want +got):\n%s", diff)
	}

	tests := []struct {
		path string
		src  params.Source
		want float64
	}{
		{"/sessions", params.Source{Format: api.FormatNumber}, 4},
		{"/actuator/metrics/tomcat.sessions.active.current", params.Source{Format: api.FormatJSON, JSONPath: "measurements.0.value"}, 4},
		{"/metrics", params.Source{Format: api.FormatPrometheus, Metric: `tomcat_sessions_active_current_sessions{name="app"}`}, 4},
		{"/manager/text/list", params.Source{Format: api.FormatTomcatList, Context: "/app"}, 4},
		{"/manager/text/sessions?path=/app", params.Source{Format: api.FormatTomcatSessions}, 4},
		{"/manager/text/sessions?path=/app&wording=old", params.Source{Format: api.FormatTomcatSessions}, 4},
		{"/manager/text/sessions?path=/app", params.Source{Format: api.FormatTomcatSessions, IdleBelow: 5 * time.Minute}, 1},
		{"/manager/text/sessions?path=/app&wording=old", params.Source{Format: api.FormatTomcatSessions, IdleBelow: 5 * time.Minute}, 1},
		{"/drain", params.Source{Format: api.FormatMatch, Pattern: "DRAINING"}, 1},
		{"/sessions", params.Source{}, 4},
		{"/actuator/metrics/tomcat.sessions.active.current", params.Source{}, 4},
		{"/metrics", params.Source{}, 4},
		{"/manager/text/list", params.Source{Context: "/app"}, 4},
		{"/manager/text/sessions?path=/app", params.Source{}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.path+" "+tt.src.Format, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			src := tt.src
			if src.Format == "" {
				src.Format = api.FormatAuto
			}
			got, err := source.Parse(body, src)
			if err != nil {
				t.Fatalf("drainctl cannot read %s: %v\n%s", tt.path, err, body)
			}
			if got.Count != tt.want {
				t.Errorf("count %v, want %v\n%s", got.Count, tt.want, body)
			}
		})
	}

	// Once every session has ended, each endpoint reads as drained.
	clk.add(31 * time.Minute)
	resp, _ := http.Get(srv.URL + "/drain")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(body)) != "IDLE" {
		t.Errorf("/drain with no sessions = %q, want IDLE", body)
	}
}

func TestReadiness(t *testing.T) {
	app, srv, _ := newServer(t)
	get := func() int {
		resp, err := http.Get(srv.URL + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get(); c != 200 {
		t.Errorf("ready = %d", c)
	}
	app.SetReady(false)
	if c := get(); c != 503 {
		t.Errorf("after SetReady(false) = %d, want 503", c)
	}
}
