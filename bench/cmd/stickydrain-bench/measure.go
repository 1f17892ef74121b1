package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// dist summarises latencies.
type dist struct {
	N                   int
	P50, P99, P999, Max time.Duration
}

func summarise(d []time.Duration) dist {
	if len(d) == 0 {
		return dist{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(p float64) time.Duration {
		i := int(float64(len(s))*p+0.5) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return dist{N: len(s), P50: q(0.50), P99: q(0.99), P999: q(0.999), Max: s[len(s)-1]}
}

// ratio is ours over floor, as a figure of the ratio tables; "n/a" when
// the floor is not above zero.
func ratio[T ~int64 | ~float64](ours, floor T) string {
	if floor <= 0 {
		return "n/a"
	}
	r := float64(ours) / float64(floor)
	if r < 0.1 {
		return fmt.Sprintf("%.3f×", r) // a small ratio keeps its digits: 0.014×, not 0.01×
	}
	return fmt.Sprintf("%.2f×", r)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// usage is a process's CPU time and memory, from /proc.
type usage struct {
	CPU      time.Duration // user + system
	RSS, HWM int64         // bytes: resident now, peak resident
}

func procUsage(pid int) (usage, error) {
	var u usage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, fmt.Errorf("reading /proc/%d/stat: %w", pid, err)
	}
	// Fields after the command (which may hold spaces) in parentheses.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	u.CPU = time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, fmt.Errorf("reading /proc/%d/status: %w", pid, err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			u.RSS = kb << 10
		case "VmHWM":
			u.HWM = kb << 10
		}
	}
	return u, nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// table is a markdown table.
type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) String() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.head, " | ") + " |\n|")
	for range t.head {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// cpuStat is the machine's CPU time from /proc/stat, in ticks.
type cpuStat struct{ total, steal int64 }

func readCPUStat() (cpuStat, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuStat{}, fmt.Errorf("reading /proc/stat: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal guest guest_nice
	if len(f) < 9 || f[0] != "cpu" {
		return cpuStat{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var s cpuStat
	for i := 1; i <= 8; i++ { // guest time is already in user
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return cpuStat{}, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
		s.total += v
		if i == 8 {
			s.steal = v
		}
	}
	return s, nil
}

// stealSince is the share of the machine's CPU time stolen since s0.
func (s cpuStat) stealSince(s0 cpuStat) float64 {
	if s.total == s0.total {
		return 0
	}
	return float64(s.steal-s0.steal) / float64(s.total-s0.total)
}
