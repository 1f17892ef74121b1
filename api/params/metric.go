package params

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/stickydrain/stickydrain/api"
)

// MatchOp is a Prometheus label-matching operator.
type MatchOp string

// Label-matching operators, as in PromQL.
const (
	MatchEqual     MatchOp = "="
	MatchNotEqual  MatchOp = "!="
	MatchRegexp    MatchOp = "=~"
	MatchNotRegexp MatchOp = "!~"
)

// LabelMatcher is one `name op "value"` of a metric selector.
type LabelMatcher struct {
	Name  string
	Op    MatchOp
	Value string
	re    *regexp.Regexp
}

// Matches reports whether a label value satisfies the matcher. An absent
// label has the value "", as in PromQL.
func (m LabelMatcher) Matches(v string) bool {
	switch m.Op {
	case MatchEqual:
		return v == m.Value
	case MatchNotEqual:
		return v != m.Value
	case MatchRegexp:
		return m.re.MatchString(v)
	default:
		return !m.re.MatchString(v)
	}
}

// MetricSelector is `name{matcher,...}`.
type MetricSelector struct {
	Name     string
	Matchers []LabelMatcher
}

var metricNameRE = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
var labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

const selectorForm = `NAME or NAME{label="value",...} with =, !=, =~ or !~`

// ParseMetricSelector parses a PromQL-style instant-vector selector of one
// metric name and optional label matchers.
func ParseMetricSelector(s string) (MetricSelector, error) {
	bad := func(why string) (MetricSelector, error) {
		return MetricSelector{}, fmt.Errorf("%.200q: %s; want %s", s, why, selectorForm)
	}
	if len(s) > api.MaxValueLength {
		return bad(fmt.Sprintf("%d bytes long, more than %d", len(s), api.MaxValueLength))
	}
	name, rest, hasLabels := strings.Cut(strings.TrimSpace(s), "{")
	name = strings.TrimSpace(name)
	if !metricNameRE.MatchString(name) {
		return bad("bad metric name")
	}
	sel := MetricSelector{Name: name}
	if !hasLabels {
		return sel, nil
	}
	rest = strings.TrimSpace(rest)
	if !strings.HasSuffix(rest, "}") {
		return bad("no closing }")
	}
	rest = strings.TrimSpace(strings.TrimSuffix(rest, "}"))
	for rest != "" {
		i := strings.IndexAny(rest, "=!")
		if i <= 0 {
			return bad("a matcher has no operator")
		}
		lname := strings.TrimSpace(rest[:i])
		if !labelNameRE.MatchString(lname) {
			return bad(fmt.Sprintf("bad label name %q", lname))
		}
		rest = rest[i:]
		var op MatchOp
		for _, o := range []MatchOp{MatchRegexp, MatchNotRegexp, MatchNotEqual, MatchEqual} {
			if strings.HasPrefix(rest, string(o)) {
				op = o
				break
			}
		}
		if op == "" {
			return bad(fmt.Sprintf("bad operator after %q", lname))
		}
		rest = strings.TrimSpace(rest[len(op):])
		if rest == "" || rest[0] != '"' {
			return bad(fmt.Sprintf("the value of %q is not a double-quoted string", lname))
		}
		end := 1
		for end < len(rest) && rest[end] != '"' {
			if rest[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(rest) {
			return bad(fmt.Sprintf("the value of %q has no closing quote", lname))
		}
		val, err := strconv.Unquote(rest[:end+1])
		if err != nil {
			return bad(fmt.Sprintf("the value of %q is not a valid string", lname))
		}
		m := LabelMatcher{Name: lname, Op: op, Value: val}
		if op == MatchRegexp || op == MatchNotRegexp {
			// PromQL regexps are anchored at both ends.
			if m.re, err = compileBounded(val, "^(?:"+val+")$"); err != nil {
				return bad(fmt.Sprintf("the regexp of %q %v", lname, err))
			}
		}
		if len(sel.Matchers) == api.MaxMetricMatchers {
			return bad(fmt.Sprintf("more than %d label matchers", api.MaxMetricMatchers))
		}
		sel.Matchers = append(sel.Matchers, m)
		rest = strings.TrimSpace(rest[end+1:])
		if strings.HasPrefix(rest, ",") {
			rest = strings.TrimSpace(rest[1:])
		} else if rest != "" {
			return bad("matchers must be separated by commas")
		}
	}
	return sel, nil
}
