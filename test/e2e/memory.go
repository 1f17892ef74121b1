package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stickydrain/stickydrain/test/framework"
)

// memSample is one reading of a controller process's memory.
type memSample struct {
	at        time.Time
	rss, heap int64 // bytes: resident set (VmRSS), live heap (HeapInuse after a GC)
}

// memSeries is one controller process's readings, and where its first and
// latest heap profiles are saved.
type memSeries struct {
	pid           int
	samples       []memSample
	first, latest string // heap profiles (pprof format)
}

// MemoryWatch samples every controller replica's memory (Options.
// ControllerPprof) each interval: its resident set from /proc and its live
// heap from Go's heap profile (which runs a GC first), saving the first and
// the latest profile of each process in dir.
type MemoryWatch struct {
	mu     sync.Mutex
	series map[int]*memSeries
	dir    string
	stop   func()
	done   chan struct{}
}

// WatchMemory starts sampling until Stop.
func (e *Env) WatchMemory(ctx context.Context, every time.Duration) (*MemoryWatch, error) {
	if !e.controllerPprof {
		return nil, fmt.Errorf("e2e: WatchMemory needs Options.ControllerPprof")
	}
	dir := filepath.Join(e.Dir, "heap")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &MemoryWatch{series: map[int]*memSeries{}, dir: dir, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			for _, c := range e.controllers() {
				w.sample(ctx, c)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
		}
	}()
	return w, nil
}

// Stop ends the sampling and takes a last reading of the processes alive.
func (w *MemoryWatch) Stop() {
	w.stop()
	<-w.done
}

func (w *MemoryWatch) sample(ctx context.Context, c *framework.Controller) {
	if c.Exited() || c.PprofAddr == "" {
		return
	}
	pid := c.Pid()
	rss, err := vmRSS(pid)
	if err != nil {
		return
	}
	w.mu.Lock()
	s := w.series[pid]
	if s == nil {
		s = &memSeries{pid: pid}
		w.series[pid] = s
	}
	n := len(s.samples)
	w.mu.Unlock()
	file := filepath.Join(w.dir, fmt.Sprintf("%d-%d.pb.gz", pid, n))
	heap, err := heapProfile(ctx, c.PprofAddr, file)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s.samples = append(s.samples, memSample{at: time.Now(), rss: rss, heap: heap})
	if s.first == "" {
		s.first = file
		return
	}
	if s.latest != "" {
		_ = os.Remove(s.latest)
	}
	s.latest = file
}

// Report says, for the process sampled longest (whether memory levels
// off), its resident set and live heap at the start, at half time and at
// the end (short: for a table); and for every process sampled twice or
// more (leader: the one leading at the end) the same, with the heap
// profile's difference between its first and latest reading (go tool
// pprof -top -diff_base), top lines (detail).
func (w *MemoryWatch) Report(leader int) (short, detail string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	span := func(s *memSeries) time.Duration { return s.samples[len(s.samples)-1].at.Sub(s.samples[0].at) }
	var long *memSeries
	var b strings.Builder
	for _, s := range w.series {
		if len(s.samples) < 2 {
			continue
		}
		if long == nil || span(s) > span(long) {
			long = s
		}
	}
	if long == nil {
		return "not sampled twice", "controller memory: no process sampled twice"
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	line := func(s *memSeries) (first, mid, last memSample) {
		return s.samples[0], s.samples[len(s.samples)/2], s.samples[len(s.samples)-1]
	}
	first, mid, last := line(long)
	short = fmt.Sprintf("RSS %s → %s → %s, heap %s → %s → %s over %v", mib(first.rss), mib(mid.rss), mib(last.rss),
		mib(first.heap), mib(mid.heap), mib(last.heap), span(long).Round(time.Second))
	for _, s := range w.series {
		if len(s.samples) < 2 {
			continue
		}
		first, mid, last := line(s)
		var peak int64
		for _, x := range s.samples {
			peak = max(peak, x.rss)
		}
		role := ""
		if s.pid == leader {
			role = ", leading at the end"
		}
		fmt.Fprintf(&b, "controller memory (pid %d%s, %d readings over %v): RSS %s → %s at half time → %s at the end (peak %s); live heap %s → %s → %s\n",
			s.pid, role, len(s.samples), span(s).Round(time.Second),
			mib(first.rss), mib(mid.rss), mib(last.rss), mib(peak), mib(first.heap), mib(mid.heap), mib(last.heap))
		if s != long && s.pid != leader {
			continue
		}
		// -nodefraction=0: growth spread over many small places is each
		// under pprof's default 0.5 % of the total, and left out (the
		// first runs printed no rows at all).
		out, err := exec.Command("go", "tool", "pprof", "-top", "-nodefraction=0", "-nodecount=12", "-sample_index=inuse_space", "-diff_base="+s.first, s.latest).CombinedOutput()
		if err != nil {
			fmt.Fprintf(&b, "  heap profile difference: %v\n", err)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "Showing nodes") {
				lines = lines[i:min(len(lines), i+14)]
				break
			}
		}
		fmt.Fprintf(&b, "  heap profile, latest less first (inuse_space):\n  %s\n", strings.Join(lines, "\n  "))
	}
	return short, strings.TrimSuffix(b.String(), "\n")
}

// vmRSS is the resident set of pid, in bytes.
func vmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// heapProfile saves the heap profile at addr (after a GC) to file and
// returns the live heap (HeapInuse) from the text form's statistics.
func heapProfile(ctx context.Context, addr, file string) (int64, error) {
	get := func(url string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s: %s", url, resp.Status)
		}
		return io.ReadAll(resp.Body)
	}
	raw, err := get("http://" + addr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		return 0, err
	}
	text, err := get("http://" + addr + "/debug/pprof/heap?debug=1")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(text), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapInuse = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no HeapInuse in the heap profile's text form")
}
