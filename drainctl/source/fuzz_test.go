package source

import (
	"strings"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
)

// The fuzzers check that no body makes a parser panic or return a count
// that is negative, NaN or infinite. Seeds are in testdata/fuzz.

func checkCountOK(t *testing.T, n float64, err error) {
	if err == nil && (n < 0 || n != n || n > 1e308) {
		t.Fatalf("accepted an impossible count %v", n)
	}
}

func FuzzParseNumber(f *testing.F) {
	f.Add([]byte("42"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseNumber(b)
		checkCountOK(t, n, err)
	})
}

func FuzzParseJSON(f *testing.F) {
	f.Add([]byte(actuator), "measurements.0.value")
	f.Fuzz(func(t *testing.T, b []byte, path string) {
		n, err := ParseJSON(b, path)
		checkCountOK(t, n, err)
	})
}

func FuzzParsePrometheus(f *testing.F) {
	f.Add([]byte(promText), `tomcat_sessions_active_current_sessions{name="app"}`)
	f.Fuzz(func(t *testing.T, b []byte, sel string) {
		n, err := ParsePrometheus(b, sel)
		checkCountOK(t, n, err)
	})
}

func FuzzParseTomcatList(f *testing.F) {
	f.Add([]byte(tomcatListVersioned), "/app")
	f.Fuzz(func(t *testing.T, b []byte, ctx string) {
		n, err := ParseTomcatList(b, ctx)
		checkCountOK(t, n, err)
	})
}

func FuzzParseTomcatSessions(f *testing.F) {
	f.Add([]byte(tomcatSessionsNew), int64(30*time.Minute))
	f.Fuzz(func(t *testing.T, b []byte, idle int64) {
		n, err := ParseTomcatSessions(b, time.Duration(idle))
		checkCountOK(t, n, err)
	})
}

func FuzzParseAuto(f *testing.F) {
	f.Add([]byte(tomcatSessionsOld))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b, params.Source{Format: api.FormatAuto})
		checkCountOK(t, r.Count, err)
	})
}

func FuzzMetricSelector(f *testing.F) {
	f.Add(`m{a="b",c!="d",e=~"f.*",g!~"h"}`)
	f.Add(`m{a=~"` + strings.Repeat(`\pL{1000}`, 100) + `"}`)
	f.Add("m{" + strings.Repeat(`a="b",`, 20) + "}")
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := params.ParseMetricSelector(s)
		if err == nil && sel.Name == "" {
			t.Fatalf("accepted %q with no metric name", s)
		}
		if err == nil && (len(s) > api.MaxValueLength || len(sel.Matchers) > api.MaxMetricMatchers) {
			t.Fatalf("accepted %d bytes, %d matchers: past the bounds", len(s), len(sel.Matchers))
		}
	})
}
