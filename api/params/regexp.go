package params

import (
	"fmt"
	"regexp"
	"regexp/syntax"

	"github.com/stickydrain/stickydrain/api"
)

// CompilePattern compiles the match format's pattern as drainctl uses it:
// case-insensitive, unanchored, within the bounds of compileBounded.
func CompilePattern(pattern string) (*regexp.Regexp, error) {
	return compileBounded(pattern, "(?i)"+pattern)
}

// compileBounded compiles expr, the regular expression a user wrote, as
// full (expr wrapped in flags or anchors), refusing it before compiling
// when it is longer than api.MaxRegexpLength or expands to more than
// api.MaxRegexpProgram instructions. Go's engine runs in linear time, but
// compiling expands counted repetitions: a few kilobytes of them compile
// to hundreds of MiB, and the webhook compiles what every opted-in pod's
// annotations say.
func compileBounded(expr, full string) (*regexp.Regexp, error) {
	if len(expr) > api.MaxRegexpLength {
		return nil, fmt.Errorf("is %d bytes long; want at most %d", len(expr), api.MaxRegexpLength)
	}
	parsed, err := syntax.Parse(full, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("is not a regular expression: %w", err)
	}
	if n := estimate(parsed); n > api.MaxRegexpProgram {
		return nil, fmt.Errorf("expands to more than %d instructions (counted repetitions are expanded: [a-z]{1000} ten times is 10000); want a simpler expression", api.MaxRegexpProgram)
	}
	re, err := regexp.Compile(full)
	if err != nil {
		return nil, fmt.Errorf("is not a regular expression: %w", err)
	}
	return re, nil
}

// estimate is programSize of a whole expression: with the instructions
// every program has (a fail, the match, and the whole match's capture).
func estimate(re *syntax.Regexp) int {
	return programSize(re, api.MaxRegexpProgram) + 4
}

// programSize estimates the instructions re compiles to, counted
// repetitions expanded as the compiler expands them and a character class
// weighed by its ranges, from above: never less than the compiler's count. It stops counting past limit (and
// returns a number above it), so that it costs nothing like what it
// measures.
func programSize(re *syntax.Regexp, limit int) int {
	sat := func(n int) int { return min(n, limit+1) }
	switch re.Op {
	case syntax.OpLiteral:
		return sat(len(re.Rune) + 1)
	case syntax.OpCharClass:
		// One instruction, but what a class costs grows with its ranges:
		// a matcher anchored at both ends compiles one-pass, which copies
		// each class and builds a table of its ranges (\pL has hundreds).
		return sat(1 + len(re.Rune)/2)
	case syntax.OpCapture:
		return sat(2 + programSize(re.Sub[0], limit))
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		return sat(2 + programSize(re.Sub[0], limit))
	case syntax.OpRepeat:
		sub := programSize(re.Sub[0], limit)
		n := re.Max
		if n < 0 {
			n = re.Min + 1 // x{n,} is n copies and a star
		}
		if n == 0 {
			return 1
		}
		if sub > (limit+1)/n {
			return limit + 1
		}
		return sat(n * (sub + 1))
	case syntax.OpConcat, syntax.OpAlternate:
		total := 1
		for _, s := range re.Sub {
			total = sat(total + programSize(s, limit) + 1)
		}
		return total
	default:
		return 1
	}
}
