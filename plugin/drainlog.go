package plugin

import (
	"bufio"
	"encoding/json"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Phase is where a drain stands by its drainctl's log.
type Phase string

// The phases, in the order a drain goes through them; the last five end
// it (the summary line of drainctl names the same outcomes).
const (
	PhaseNotStarted  Phase = ""            // no drainctl line yet: the hook has not begun, or runs the pod's own preStop first
	PhaseDraining    Phase = "draining"    // polling; sessions left
	PhaseHolding     Phase = "holding"     // at the target, waiting for min-wait
	PhaseFailing     Phase = "failing"     // the latest polls failed
	PhaseDrained     Phase = "drained"     // the count reached the target: the container stops
	PhaseReleased    Phase = "released"    // an operator released it
	PhaseMaxWait     Phase = "max-wait"    // max-wait reached: the container stops with sessions left
	PhaseUnreachable Phase = "unreachable" // the app stopped answering: drainctl gave up
	PhaseInterrupted Phase = "interrupted" // SIGTERM or SIGINT reached drainctl
)

// Progress is what a pod's drainctl said last.
type Progress struct {
	Phase Phase
	// Sessions is the latest count read; -1 when none was.
	Sessions float64
	// MaxWait is the drain's max-wait as drainctl announced it (shortened
	// by annotation if it was); 0 when not said.
	MaxWait time.Duration
	// Failures is how many polls in a row failed, with PhaseFailing.
	Failures int
	// At is the time of the latest drainctl line; Line its message.
	At   time.Time
	Line string
}

var (
	textLine     = regexp.MustCompile(`^(\S+) drainctl: (.*)$`)
	reStarted    = regexp.MustCompile(`^drain started: .* or (\S+) \(min-wait `)
	reTimed      = regexp.MustCompile(`^timed drain: .*, waiting (\S+)$`)
	reDraining   = regexp.MustCompile(`^draining: (\S+) sessions left, waited \S+ of (\S+)$`)
	reHolding    = regexp.MustCompile(`^draining: (\S+) sessions left, holding until min-wait`)
	reFailed     = regexp.MustCompile(`^poll failed \((\d+) of \d+ in a row\)`)
	reShortened  = regexp.MustCompile(`^max-wait shortened from \S+ to (\S+) by `)
	reDrainedNow = regexp.MustCompile(`^drained: (\S+) sessions left`)
	reMaxWait    = regexp.MustCompile(`^max-wait \S+ reached`)
	reSummary    = regexp.MustCompile(`^(drained|released|max-wait reached|app unreachable|interrupted) after \S+ \(\d+ polls, last count (\S+)\)$`)
)

// ParseDrainLog reads a container's log (drainctl's text or JSON lines
// among the app's own) and returns what drainctl said last. The sentences
// are drainctl's (drainctl/drain and drainctl/cli); a test runs drainctl's
// own logger through this parser.
func ParseDrainLog(r io.Reader) Progress {
	p := Progress{Sessions: -1}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		at, msg, ok := drainctlLine(sc.Text())
		if !ok {
			continue
		}
		p.apply(at, msg)
	}
	return p
}

// drainctlLine picks the time and message of one drainctl line, text
// ("<RFC 3339> drainctl: <message>") or JSON ({"logger":"drainctl",…}).
func drainctlLine(line string) (time.Time, string, bool) {
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "{") {
		var rec struct {
			Time   string `json:"time"`
			Logger string `json:"logger"`
			Msg    string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Logger != "drainctl" {
			return time.Time{}, "", false
		}
		at, _ := time.Parse(time.RFC3339, rec.Time)
		return at, rec.Msg, true
	}
	m := textLine.FindStringSubmatch(line)
	if m == nil {
		return time.Time{}, "", false
	}
	at, err := time.Parse(time.RFC3339, m[1])
	if err != nil {
		return time.Time{}, "", false
	}
	return at, m[2], true
}

func (p *Progress) apply(at time.Time, msg string) {
	count := func(s string) {
		if n, err := strconv.ParseFloat(s, 64); err == nil {
			p.Sessions = n
		}
	}
	wait := func(s string) {
		if d, err := time.ParseDuration(s); err == nil {
			p.MaxWait = d
		}
	}
	if m := reSummary.FindStringSubmatch(msg); m != nil {
		p.Phase = map[string]Phase{"drained": PhaseDrained, "released": PhaseReleased, "max-wait reached": PhaseMaxWait,
			"app unreachable": PhaseUnreachable, "interrupted": PhaseInterrupted}[m[1]]
		count(m[2])
		p.At, p.Line = at, msg
		return
	}
	if p.ended() {
		return // lines after the end (a second hook run) do not reopen it
	}
	switch m := []string(nil); {
	case strings.HasPrefix(msg, "drain started: "):
		if m = reStarted.FindStringSubmatch(msg); m != nil {
			wait(m[1])
		}
		p.Phase = PhaseDraining
	case strings.HasPrefix(msg, "timed drain: "):
		if m = reTimed.FindStringSubmatch(msg); m != nil {
			wait(m[1])
		}
		p.Phase = PhaseDraining
	case reDraining.MatchString(msg):
		m = reDraining.FindStringSubmatch(msg)
		count(m[1])
		wait(m[2])
		p.Phase, p.Failures = PhaseDraining, 0
	case reHolding.MatchString(msg):
		count(reHolding.FindStringSubmatch(msg)[1])
		p.Phase, p.Failures = PhaseHolding, 0
	case reFailed.MatchString(msg):
		p.Failures, _ = strconv.Atoi(reFailed.FindStringSubmatch(msg)[1])
		p.Phase = PhaseFailing
	case reShortened.MatchString(msg):
		wait(reShortened.FindStringSubmatch(msg)[1])
	case reDrainedNow.MatchString(msg):
		count(reDrainedNow.FindStringSubmatch(msg)[1])
		p.Phase = PhaseDrained
	case strings.HasPrefix(msg, "released by "):
		p.Phase = PhaseReleased
	case reMaxWait.MatchString(msg):
		p.Phase = PhaseMaxWait
	case strings.HasPrefix(msg, "app unreachable: "):
		p.Phase = PhaseUnreachable
	case strings.HasPrefix(msg, "interrupted after "):
		p.Phase = PhaseInterrupted
	default:
		return // the pod's own preStop, a detected format, an ignored flag: not progress
	}
	p.At, p.Line = at, msg
}

// ended reports whether the drain is over by the log.
func (p *Progress) ended() bool {
	switch p.Phase {
	case PhaseDrained, PhaseReleased, PhaseMaxWait, PhaseUnreachable, PhaseInterrupted:
		return true
	}
	return false
}
