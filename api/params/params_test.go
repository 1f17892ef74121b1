package params

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/stickydrain/stickydrain/internal/cmdline/cmdlinetest"
)

// TestArgsRoundTrip is the promise the webhook relies on: what Args writes,
// drainctl parses back into the same parameters.
func TestArgsRoundTrip(t *testing.T) {
	w := NewWait()
	fs := w.FlagSet()
	for name, v := range map[string]string{
		FlagURL: "http://localhost:8080/manager/text/list", FlagFormat: FormatTomcatList, FlagContext: "/app",
		FlagMaxWait: "12h", FlagMinWait: "30s", FlagInterval: "15s", FlagTarget: "2",
		FlagMetric: `m{a="b c"}`, FlagPattern: "DRAIN(ING)?", FlagIdleBelow: "30m",
		FlagPodinfo: "/etc/podinfo/annotations", FlagUnreachableLimit: "9", FlagBasicAuthEnv: "MANAGER_AUTH",
		FlagInsecureTLS: "true", FlagMaxBodyBytes: "4096", FlagRequestTimeout: "2s", FlagLogFormat: LogJSON,
		FlagPreSleep: "5s", FlagPreHTTPGet: "http://localhost:8080/pre-stop?x=1",
	} {
		if err := fs.Set(name, v); err != nil {
			t.Fatalf("Set(%s, %q): %v", name, v, err)
		}
	}
	// A repeated flag, with commas in its values.
	for _, h := range []string{"X-Drain: yes, please", "Authorization: none"} {
		if err := fs.Set(FlagPreHTTPHeader, h); err != nil {
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
	if err := fs.Set(FlagMaxWait, "2h"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"--max-wait=2h0m0s"}, Args(fs)); diff != "" {
		t.Errorf("Args (-want +got):\n%s", diff)
	}
}

func TestFlagErrorsNameTheAcceptedForm(t *testing.T) {
	tests := []struct{ flag, value, want string }{
		{FlagMaxWait, "12", "want a number with a unit"},
		{FlagMinWait, "-1s", "negative"},
		{FlagInterval, "0s", "too short"},
		{FlagFormat, "xml", "auto|number|json|prometheus|tomcat-list|tomcat-sessions|match"},
		{FlagTarget, "-3", "number of 0 or more"},
		{FlagUnreachableLimit, "0", "at least 1"},
		{FlagMetric, "bad-name", "want NAME or NAME{label"},
		{FlagMetric, `m{a="b"`, "no closing }"},
		{FlagPattern, "(", "not a regular expression"},
		{FlagBasicAuthEnv, "user:pass", "never the secret"},
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
		{"refuses json without a path", func(w *Wait) { w.Format = FormatJSON }, "--format json needs --json-path"},
		{"refuses prometheus without a metric", func(w *Wait) { w.Format = FormatPrometheus }, "--format prometheus needs --metric"},
		{"refuses match without a pattern", func(w *Wait) { w.Format = FormatMatch }, "--format match needs --pattern"},
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
	FlagURL: "http://localhost:8080/sessions", FlagFormat: "json", FlagJSONPath: "measurements.0.value",
	FlagMetric: `tomcat_sessions_active_current_sessions{name="app"}`, FlagContext: "/app", FlagIdleBelow: "30m",
	FlagPattern: "DRAINING", FlagTarget: "2", FlagMinWait: "30s", FlagMaxWait: "12h", FlagInterval: "15s",
	FlagRequestTimeout: "2s", FlagMaxBodyBytes: "65536", FlagUnreachableLimit: "3", FlagPodinfo: "/etc/podinfo/annotations",
	FlagBasicAuthFile: "/etc/manager/credentials", FlagBasicAuthEnv: "MANAGER_AUTH", FlagBearerTokenFile: "/var/run/token",
	FlagBearerTokenEnv: "APP_TOKEN", FlagHeaderFile: "/etc/app/headers", FlagInsecureTLS: "true", FlagLogFormat: "json",
	FlagLogFile: "/var/log/drain.log", FlagPreSleep: "5s", FlagPreHTTPGet: "http://localhost:8080/shutdown",
	FlagPreHTTPHeader: "X-Drain: yes",
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
		FlagFormat:           {"xml", `"xml" is not one of auto|number|json`},
		FlagMaxWait:          {"forever", "want a number with a unit: 500ms, 10s, 30m, 12h"},
		FlagMinWait:          {"-1s", "want 0 or more"},
		FlagUnreachableLimit: {"0", "is not a whole number of at least 1"},
		FlagTarget:           {"-2", "is not a number of 0 or more"},
		FlagPattern:          {"(", "is not a regular expression"},
		FlagBasicAuthEnv:     {"user:pass", "is not an environment variable name"},
		FlagMetric:           {"a{b=", "metric"},
		FlagInsecureTLS:      {"maybe", "must be true or false"},
		FlagLogFormat:        {"xml", "is not one of text|json"},
	} {
		err := NewWait().FlagSet().Parse([]string{"--" + flag + "=" + tc[0]})
		if err == nil || !strings.Contains(err.Error(), `for "--`+flag+`" flag`) || !strings.Contains(err.Error(), tc[1]) {
			t.Errorf("--%s=%s: %v; want it naming --%s and %q", flag, tc[0], err, flag, tc[1])
		}
	}
}
