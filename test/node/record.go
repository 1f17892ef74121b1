package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Hook is one preStop hook as the kubelet recorded it in its log.
type Hook struct {
	// Started is when the kubelet began running the hook.
	Started time.Time
	// Ended is when it saw the hook end, or gave up on it at the grace
	// period (then Completed is false).
	Ended time.Time
	// Completed: the hook ended within the grace period.
	Completed bool
	// Failed: the hook ended with an error (a non-zero exit).
	Failed bool
	// Output is what a failed exec hook printed, as the kubelet logs it
	// (its FailedPreStopHook Event carries none of it).
	Output string
	// GracePeriod is what was left of the grace period for the SIGTERM
	// after the hook, in seconds (the kubelet's "Killing container with a
	// grace period"; at least 2).
	GracePeriod int64
}

// klogMessage is a message= value, quoted or multi-line.
var klogMessage = regexp.MustCompile(`(?s) message=(?:"((?:[^"\\]|\\.)*)"|<\n(.*?)\n >)`)

var klogHeader = regexp.MustCompile(`^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6}\s`)

var klogLine = regexp.MustCompile(`(?s)^[IWE](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s+\d+ \S+\] "([^"]+)"(.*)$`)

// PreStop waits until the kubelet's log holds the end of the preStop hook of
// namespace/pod's container and the SIGTERM that followed, and returns
// them.
func (n *Node) PreStop(ctx context.Context, namespace, pod, container string) (Hook, error) {
	for {
		h, done, err := n.readHook(namespace, pod, container)
		if err != nil {
			return h, err
		}
		if done {
			return h, nil
		}
		select {
		case <-ctx.Done():
			return h, fmt.Errorf("the kubelet never recorded the end of %s/%s %s's preStop hook: %w", namespace, pod, container, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *Node) readHook(namespace, pod, container string) (Hook, bool, error) {
	f, err := os.Open(n.path("logs", "kubelet.log"))
	if err != nil {
		return Hook{}, false, err
	}
	defer f.Close()
	var h Hook
	podKV := fmt.Sprintf(` pod="%s/%s"`, namespace, pod)
	ctrKV := fmt.Sprintf(` containerName="%s"`, container)
	year := time.Now().Year()
	// klog writes a multi-line value as `key=<` then its lines, each
	// indented by a tab, then ` >`: an entry is its header line and those.
	var entries []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if klogHeader.MatchString(line) || len(entries) == 0 {
			entries = append(entries, line)
		} else {
			entries[len(entries)-1] += "\n" + line
		}
	}
	if err := sc.Err(); err != nil {
		return h, false, err
	}
	for _, line := range entries {
		if !strings.Contains(line, podKV) || !strings.Contains(line, ctrKV) {
			continue
		}
		m := klogLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", year, m[1]), time.Local)
		if err != nil {
			continue
		}
		switch m[2] {
		case "Running preStop hook":
			h = Hook{Started: at}
		case "PreStop hook failed":
			h.Failed = true
		case "Exec lifecycle hook for Container in Pod failed":
			if mm := klogMessage.FindStringSubmatch(m[3]); mm != nil && mm[2] != "" {
				h.Output = strings.ReplaceAll(mm[2], "\n\t", "\n")
				h.Output = strings.TrimPrefix(h.Output, "\t")
			} else if mm != nil {
				if out, err := strconv.Unquote(`"` + mm[1] + `"`); err == nil {
					h.Output = out
				}
			}
		case "PreStop hook completed":
			h.Ended, h.Completed = at, true
		case "PreStop hook not completed in grace period":
			h.Ended = at
		case "Killing container with a grace period":
			if h.Started.IsZero() || h.Ended.IsZero() {
				continue
			}
			if i := strings.Index(m[3], " gracePeriod="); i >= 0 {
				v := strings.Fields(m[3][i+len(" gracePeriod="):])[0]
				h.GracePeriod, _ = strconv.ParseInt(v, 10, 64)
			}
			return h, true, nil
		}
	}
	return h, false, nil
}
