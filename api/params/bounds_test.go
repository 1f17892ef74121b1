package params

import (
	"fmt"
	"math"
	"regexp/syntax"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stickydrain/stickydrain/api"
)

// regexpBombs are short expressions that compile to hundreds of MiB:
// counted repetitions, each within Go's own limit of 1000, one after
// another or nested.
var regexpBombs = map[string]string{
	"sequential counted repetitions": strings.Repeat("[a-z]{1000}", 80),
	"nested counted repetitions":     strings.Repeat("((a{10}){10}){10}", 20),
	"a long alternation":             strings.Repeat("abcdefgh|", 200),
}

// A regular expression a user writes is refused, naming the bound, before
// it is compiled: validating one costs little memory whatever it says
// (on main, the sequential bomb allocated over 300 MiB).
func TestARegexpBombIsRefusedBeforeItIsCompiled(t *testing.T) {
	for name, bomb := range regexpBombs {
		t.Run(name, func(t *testing.T) {
			for flag, value := range map[string]string{
				api.ParamPattern: bomb,
				api.ParamMetric:  `m{a=~"` + bomb + `"}`,
			} {
				w := NewWait()
				fs := w.FlagSet()
				var err error
				alloc := allocated(func() { err = fs.Set(flag, value) })
				if err == nil {
					t.Errorf("--%s took a regexp bomb", flag)
					continue
				}
				if !strings.Contains(err.Error(), "want at most") && !strings.Contains(err.Error(), "expands to more than") && !strings.Contains(err.Error(), "bytes long") {
					t.Errorf("--%s: %v; want the bound named", flag, err)
				}
				if alloc > 8<<20 {
					t.Errorf("--%s: refusing it allocated %d MiB; want under 8", flag, alloc>>20)
				}
			}
		})
	}
}

// What users write in practice stays accepted, and the estimate never
// refuses an expression the compiler finds small.
func TestOrdinaryRegexpsAreAccepted(t *testing.T) {
	for _, re := range []string{"DRAINING", "draining|shutting down", `^\s*state:\s*(drain|stop)`, "[0-9a-f]{32}", "a{1000}", strings.Repeat("x", api.MaxRegexpLength-4)} {
		if _, err := CompilePattern(re); err != nil {
			t.Errorf("%.40q: %v", re, err)
		}
	}
	if _, err := ParseMetricSelector(`tomcat_sessions_active_current_sessions{name=~"app|shop",host!~"x.*"}`); err != nil {
		t.Error(err)
	}
}

// Every number and duration a user writes has a ceiling, checked before
// any arithmetic: the grace period the webhook adds them into cannot
// overflow, and drainctl's reads stay sized.
func TestNumbersAndDurationsHaveACeiling(t *testing.T) {
	over := (api.MaxDuration + 1).String()
	for _, c := range []struct{ flag, value, want string }{
		{api.ParamMaxWait, over, "want at most 720h0m0s (30 days)"},
		{api.ParamMaxWait, "2562047h", "too long"},
		{api.ParamMinWait, over, "too long"},
		{api.ParamInterval, over, "too long"},
		{api.ParamRequestTimeout, over, "too long"},
		{api.ParamIdleBelow, over, "too long"},
		{api.ParamPreSleep, over, "too long"},
		{api.ParamMaxBodyBytes, strconv.FormatInt(math.MaxInt64, 10), "want at most 67108864"},
		{api.ParamMaxBodyBytes, strconv.Itoa(api.MaxBodyBytesLimit + 1), "too large"},
		{api.ParamUnreachableLimit, "1000000000", "too large"},
		{api.ParamURL, "http://localhost/" + strings.Repeat("a", api.MaxValueLength), "want at most 2048"},
		{api.ParamJSONPath, strings.Repeat("a.", api.MaxValueLength), "bytes long"},
		{api.ParamHeaderFile, "/" + strings.Repeat("a", api.MaxValueLength), "bytes long"},
		{api.ParamMetric, "m{" + strings.Repeat(`a="b",`, api.MaxMetricMatchers) + `a="b"}`, "more than 16 label matchers"},
		{api.ParamMetric, "m" + strings.Repeat(" ", api.MaxValueLength), "bytes long"},
	} {
		// The value's own error, as the webhook reports it (pflag's
		// wrapper repeats the value whole).
		err := NewWait().FlagSet().Lookup(c.flag).Value.Set(c.value)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--%s=%.30s…: %v; want %q", c.flag, c.value, err, c.want)
		}
		if err != nil && len(err.Error()) > 600 {
			t.Errorf("--%s: the error repeats the value (%d bytes)", c.flag, len(err.Error()))
		}
	}
	// At the bound itself, accepted.
	for flag, value := range map[string]string{api.ParamMaxWait: api.MaxDuration.String(), api.ParamMaxBodyBytes: strconv.Itoa(api.MaxBodyBytesLimit)} {
		if err := NewWait().FlagSet().Set(flag, value); err != nil {
			t.Errorf("--%s=%s: %v", flag, value, err)
		}
	}
}

// allocated is the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// FuzzProgramSize: the estimate a regular expression is checked against
// is never below the instructions Go's compiler makes of it, so that no
// expression compiles to more than api.MaxRegexpProgram unnoticed.
func FuzzProgramSize(f *testing.F) {
	for _, s := range []string{"DRAINING", "a{2,5}b*", "(?i)x{0,}y{3,}", "(a|bc){10}[^z]{1000}", "((a{10}){10}){10}", `\pL{1000}`, "a{1000}b{1000}c{1000}", "(?:(?:a+)?){5}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		if len(expr) > api.MaxRegexpLength {
			return
		}
		parsed, err := syntax.Parse("(?i)"+expr, syntax.Perl)
		if err != nil {
			return
		}
		est := estimate(parsed)
		if est > api.MaxRegexpProgram {
			return // refused before compiling
		}
		prog, err := syntax.Compile(parsed.Simplify())
		if err != nil {
			return
		}
		if len(prog.Inst) > est {
			t.Fatalf("%q: estimated %d instructions, the compiler made %d", expr, est, len(prog.Inst))
		}
	})
}

// What is accepted at the bounds costs little to compile: sixteen
// matchers, each as large as MaxRegexpProgram lets a class-heavy
// expression be. Counting a class as one instruction let sixteen \pL{990}
// through, which allocated 125 MiB to compile.
func TestTheLargestAcceptedSelectorIsCheap(t *testing.T) {
	// The largest repetition of \pL each matcher may hold.
	n := 1
	for ; n < 1000; n++ {
		if _, err := CompilePattern(fmt.Sprintf(`\pL{%d}`, n+1)); err != nil {
			break
		}
	}
	var ms []string
	for i := range api.MaxMetricMatchers {
		ms = append(ms, fmt.Sprintf(`l%d=~"\\pL{%d}"`, i, n))
	}
	sel := "m{" + strings.Join(ms, ",") + "}"
	var err error
	alloc := allocated(func() { _, err = ParseMetricSelector(sel) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("16 matchers of \\pL{%d}: %d KiB allocated", n, alloc>>10)
	if alloc > 32<<20 {
		t.Errorf("the largest accepted selector allocated %d MiB; want under 32", alloc>>20)
	}
}
