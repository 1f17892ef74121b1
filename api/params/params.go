// Package params binds the parameters of `drainctl wait` and `drainctl
// count` (api.Params: names, defaults, help) to flags, validates them, and
// writes the command line that carries them. The webhook builds the
// injected preStop command with this same package and drainctl parses it,
// so the flags one writes and the other reads cannot drift apart; it
// belongs to neither binary. It imports nothing from Kubernetes.
package params

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/stickydrain/stickydrain/api"
)

// Source says where and how to read the session count.
type Source struct {
	URL       string
	Format    string
	JSONPath  string
	Metric    string
	Context   string
	IdleBelow time.Duration
	Pattern   string

	RequestTimeout time.Duration
	MaxBodyBytes   int64
	InsecureTLS    bool

	// Credentials: each names a file or an environment variable inside the
	// container, never the secret itself.
	BasicAuthFile   string // "user:password"
	BasicAuthEnv    string
	BearerTokenFile string
	BearerTokenEnv  string
	HeaderFile      string // "Name: value" lines
}

// Wait is everything `drainctl wait` takes.
type Wait struct {
	Source
	Target           float64
	MinWait          time.Duration
	MaxWait          time.Duration
	Interval         time.Duration
	UnreachableLimit int
	Podinfo          string
	LogFormat        string
	LogFile          string
	// The pod's own preStop hook, run before the drain: a sleep, or an
	// HTTP GET (with "Name: value" headers) bounded by PreHTTPGetTimeout.
	PreSleep       time.Duration
	PreHTTPGet     string
	PreHTTPHeaders []string
}

// NewWait returns the defaults.
func NewWait() *Wait {
	return &Wait{
		Source: Source{
			Format:         api.FormatAuto,
			RequestTimeout: api.DefaultRequestTimeout,
			MaxBodyBytes:   api.DefaultMaxBodyBytes,
		},
		MinWait:          api.DefaultMinWait,
		MaxWait:          api.DefaultMaxWait,
		Interval:         api.DefaultInterval,
		UnreachableLimit: api.DefaultUnreachableLimit,
		LogFormat:        api.LogText,
	}
}

// usages are the flags' help texts, from api.Params, built once: the
// webhook binds a flag set for every pod it admits.
var usages = sync.OnceValue(func() map[string]string {
	u := map[string]string{}
	for _, p := range api.Params() {
		u[p.Name] = p.Usage
	}
	return u
})

// BindSource registers the source flags on fs.
func (s *Source) BindSource(fs *pflag.FlagSet) { s.bindSource(fs, usages()) }

func (s *Source) bindSource(fs *pflag.FlagSet, u map[string]string) {
	fs.Var(text{&s.URL}, api.ParamURL, u[api.ParamURL])
	fs.Var(choice{&s.Format, api.Formats()}, api.ParamFormat, u[api.ParamFormat])
	fs.Var(text{&s.JSONPath}, api.ParamJSONPath, u[api.ParamJSONPath])
	fs.Var(metricValue{&s.Metric}, api.ParamMetric, u[api.ParamMetric])
	fs.Var(text{&s.Context}, api.ParamContext, u[api.ParamContext])
	fs.Var(durationValue{&s.IdleBelow, 0, api.MaxDuration}, api.ParamIdleBelow, u[api.ParamIdleBelow])
	fs.Var(regexpValue{&s.Pattern}, api.ParamPattern, u[api.ParamPattern])
	fs.Var(durationValue{&s.RequestTimeout, time.Millisecond, api.MaxDuration}, api.ParamRequestTimeout, u[api.ParamRequestTimeout])
	fs.Var(intValue[int64]{&s.MaxBodyBytes, 1, api.MaxBodyBytesLimit}, api.ParamMaxBodyBytes, u[api.ParamMaxBodyBytes])
	fs.BoolVar(&s.InsecureTLS, api.ParamInsecureTLS, s.InsecureTLS, u[api.ParamInsecureTLS])
	fs.Var(text{&s.BasicAuthFile}, api.ParamBasicAuthFile, u[api.ParamBasicAuthFile])
	fs.Var(envName{&s.BasicAuthEnv}, api.ParamBasicAuthEnv, u[api.ParamBasicAuthEnv])
	fs.Var(text{&s.BearerTokenFile}, api.ParamBearerTokenFile, u[api.ParamBearerTokenFile])
	fs.Var(envName{&s.BearerTokenEnv}, api.ParamBearerTokenEnv, u[api.ParamBearerTokenEnv])
	fs.Var(text{&s.HeaderFile}, api.ParamHeaderFile, u[api.ParamHeaderFile])
}

// Bind registers every flag of `drainctl wait` on fs.
func (w *Wait) Bind(fs *pflag.FlagSet) {
	u := usages()
	w.bindSource(fs, u)
	fs.Var(floatValue{&w.Target}, api.ParamTarget, u[api.ParamTarget])
	fs.Var(durationValue{&w.MinWait, 0, api.MaxDuration}, api.ParamMinWait, u[api.ParamMinWait])
	fs.Var(durationValue{&w.MaxWait, time.Millisecond, api.MaxDuration}, api.ParamMaxWait, u[api.ParamMaxWait])
	fs.Var(durationValue{&w.Interval, time.Millisecond, api.MaxDuration}, api.ParamInterval, u[api.ParamInterval])
	fs.Var(intValue[int]{&w.UnreachableLimit, 1, api.MaxUnreachableLimit}, api.ParamUnreachableLimit, u[api.ParamUnreachableLimit])
	fs.StringVar(&w.Podinfo, api.ParamPodinfo, w.Podinfo, u[api.ParamPodinfo])
	fs.Var(choice{&w.LogFormat, []string{api.LogText, api.LogJSON}}, api.ParamLogFormat, u[api.ParamLogFormat])
	fs.Var(durationValue{&w.PreSleep, 0, api.MaxDuration}, api.ParamPreSleep, u[api.ParamPreSleep])
	fs.StringVar(&w.PreHTTPGet, api.ParamPreHTTPGet, w.PreHTTPGet, u[api.ParamPreHTTPGet])
	fs.Var(repeated{&w.PreHTTPHeaders}, api.ParamPreHTTPHeader, u[api.ParamPreHTTPHeader])
	fs.StringVar(&w.LogFile, api.ParamLogFile, w.LogFile, u[api.ParamLogFile])
}

// Validate checks what single flags cannot: combinations. Its errors name
// the flags involved.
func (s *Source) Validate() error {
	var errs []error
	if s.URL != "" {
		u, err := url.Parse(s.URL)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--%s: %w", api.ParamURL, err))
		case u.Scheme != "http" && u.Scheme != "https":
			errs = append(errs, fmt.Errorf("--%s %q: want an http:// or https:// URL", api.ParamURL, s.URL))
		case u.Host == "":
			errs = append(errs, fmt.Errorf("--%s %q: no host; want e.g. http://localhost:8080/sessions", api.ParamURL, s.URL))
		}
	}
	switch s.Format {
	case api.FormatJSON:
		if s.JSONPath == "" {
			errs = append(errs, fmt.Errorf("--%s json needs --%s (e.g. measurements.0.value)", api.ParamFormat, api.ParamJSONPath))
		}
	case api.FormatPrometheus:
		if s.Metric == "" {
			errs = append(errs, fmt.Errorf("--%s prometheus needs --%s (e.g. tomcat_sessions_active_current_sessions)", api.ParamFormat, api.ParamMetric))
		}
	case api.FormatMatch:
		if s.Pattern == "" {
			errs = append(errs, fmt.Errorf("--%s match needs --%s (e.g. DRAINING)", api.ParamFormat, api.ParamPattern))
		}
	}
	if s.BasicAuthFile != "" && s.BasicAuthEnv != "" {
		errs = append(errs, fmt.Errorf("--%s and --%s: give one", api.ParamBasicAuthFile, api.ParamBasicAuthEnv))
	}
	if s.BearerTokenFile != "" && s.BearerTokenEnv != "" {
		errs = append(errs, fmt.Errorf("--%s and --%s: give one", api.ParamBearerTokenFile, api.ParamBearerTokenEnv))
	}
	if (s.BasicAuthFile != "" || s.BasicAuthEnv != "") && (s.BearerTokenFile != "" || s.BearerTokenEnv != "") {
		errs = append(errs, errors.New("basic auth and a bearer token: give one"))
	}
	return errors.Join(errs...)
}

// Validate checks combinations of the wait flags.
func (w *Wait) Validate() error {
	errs := []error{w.Source.Validate()}
	if w.MinWait > w.MaxWait {
		errs = append(errs, fmt.Errorf("--%s %s is longer than --%s %s", api.ParamMinWait, w.MinWait, api.ParamMaxWait, w.MaxWait))
	}
	if w.PreHTTPGet != "" {
		if u, err := url.Parse(w.PreHTTPGet); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--%s %q: want an http:// or https:// URL with a host", api.ParamPreHTTPGet, w.PreHTTPGet))
		}
	}
	for _, h := range w.PreHTTPHeaders {
		if name, _, ok := strings.Cut(h, ":"); !ok || strings.TrimSpace(name) == "" {
			errs = append(errs, fmt.Errorf("--%s %q: want 'Name: value'", api.ParamPreHTTPHeader, h))
		}
	}
	if len(w.PreHTTPHeaders) > 0 && w.PreHTTPGet == "" {
		errs = append(errs, fmt.Errorf("--%s without --%s", api.ParamPreHTTPHeader, api.ParamPreHTTPGet))
	}
	if w.Format == api.FormatMatch && w.Target != 0 {
		errs = append(errs, fmt.Errorf("--%s %v with --%s match: match reports 1 while draining and 0 when drained; leave --%s at 0", api.ParamTarget, w.Target, api.ParamFormat, api.ParamTarget))
	}
	return errors.Join(errs...)
}

// FlagSet returns a flag set for `drainctl wait` bound to w, with errors
// returned rather than printed.
func (w *Wait) FlagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("wait", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	w.Bind(fs)
	return fs
}

// Args returns the command-line flags that reproduce every flag set on fs
// (by Set or Parse), sorted by name, as `--name=value`. Parsing them into a
// fresh Wait gives the same parameters.
func Args(fs *pflag.FlagSet) []string {
	var args []string
	fs.Visit(func(f *pflag.Flag) {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() { // a repeated flag: one argument each
				args = append(args, "--"+f.Name+"="+v)
			}
			return
		}
		args = append(args, "--"+f.Name+"="+f.Value.String())
	})
	// By name; a repeated flag's values keep their order.
	name := func(a string) string { n, _, _ := strings.Cut(a, "="); return n }
	sort.SliceStable(args, func(i, j int) bool { return name(args[i]) < name(args[j]) })
	return args
}

// EffectiveMaxWait is the longest drainctl may wait with these flags:
// max-wait itself. The grace period must cover it plus min-wait (a drain
// that hits max-wait during the final min-wait check) and a margin.
func (w *Wait) EffectiveMaxWait() time.Duration { return w.MaxWait }

// repeated is a flag given once per value (--pre-http-header), as
// pflag's StringArray: each Set appends, and Args gives one argument per
// value. Its own type, because pflag's computes its default's text with a
// CSV writer and its 4 KiB buffer — for every pod the webhook admits.
type repeated struct{ p *[]string }

// String is empty with no value (so help shows no default), else the
// values in brackets.
func (r repeated) String() string {
	if r.p == nil || len(*r.p) == 0 {
		return ""
	}
	return "[" + strings.Join(*r.p, ",") + "]"
}

func (r repeated) Type() string { return "stringArray" }

func (r repeated) Set(v string) error { *r.p = append(*r.p, v); return nil }

// Append, Replace and GetSlice make it a pflag.SliceValue.
func (r repeated) Append(v string) error { return r.Set(v) }

func (r repeated) Replace(vs []string) error { *r.p = append([]string(nil), vs...); return nil }

func (r repeated) GetSlice() []string { return append([]string(nil), *r.p...) }

type choice struct {
	p       *string
	allowed []string
}

func (c choice) String() string {
	if c.p == nil {
		return ""
	}
	return *c.p
}

func (c choice) Type() string { return "string" }

func (c choice) Set(v string) error {
	for _, a := range c.allowed {
		if v == a {
			*c.p = v
			return nil
		}
	}
	return fmt.Errorf("%q is not one of %s", v, strings.Join(c.allowed, "|"))
}

type durationValue struct {
	p        *time.Duration
	min, max time.Duration
}

func (d durationValue) String() string {
	if d.p == nil {
		return ""
	}
	return d.p.String()
}

func (d durationValue) Type() string { return "duration" }

func (d durationValue) Set(v string) error {
	x, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%.40q is not a duration; want a number with a unit: 500ms, 10s, 30m, 12h", v)
	}
	if x < d.min {
		if d.min == 0 {
			return fmt.Errorf("%q is negative; want 0 or more", v)
		}
		return fmt.Errorf("%q is too short; want at least %s", v, d.min)
	}
	if x > d.max {
		return fmt.Errorf("%q is too long; want at most %s (%s)", v, d.max, humanDuration(d.max))
	}
	*d.p = x
	return nil
}

type intValue[T int | int64] struct {
	p        *T
	min, max T
}

func (i intValue[T]) String() string {
	if i.p == nil {
		return ""
	}
	return strconv.FormatInt(int64(*i.p), 10)
}

func (i intValue[T]) Type() string { return "int" }

func (i intValue[T]) Set(v string) error {
	x, err := strconv.ParseInt(v, 10, 64)
	if err != nil || T(x) < i.min || int64(T(x)) != x {
		return fmt.Errorf("%.40q is not a whole number of at least %d", v, i.min)
	}
	if T(x) > i.max {
		return fmt.Errorf("%q is too large; want at most %d", v, i.max)
	}
	*i.p = T(x)
	return nil
}

type floatValue struct{ p *float64 }

func (f floatValue) String() string {
	if f.p == nil {
		return ""
	}
	return strconv.FormatFloat(*f.p, 'g', -1, 64)
}

func (f floatValue) Type() string { return "float" }

func (f floatValue) Set(v string) error {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || x < 0 || x != x {
		return fmt.Errorf("%q is not a number of 0 or more", v)
	}
	*f.p = x
	return nil
}

type regexpValue struct{ p *string }

func (r regexpValue) String() string {
	if r.p == nil {
		return ""
	}
	return *r.p
}

func (r regexpValue) Type() string { return "regexp" }

func (r regexpValue) Set(v string) error {
	if _, err := CompilePattern(v); err != nil {
		return fmt.Errorf("%.80q %w", v, err)
	}
	*r.p = v
	return nil
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

type envName struct{ p *string }

func (e envName) String() string {
	if e.p == nil {
		return ""
	}
	return *e.p
}

func (e envName) Type() string { return "name" }

func (e envName) Set(v string) error {
	if !envNameRE.MatchString(v) {
		return fmt.Errorf("%q is not an environment variable name; want letters, digits and _ (the name, never the secret)", v)
	}
	*e.p = v
	return nil
}

type metricValue struct{ p *string }

func (m metricValue) String() string {
	if m.p == nil {
		return ""
	}
	return *m.p
}

func (m metricValue) Type() string { return "metric" }

func (m metricValue) Set(v string) error {
	if _, err := ParseMetricSelector(v); err != nil {
		return err
	}
	*m.p = v
	return nil
}

// humanDuration says d in days when it is whole days (720h is 30 days).
func humanDuration(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + " days"
	}
	return d.String()
}

// text is a string flag bounded by api.MaxValueLength: a URL, a path, a
// file or variable name.
type text struct{ p *string }

func (t text) String() string {
	if t.p == nil {
		return ""
	}
	return *t.p
}

func (t text) Type() string { return "string" }

func (t text) Set(v string) error {
	if len(v) > api.MaxValueLength {
		return fmt.Errorf("%.40q... is %d bytes long; want at most %d", v, len(v), api.MaxValueLength)
	}
	*t.p = v
	return nil
}
