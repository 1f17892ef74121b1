package api

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Parameter names: each is a flag of `drainctl wait` (without the dashes)
// and, for the Annotated ones, the annotation Prefix + name.
const (
	ParamURL              = "url"
	ParamFormat           = "format"
	ParamJSONPath         = "json-path"
	ParamMetric           = "metric"
	ParamContext          = "context"
	ParamIdleBelow        = "idle-below"
	ParamPattern          = "pattern"
	ParamTarget           = "target"
	ParamMinWait          = "min-wait"
	ParamMaxWait          = "max-wait"
	ParamInterval         = "interval"
	ParamRequestTimeout   = "request-timeout"
	ParamMaxBodyBytes     = "max-body-bytes"
	ParamUnreachableLimit = "unreachable-limit"
	ParamBasicAuthFile    = "basic-auth-file"
	ParamBasicAuthEnv     = "basic-auth-env"
	ParamBearerTokenFile  = "bearer-token-file"
	ParamBearerTokenEnv   = "bearer-token-env"
	ParamHeaderFile       = "header-file"
	ParamInsecureTLS      = "insecure-skip-tls-verify"
	ParamLogFormat        = "log-format"
	// Set by the webhook, not by annotations.
	ParamPodinfo       = "podinfo"
	ParamLogFile       = "log-file"
	ParamPreSleep      = "pre-sleep"
	ParamPreHTTPGet    = "pre-http-get"
	ParamPreHTTPHeader = "pre-http-header"
)

// Formats of the session-count endpoint (ParamFormat).
const (
	FormatAuto           = "auto"
	FormatNumber         = "number"
	FormatJSON           = "json"
	FormatPrometheus     = "prometheus"
	FormatTomcatList     = "tomcat-list"
	FormatTomcatSessions = "tomcat-sessions"
	FormatMatch          = "match"
)

// Formats lists every accepted format.
func Formats() []string {
	return []string{FormatAuto, FormatNumber, FormatJSON, FormatPrometheus, FormatTomcatList, FormatTomcatSessions, FormatMatch}
}

// Log formats (ParamLogFormat).
const (
	LogText = "text"
	LogJSON = "json"
)

// Defaults.
const (
	DefaultMinWait          = 10 * time.Second
	DefaultMaxWait          = time.Hour
	DefaultInterval         = 10 * time.Second
	DefaultRequestTimeout   = 5 * time.Second
	DefaultMaxBodyBytes     = 1 << 20
	DefaultUnreachableLimit = 6
	// PreHTTPGetTimeout bounds the pod's own httpGet preStop call, so that
	// the grace period can count it.
	PreHTTPGetTimeout = 30 * time.Second
)

// Param is one parameter of `drainctl wait`.
type Param struct {
	// Name is the flag's name without the dashes.
	Name string
	// Annotated: users set it with the annotation Prefix + Name on the pod
	// (its template) or its Namespace; otherwise only the webhook sets it.
	Annotated bool
	// Default is the default as drainctl prints it; "" for none.
	Default string
	// Usage is the flag's help: a `quoted` word names the value's form.
	Usage string
}

// Annotation is the parameter's annotation ("" when it has none).
func (p Param) Annotation() string {
	if !p.Annotated {
		return ""
	}
	return Prefix + p.Name
}

// Params lists the parameters of `drainctl wait`, the annotated ones
// first, in the order the reference documents them. drainctl's flag set
// is bound from it (api/params), and a test checks that each default here
// is the flag's. The slice is the caller's.
func Params() []Param { return slices.Clone(table) }

// table is the parameter table, built once: the webhook reads it for
// every pod it admits.
var table = buildTable()

func buildTable() []Param {
	d := func(x time.Duration) string { return x.String() }
	return []Param{
		{ParamURL, true, "", "session-count `URL`, normally http://localhost:PORT/... (the pod itself); empty: a timed drain of --max-wait"},
		{ParamFormat, true, FormatAuto, "body `format`: " + strings.Join(Formats(), "|")},
		{ParamJSONPath, true, "", "json: dot `path` to the count, numeric indexes for arrays (e.g. measurements.0.value)"},
		{ParamMetric, true, "", "prometheus: `metric` name with optional label matchers, e.g. 'tomcat_sessions_active_current_sessions{name=\"app\"}'; matching series are summed"},
		{ParamContext, true, "", "tomcat-list: context `path` of the application (ROOT is /); empty sums all but /manager and /host-manager"},
		{ParamIdleBelow, true, d(0), "tomcat-sessions: count only sessions active within this `duration` (e.g. 30m); 0 counts all"},
		{ParamPattern, true, "", "match: still draining while the body matches this case-insensitive `regexp` (e.g. DRAINING)"},
		{ParamTarget, true, "0", "drained when the count is at or below this `number`"},
		{ParamMinWait, true, d(DefaultMinWait), "never end drained before this `duration`, so the load balancer's drain takes effect first"},
		{ParamMaxWait, true, d(DefaultMaxWait), "give up waiting after this `duration`"},
		{ParamInterval, true, d(DefaultInterval), "`duration` between polls (with ±10% jitter)"},
		{ParamRequestTimeout, true, d(DefaultRequestTimeout), "timeout of one request (`duration`)"},
		{ParamMaxBodyBytes, true, strconv.Itoa(DefaultMaxBodyBytes), "largest response body read, in `bytes`"},
		{ParamUnreachableLimit, true, strconv.Itoa(DefaultUnreachableLimit), "end after this many consecutive failed polls (`count`): the app is gone or hung"},
		{ParamBasicAuthFile, true, "", "`file` holding user:password for basic auth"},
		{ParamBasicAuthEnv, true, "", "environment `variable` holding user:password for basic auth"},
		{ParamBearerTokenFile, true, "", "`file` holding a bearer token"},
		{ParamBearerTokenEnv, true, "", "environment `variable` holding a bearer token"},
		{ParamHeaderFile, true, "", "`file` of extra request headers, one 'Name: value' a line"},
		{ParamInsecureTLS, true, "false", "do not verify the endpoint's TLS certificate (https on localhost with a self-signed certificate)"},
		{ParamLogFormat, true, LogText, "log `format`: " + LogText + "|" + LogJSON},
		{ParamPodinfo, false, "", "downward-API annotations `file`: " + AnnotationRelease + " ends the drain, a shorter " + AnnotationMaxWait + " shortens it"},
		{ParamPreSleep, false, d(0), "sleep this `duration` before the drain: the pod's own preStop sleep, kept by the webhook"},
		{ParamPreHTTPGet, false, "", "GET this `URL` before the drain (at most " + PreHTTPGetTimeout.String() + ", TLS not verified, as the kubelet calls it): the pod's own preStop httpGet, kept by the webhook"},
		{ParamPreHTTPHeader, false, "", "`'Name: value'` header of the --pre-http-get request; repeat it for more"},
		{ParamLogFile, false, "", "log to this `file` (default: the stdout of the container's main process — PID 1, or with shareProcessNamespace the oldest process of drainctl's own cgroup — when writable, else stderr)"},
	}
}

// Lookup is the parameter named name.
func Lookup(name string) (Param, bool) {
	for _, p := range table {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

// AnnotatedParams are the parameters users set by annotation. The slice
// is the caller's.
func AnnotatedParams() []Param { return slices.Clone(annotated) }

// annotated is table's annotated part, built once.
var annotated = slices.DeleteFunc(slices.Clone(table), func(p Param) bool { return !p.Annotated })
