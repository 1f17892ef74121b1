package params

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/internal/cmdline/cmdlinetest"
)

// TestArgsRoundTrip is the promise the webhook relies on: what Args writes,
// drainctl parses back into the same parameters.
func TestArgsRoundTrip(t *testing.T) {
	w := NewWait()
	fs := w.FlagSet()
	for name, v := range map[string]string{
		api.ParamURL: "http://localhost:8080/manager/text/list", api.ParamFormat: api.FormatTomcatList, api.ParamContext: "/app",
		api.ParamMaxWait: "12h", api.ParamMinWait: "30s", api.ParamInterval: "15s", api.ParamTarget: "2",
		api.ParamMetric: `m{a="b c"}`, api.ParamPattern: "DRAIN(ING)?", api.ParamIdleBelow: "30m",
		api.ParamPodinfo: "/etc/podinfo/annotations", api.ParamUnreachableLimit: "9", api.ParamBasicAuthEnv: "MANAGER_AUTH",
		api.ParamInsecureTLS: "true", api.ParamMaxBodyBytes: "4096", api.ParamRequestTimeout: "2s", api.ParamLogFormat: api.LogJSON,
		api.ParamPreSleep: "5s", api.ParamPreHTTPGet: "http://localhost:8080/pre-stop?x=1",
	} {
		if err := fs.Set(name, v); err != nil {
			t.Fatalf("Set(%s, %q): %v", name, v, err)
		}
	}
	// A repeated flag, with commas in its values.
	for _, h := range []string{"X-Drain: yes, please", "Authorization: none"} {
		if err := fs.Set(api.ParamPreHTTPHeader, h); err != nil {
			t.Fatal(err)
		}
	}
	args := Args(fs)
	got := NewWait()
	if err := got.FlagSet().Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	if diff := cmp.Diff(w, got); diff != "" {
		t.Errorf("round trip (-set +parsed):\n%s", diff)
	}
	if again := Args(got.FlagSet()); len(again) != 0 {
		t.Errorf("a fresh flag set reports set flags: %q", again)
	}
}

func TestArgsOnlyCarriesWhatWasSet(t *testing.T) {
	w := NewWait()
	fs := w.FlagSet()
	if err := fs.Set(api.ParamMaxWait, "2h"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"--max-wait=2h0m0s"}, Args(fs)); diff != "" {
		t.Errorf("Args (-want +got):\n%s", diff)
	}
}

func TestFlagErrorsNameTheAcceptedForm(t *testing.T) {
	tests := []struct{ flag, value, want string }{
		{api.ParamMaxWait, "12", "want a number with a unit"},
		{api.ParamMinWait, "-1s", "negative"},
		{api.ParamInterval, "0s", "too short"},
		{api.ParamFormat, "xml", "auto|number|json|prometheus|tomcat-list|tomcat-sessions|match"},
		{api.ParamTarget, "-3", "number of 0 or more"},
		{api.ParamUnreachableLimit, "0", "at least 1"},
		{api.ParamMetric, "bad-name", "want NAME or NAME{label"},
		{api.ParamMetric, `m{a="b"`, "no closing }"},
		{api.ParamPattern, "(", "not a regular expression"},
		{api.ParamBasicAuthEnv, "user:pass", "never the secret"},
	}
	for _, tt := range tests {
		t.Run(tt.flag+"="+tt.value, func(t *testing.T) {
			err := NewWait().FlagSet().Set(tt.flag, tt.value)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Set(%s, %q) error = %v, want one containing %q", tt.flag, tt.value, err, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Wait)
		want string // "" means valid
	}{
		{"accepts the defaults", func(*Wait) {}, ""},
		{"refuses min-wait past max-wait", func(w *Wait) { w.MinWait, w.MaxWait = time.Hour, time.Minute }, "--min-wait 1h0m0s is longer than --max-wait 1m0s"},
		{"refuses a non-http URL", func(w *Wait) { w.URL = "ftp://localhost/x" }, "want an http:// or https:// URL"},
		{"refuses json without a path", func(w *Wait) { w.Format = api.FormatJSON }, "--format json needs --json-path"},
		{"refuses prometheus without a metric", func(w *Wait) { w.Format = api.FormatPrometheus }, "--format prometheus needs --metric"},
		{"refuses match without a pattern", func(w *Wait) { w.Format = api.FormatMatch }, "--format match needs --pattern"},
		{"refuses two basic-auth sources", func(w *Wait) { w.BasicAuthFile, w.BasicAuthEnv = "/f", "E" }, "give one"},
		{"refuses basic auth with a token", func(w *Wait) { w.BasicAuthFile, w.BearerTokenEnv = "/f", "E" }, "basic auth and a bearer token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWait()
			tt.mod(w)
			err := w.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestParseMetricSelector(t *testing.T) {
	sel, err := ParseMetricSelector(`tomcat_sessions{name="app", env!="dev",pod=~"web-.*"}`)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Name != "tomcat_sessions" || len(sel.Matchers) != 3 {
		t.Fatalf("got %+v", sel)
	}
	labels := map[string]string{"name": "app", "env": "prod", "pod": "web-1"}
	for _, m := range sel.Matchers {
		if !m.Matches(labels[m.Name]) {
			t.Errorf("matcher %s%s%q does not match %q", m.Name, m.Op, m.Value, labels[m.Name])
		}
	}
	if sel.Matchers[2].Matches("xweb-1") {
		t.Error("regexp matchers must be anchored")
	}
}

// examples holds a valid value of every flag of `drainctl wait`; a flag
// added without one fails TestEveryFlagInBothForms.
var examples = map[string]string{
	api.ParamURL: "http://localhost:8080/sessions", api.ParamFormat: "json", api.ParamJSONPath: "measurements.0.value",
	api.ParamMetric: `tomcat_sessions_active_current_sessions{name="app"}`, api.ParamContext: "/app", api.ParamIdleBelow: "30m",
	api.ParamPattern: "DRAINING", api.ParamTarget: "2", api.ParamMinWait: "30s", api.ParamMaxWait: "12h", api.ParamInterval: "15s",
	api.ParamRequestTimeout: "2s", api.ParamMaxBodyBytes: "65536", api.ParamUnreachableLimit: "3", api.ParamPodinfo: "/etc/podinfo/annotations",
	api.ParamBasicAuthFile: "/etc/manager/credentials", api.ParamBasicAuthEnv: "MANAGER_AUTH", api.ParamBearerTokenFile: "/var/run/token",
	api.ParamBearerTokenEnv: "APP_TOKEN", api.ParamHeaderFile: "/etc/app/headers", api.ParamInsecureTLS: "true", api.ParamLogFormat: "json",
	api.ParamLogFile: "/var/log/drain.log", api.ParamPreSleep: "5s", api.ParamPreHTTPGet: "http://localhost:8080/shutdown",
	api.ParamPreHTTPHeader: "X-Drain: yes",
}

// TestEveryFlagInBothForms: every flag takes `--flag value` and
// `--flag=value` alike, GNU style, and means the same.
func TestEveryFlagInBothForms(t *testing.T) {
	cmdlinetest.BothForms(t, func() *pflag.FlagSet { return NewWait().FlagSet() }, examples)
}

// TestBadValuesNameTheFlag: a bad value of each kind is refused with the
// flag's name and the accepted form.
func TestBadValuesNameTheFlag(t *testing.T) {
	for flag, tc := range map[string][2]string{
		api.ParamFormat:           {"xml", `"xml" is not one of auto|number|json`},
		api.ParamMaxWait:          {"forever", "want a number with a unit: 500ms, 10s, 30m, 12h"},
		api.ParamMinWait:          {"-1s", "want 0 or more"},
		api.ParamUnreachableLimit: {"0", "is not a whole number of at least 1"},
		api.ParamTarget:           {"-2", "is not a number of 0 or more"},
		api.ParamPattern:          {"(", "is not a regular expression"},
		api.ParamBasicAuthEnv:     {"user:pass", "is not an environment variable name"},
		api.ParamMetric:           {"a{b=", "metric"},
		api.ParamInsecureTLS:      {"maybe", "must be true or false"},
		api.ParamLogFormat:        {"xml", "is not one of text|json"},
	} {
		err := NewWait().FlagSet().Parse([]string{"--" + flag + "=" + tc[0]})
		if err == nil || !strings.Contains(err.Error(), `for "--`+flag+`" flag`) || !strings.Contains(err.Error(), tc[1]) {
			t.Errorf("--%s=%s: %v; want it naming --%s and %q", flag, tc[0], err, flag, tc[1])
		}
	}
}
