package source

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
)

const (
	tomcatListOld = "OK - Listed applications for virtual host localhost\n" +
		"/:running:0:ROOT\n/manager:running:6:manager\n/docs:running:0:docs\n/app:running:12:app\n"
	tomcatListVersioned = "OK - Listed applications for virtual host [localhost]\n" +
		"/:running:1:ROOT\n/manager:running:2:manager\n/app:running:3:app##001\n/app:running:5:app##002\n/shop:stopped:0:shop\n"
	tomcatSessionsOld = "OK - Session information for application at context path /app\n" +
		"Default maximum session inactive interval 30 minutes\n" +
		"<1 minutes: 4 sessions\n1 - <2 minutes: 3 sessions\n24 - <25 minutes: 2 sessions\n>=30 minutes: 1 sessions\n"
	tomcatSessionsNew = "OK - Session information for application at context path [/app]\n" +
		"Default maximum session inactive interval is [30] minutes\n" +
		"Inactive for [<1] minutes: [4] sessions\nInactive for [1 - <2] minutes: [3] sessions\n" +
		"Inactive for [24 - <25] minutes: [2] sessions\nInactive for [>=30] minutes: [1] sessions\n"
	tomcatSessionsEmptyNew = "OK - Session information for application at context path [/manager]\n" +
		"Default maximum session inactive interval is [30] minutes\n"
	tomcatExpired = "OK - Session information for application at context path /examples\n" +
		"Default maximum session inactive interval 30 minutes\n1 - <2 minutes: 1 sessions\n3 - <4 minutes: 1 sessions\n>0 minutes: 2 sessions were expired\n"
	actuator = `{"name":"tomcat.sessions.active.current","description":null,"baseUnit":"sessions",` +
		`"measurements":[{"statistic":"VALUE","value":7.0}],"availableTags":[]}`
	promText = "# HELP tomcat_sessions_active_current_sessions  \n" +
		"# TYPE tomcat_sessions_active_current_sessions gauge\n" +
		"tomcat_sessions_active_current_sessions{application=\"shop\",name=\"app\"} 5.0\n" +
		"tomcat_sessions_active_current_sessions{application=\"shop\",name=\"admin\"} 2.0\n" +
		"# TYPE http_requests_total counter\nhttp_requests_total{code=\"200\"} 1027\n"
	drainSh = "<html><body>status: DRAINING (3 sessions)</body></html>"
)

// TestCountFormats serves each body from a real HTTP server and reads it
// through the Client, as drainctl does.
func TestCountFormats(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		src    params.Source
		want   Reading
		errHas string
	}{
		{name: "reads a plain number", body: "42\n", src: params.Source{Format: api.FormatNumber}, want: Reading{42, api.FormatNumber}},
		{name: "reads zero as drained", body: "0", src: params.Source{Format: api.FormatNumber}, want: Reading{0, api.FormatNumber}},
		{name: "refuses a negative number", body: "-1", src: params.Source{Format: api.FormatNumber}, errHas: "0 or more"},
		{name: "refuses text as a number", body: "many", src: params.Source{Format: api.FormatNumber}, errHas: "not a number"},
		{name: "reads the Spring Boot actuator value", body: actuator, src: params.Source{Format: api.FormatJSON, JSONPath: "measurements.0.value"}, want: Reading{7, api.FormatJSON}},
		{name: "reads a nested JSON key", body: `{"sessions":{"active":"3"}}`, src: params.Source{Format: api.FormatJSON, JSONPath: "sessions.active"}, want: Reading{3, api.FormatJSON}},
		{name: "names the missing JSON key", body: `{"sessions":{}}`, src: params.Source{Format: api.FormatJSON, JSONPath: "sessions.active"}, errHas: `no key "active" at $.sessions`},
		{name: "names an out-of-range index", body: `{"m":[]}`, src: params.Source{Format: api.FormatJSON, JSONPath: "m.0"}, errHas: "index 0 out of range at $.m"},
		{name: "sums Prometheus series matching a label", body: promText, src: params.Source{Format: api.FormatPrometheus, Metric: `tomcat_sessions_active_current_sessions{name="app"}`}, want: Reading{5, api.FormatPrometheus}},
		{name: "sums every Prometheus series of a name", body: promText, src: params.Source{Format: api.FormatPrometheus, Metric: "tomcat_sessions_active_current_sessions"}, want: Reading{7, api.FormatPrometheus}},
		{name: "matches Prometheus labels by regexp", body: promText, src: params.Source{Format: api.FormatPrometheus, Metric: `tomcat_sessions_active_current_sessions{name=~"ad.*",application!="x"}`}, want: Reading{2, api.FormatPrometheus}},
		{name: "counts no matching Prometheus series as zero", body: promText, src: params.Source{Format: api.FormatPrometheus, Metric: `tomcat_sessions_active_current_sessions{name="none"}`}, want: Reading{0, api.FormatPrometheus}},
		{name: "refuses an absent Prometheus metric", body: promText, src: params.Source{Format: api.FormatPrometheus, Metric: "jetty_sessions"}, errHas: "no metric jetty_sessions"},
		{name: "reads a Tomcat list context", body: tomcatListOld, src: params.Source{Format: api.FormatTomcatList, Context: "/app"}, want: Reading{12, api.FormatTomcatList}},
		{name: "reads the Tomcat ROOT context", body: tomcatListVersioned, src: params.Source{Format: api.FormatTomcatList, Context: "/"}, want: Reading{1, api.FormatTomcatList}},
		{name: "sums parallel-deployed versions of a context", body: tomcatListVersioned, src: params.Source{Format: api.FormatTomcatList, Context: "/app"}, want: Reading{8, api.FormatTomcatList}},
		{name: "sums all but the managers without a context", body: tomcatListVersioned, src: params.Source{Format: api.FormatTomcatList}, want: Reading{9, api.FormatTomcatList}},
		{name: "refuses an unknown Tomcat context", body: tomcatListOld, src: params.Source{Format: api.FormatTomcatList, Context: "/nope"}, errHas: `no application at context path "/nope"`},
		{name: "sums the older sessions histogram", body: tomcatSessionsOld, src: params.Source{Format: api.FormatTomcatSessions}, want: Reading{10, api.FormatTomcatSessions}},
		{name: "sums the bracketed sessions histogram", body: tomcatSessionsNew, src: params.Source{Format: api.FormatTomcatSessions}, want: Reading{10, api.FormatTomcatSessions}},
		{name: "counts only recently active sessions (older wording)", body: tomcatSessionsOld, src: params.Source{Format: api.FormatTomcatSessions, IdleBelow: 2 * time.Minute}, want: Reading{7, api.FormatTomcatSessions}},
		{name: "counts only recently active sessions (bracketed wording)", body: tomcatSessionsNew, src: params.Source{Format: api.FormatTomcatSessions, IdleBelow: 25 * time.Minute}, want: Reading{9, api.FormatTomcatSessions}},
		{name: "reads an empty histogram as zero", body: tomcatSessionsEmptyNew, src: params.Source{Format: api.FormatTomcatSessions}, want: Reading{0, api.FormatTomcatSessions}},
		{name: "skips the expired-sessions line", body: tomcatExpired, src: params.Source{Format: api.FormatTomcatSessions}, want: Reading{2, api.FormatTomcatSessions}},
		{name: "is draining while the keyword matches", body: drainSh, src: params.Source{Format: api.FormatMatch, Pattern: "draining"}, want: Reading{1, api.FormatMatch}},
		{name: "is drained once the keyword is gone", body: "DONE", src: params.Source{Format: api.FormatMatch, Pattern: "DRAINING"}, want: Reading{0, api.FormatMatch}},
		{name: "detects a number", body: " 3 ", src: params.Source{Format: api.FormatAuto}, want: Reading{3, api.FormatNumber}},
		{name: "detects the actuator shape", body: actuator, src: params.Source{Format: api.FormatAuto}, want: Reading{7, api.FormatJSON}},
		{name: "detects Prometheus text by the Tomcat gauge", body: promText, src: params.Source{Format: api.FormatAuto}, want: Reading{7, api.FormatPrometheus}},
		{name: "detects a Tomcat list", body: tomcatListOld, src: params.Source{Format: api.FormatAuto, Context: "/app"}, want: Reading{12, api.FormatTomcatList}},
		{name: "detects a Tomcat sessions histogram", body: tomcatSessionsNew, src: params.Source{Format: api.FormatAuto}, want: Reading{10, api.FormatTomcatSessions}},
		{name: "detects a keyword body when a pattern is given", body: drainSh, src: params.Source{Format: api.FormatAuto, Pattern: "DRAINING"}, want: Reading{1, api.FormatMatch}},
		{name: "says it cannot detect an unknown body", body: "hello", src: params.Source{Format: api.FormatAuto}, errHas: "cannot tell the body's format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, tt.body)
			}))
			defer srv.Close()
			src := tt.src
			src.URL = srv.URL
			src.RequestTimeout = 2 * time.Second
			c, err := New(src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Count(context.Background())
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("Count() error = %v, want one containing %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("Count(): %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Count() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCountFailures(t *testing.T) {
	slow := make(chan struct{})
	defer close(slow)
	mux := http.NewServeMux()
	mux.HandleFunc("/503", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, strings.Repeat("1", 2048)) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-slow:
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	refused := httptest.NewServer(http.NotFoundHandler())
	refusedURL := refused.URL
	refused.Close()

	tests := []struct {
		name, url, errHas string
	}{
		{"reports a non-2xx status", srv.URL + "/503", "status 503"},
		{"refuses a body over the size limit", srv.URL + "/big", "larger than --max-body-bytes 1024"},
		{"times out a hung app", srv.URL + "/slow", "Timeout"},
		{"reports a refused connection", refusedURL, "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(params.Source{URL: tt.url, Format: api.FormatNumber, RequestTimeout: 300 * time.Millisecond, MaxBodyBytes: 1024})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Count(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("Count() error = %v, want one containing %q", err, tt.errHas)
			}
		})
	}
}

func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	basic := write("basic", "manager:s3cret\n")
	token := write("token", "tok-123\n")
	headers := write("headers", "# comment\nX-Tenant: blue\nX-Trace:  on \n")
	t.Setenv("DRAINCTL_TEST_BASIC", "env:pass")

	tests := []struct {
		name string
		src  params.Source
		want map[string]string
	}{
		{"sends basic auth from a file", params.Source{BasicAuthFile: basic}, map[string]string{"Authorization": "Basic bWFuYWdlcjpzM2NyZXQ="}},
		{"sends basic auth from the environment", params.Source{BasicAuthEnv: "DRAINCTL_TEST_BASIC"}, map[string]string{"Authorization": "Basic ZW52OnBhc3M="}},
		{"sends a bearer token from a file", params.Source{BearerTokenFile: token}, map[string]string{"Authorization": "Bearer tok-123"}},
		{"sends extra headers from a file", params.Source{HeaderFile: headers}, map[string]string{"X-Tenant": "blue", "X-Trace": "on"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]string{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k := range tt.want {
					got[k] = r.Header.Get(k)
				}
				fmt.Fprint(w, "0")
			}))
			defer srv.Close()
			src := tt.src
			src.URL, src.Format, src.RequestTimeout = srv.URL, api.FormatNumber, time.Second
			c, err := New(src)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Count(context.Background()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
		})
	}

	for name, src := range map[string]params.Source{
		"missing file":      {BasicAuthFile: filepath.Join(dir, "absent")},
		"unset variable":    {BearerTokenEnv: "DRAINCTL_TEST_UNSET"},
		"basic without ':'": {BasicAuthFile: token},
		"bad header line":   {HeaderFile: basic + "x"},
	} {
		if _, err := New(src); err == nil {
			t.Errorf("New with %s: no error", name)
		}
	}
}
