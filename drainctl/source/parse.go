// Package source reads an application's session count: it fetches the
// count endpoint (with credentials from files or environment variables) and
// parses its body in one of the formats drainctl knows. Parsers are pure
// functions of the body and the options, and never panic on any input.
package source

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
)

// Reading is one parsed count.
type Reading struct {
	// Count is the number of sessions left. For the match format it is 1
	// while the body matches the pattern and 0 once it does not.
	Count float64
	// Format is the format the body was parsed as: with --format auto, the
	// one detected.
	Format string
}

// Parse reads the count from body in the format s.Format names; with
// FormatAuto it detects the format first.
func Parse(body []byte, s params.Source) (Reading, error) {
	format := s.Format
	if format == "" || format == api.FormatAuto {
		var err error
		if format, err = Detect(body, s); err != nil {
			return Reading{}, err
		}
	}
	var n float64
	var err error
	switch format {
	case api.FormatNumber:
		n, err = ParseNumber(body)
	case api.FormatJSON:
		path := s.JSONPath
		if path == "" {
			path = actuatorPath
		}
		n, err = ParseJSON(body, path)
	case api.FormatPrometheus:
		metric := s.Metric
		if metric == "" {
			metric = defaultMetric
		}
		n, err = ParsePrometheus(body, metric)
	case api.FormatTomcatList:
		n, err = ParseTomcatList(body, s.Context)
	case api.FormatTomcatSessions:
		n, err = ParseTomcatSessions(body, s.IdleBelow)
	case api.FormatMatch:
		var draining bool
		draining, err = ParseMatch(body, s.Pattern)
		if draining {
			n = 1
		}
	default:
		return Reading{}, fmt.Errorf("unknown format %q; want one of %s", format, strings.Join(api.Formats(), "|"))
	}
	if err != nil {
		return Reading{Format: format}, fmt.Errorf("parsing the body as %s: %w", format, err)
	}
	return Reading{Count: n, Format: format}, nil
}

// actuatorPath is where Spring Boot's actuator metric endpoint
// (/actuator/metrics/tomcat.sessions.active.current) holds its value.
const actuatorPath = "measurements.0.value"

var (
	tomcatListHeader     = []byte("OK - Listed applications")
	tomcatSessionsHeader = []byte("OK - Session information")
)

// Detect names the format of body, for --format auto:
//   - Tomcat manager text, by its first line;
//   - JSON, by its first character ({ or [), read at --json-path or else
//     at the Spring Boot actuator's measurements.0.value;
//   - a plain number;
//   - Prometheus text, when --metric is given or the body parses as
//     Prometheus text and holds a tomcat_sessions_active_current_sessions
//     series;
//   - match, when --pattern is given.
func Detect(body []byte, s params.Source) (string, error) {
	trimmed := bytes.TrimSpace(body)
	switch {
	case bytes.HasPrefix(trimmed, tomcatSessionsHeader):
		return api.FormatTomcatSessions, nil
	case bytes.HasPrefix(trimmed, tomcatListHeader):
		return api.FormatTomcatList, nil
	case len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '['):
		return api.FormatJSON, nil
	}
	if _, err := ParseNumber(trimmed); err == nil {
		return api.FormatNumber, nil
	}
	if s.Metric != "" {
		return api.FormatPrometheus, nil
	}
	if _, err := ParsePrometheus(body, defaultMetric); err == nil {
		return api.FormatPrometheus, nil
	}
	if s.Pattern != "" {
		return api.FormatMatch, nil
	}
	return "", errors.New("cannot tell the body's format (not a number, JSON, Prometheus text with " + defaultMetric +
		", nor Tomcat manager text); set --format, or --pattern for a drain.sh-style keyword")
}

// defaultMetric is the session gauge Micrometer exports for Tomcat.
const defaultMetric = "tomcat_sessions_active_current_sessions"

// ParseNumber reads a body that is a single non-negative number.
func ParseNumber(body []byte) (float64, error) {
	s := string(bytes.TrimSpace(body))
	if s == "" {
		return 0, errors.New("empty body; want a number")
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("body %q is not a number", clip(s))
	}
	return checkCount(n)
}

func checkCount(n float64) (float64, error) {
	if math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
		return 0, fmt.Errorf("count %v is not a number of 0 or more", n)
	}
	return n, nil
}

// ParseJSON reads the number at a dot path (numeric parts index arrays) in a
// JSON body. The value may be a JSON number or a string holding one.
func ParseJSON(body []byte, path string) (float64, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return 0, fmt.Errorf("invalid JSON: %w", err)
	}
	if dec.More() {
		return 0, errors.New("invalid JSON: more than one value")
	}
	at := "$"
	for _, part := range strings.Split(path, ".") {
		if part == "" {
			return 0, fmt.Errorf("json path %q has an empty part", path)
		}
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[part]
			if !ok {
				return 0, fmt.Errorf("no key %q at %s", part, at)
			}
			v = next
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil {
				return 0, fmt.Errorf("%s is an array; %q is not an index", at, part)
			}
			if i < 0 || i >= len(x) {
				return 0, fmt.Errorf("index %d out of range at %s (length %d)", i, at, len(x))
			}
			v = x[i]
		default:
			return 0, fmt.Errorf("%s is not an object or array; cannot take %q", at, part)
		}
		at += "." + part
	}
	switch x := v.(type) {
	case json.Number:
		n, err := x.Float64()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", at, err)
		}
		return checkCount(n)
	case string:
		n, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, fmt.Errorf("%s is the string %q, not a number", at, clip(x))
		}
		return checkCount(n)
	default:
		return 0, fmt.Errorf("%s is not a number", at)
	}
}

// ParsePrometheus sums the samples of the series matching selector (see
// params.ParseMetricSelector) in a Prometheus text exposition, parsed with
// the Prometheus project's own text parser. Gauges, counters and untyped
// series count; a metric present with no matching series counts 0; an
// absent metric is an error (the wrong name would otherwise read as
// drained).
func ParsePrometheus(body []byte, selector string) (float64, error) {
	sel, err := params.ParseMetricSelector(selector)
	if err != nil {
		return 0, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("invalid Prometheus text: %w", err)
	}
	fam, ok := families[sel.Name]
	if !ok {
		return 0, fmt.Errorf("no metric %s in the body", sel.Name)
	}
	var sum float64
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for _, mt := range sel.Matchers {
			if !mt.Matches(labels[mt.Name]) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		default:
			return 0, fmt.Errorf("metric %s is a %s; want a gauge, counter or untyped series", sel.Name, fam.GetType())
		}
	}
	return checkCount(sum)
}

// ParseTomcatList reads the session field of Tomcat manager's
// /manager/text/list:
//
//	OK - Listed applications for virtual host [localhost]
//	/:running:0:ROOT
//	/app:running:12:app##2
//
// Lines are path:state:sessions:docbase; parallel deployments (app##1,
// app##2) share a path and are summed. An empty context sums every
// application but /manager and /host-manager.
func ParseTomcatList(body []byte, context string) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 4096), len(body)+1)
	first := true
	found := false
	var sum float64
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if first {
			first = false
			if !strings.HasPrefix(line, string(tomcatListHeader)) {
				return 0, fmt.Errorf("first line %q is not %q", clip(line), string(tomcatListHeader)+"...")
			}
			continue
		}
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 4)
		if len(parts) < 3 {
			return 0, fmt.Errorf("line %q is not path:state:sessions:name", clip(line))
		}
		path := parts[0]
		if context == "" && (path == "/manager" || path == "/host-manager") {
			continue
		}
		if context != "" && path != context {
			continue
		}
		n, err := strconv.ParseUint(parts[2], 10, 63)
		if err != nil {
			return 0, fmt.Errorf("line %q: sessions %q is not a whole number", clip(line), clip(parts[2]))
		}
		found = true
		sum += float64(n)
	}
	if first {
		return 0, errors.New("empty body")
	}
	if !found && context != "" {
		return 0, fmt.Errorf("no application at context path %q", context)
	}
	return sum, nil
}

// A histogram line of /manager/text/sessions, in both wordings:
//
//	<1 minutes: 1 sessions                        (up to Tomcat 9.0.16)
//	1 - <2 minutes: 3 sessions
//	>=30 minutes: 2 sessions
//	Inactive for [<1] minutes: [1] sessions       (9.0.17 and later)
//	Inactive for [1 - <2] minutes: [3] sessions
var (
	sessionLineRE = regexp.MustCompile(`^(?:Inactive for )?\[?(<\d+|\d+ - <\d+|>=\d+)\]? minutes: \[?(\d+)\]? sessions$`)
	expiredLineRE = regexp.MustCompile(`(?i)expired`)
	unlimitedRE   = regexp.MustCompile(`(?i)unlimited|never expire`)
	numberRE      = regexp.MustCompile(`\d+`)
)

// ParseTomcatSessions reads Tomcat manager's /manager/text/sessions idle
// histogram (both the bracketed 9.0.17+ wording and the older one) and sums
// its buckets. With idleBelow > 0 only buckets of sessions last active less
// than idleBelow ago count: a bucket "a - <b minutes" counts when b minutes
// ≤ idleBelow, "<b" likewise, ">=a" never. Sessions that never expire always
// count; lines of sessions just expired (the expire command) never do.
func ParseTomcatSessions(body []byte, idleBelow time.Duration) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 4096), len(body)+1)
	first := true
	var sum float64
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if first {
			first = false
			if !strings.HasPrefix(line, string(tomcatSessionsHeader)) {
				return 0, fmt.Errorf("first line %q is not %q", clip(line), string(tomcatSessionsHeader)+"...")
			}
			continue
		}
		switch {
		case line == "", strings.HasPrefix(line, "Default maximum session inactive interval"):
			continue
		case expiredLineRE.MatchString(line):
			continue
		case unlimitedRE.MatchString(line):
			n, err := strconv.ParseUint(numberRE.FindString(line), 10, 63)
			if err != nil {
				return 0, fmt.Errorf("line %q has no session count", clip(line))
			}
			sum += float64(n)
			continue
		}
		m := sessionLineRE.FindStringSubmatch(line)
		if m == nil {
			return 0, fmt.Errorf("line %q is not a session histogram line", clip(line))
		}
		n, err := strconv.ParseUint(m[2], 10, 63)
		if err != nil {
			return 0, fmt.Errorf("line %q: bad session count", clip(line))
		}
		if idleBelow > 0 && !bucketBelow(m[1], idleBelow) {
			continue
		}
		sum += float64(n)
	}
	if first {
		return 0, errors.New("empty body")
	}
	return sum, nil
}

// bucketBelow reports whether every session of a bucket label ("<1",
// "3 - <4", ">=30") was active less than limit ago.
func bucketBelow(label string, limit time.Duration) bool {
	if strings.HasPrefix(label, ">=") {
		return false
	}
	i := strings.LastIndexByte(label, '<')
	upper, err := strconv.ParseInt(label[i+1:], 10, 64)
	if err != nil || upper > int64(math.MaxInt64/time.Minute) {
		return false
	}
	return time.Duration(upper)*time.Minute <= limit
}

// ParseMatch reports whether body matches pattern (case-insensitive), as
// drain.sh's `grep -i` does: true means still draining.
func ParseMatch(body []byte, pattern string) (bool, error) {
	if pattern == "" {
		return false, errors.New("no pattern; set --pattern")
	}
	re, err := params.CompilePattern(pattern)
	if err != nil {
		return false, fmt.Errorf("pattern %.80q %w", pattern, err)
	}
	return re.Match(body), nil
}

func clip(s string) string {
	const max = 80
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
