// Package proc runs the project's binaries as real processes for tests and
// the demo: started with their output in a log file, killed with the
// process that started them, stopped with SIGTERM then SIGKILL.
package proc

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FreePort returns a TCP port free on 127.0.0.1 now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Proc is one running process.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
	// Log is the file its stdout and stderr are appended to.
	Log string
}

// Start runs bin with args, appending its output to the file log. The
// process gets its own process group and is killed if we die.
func Start(log, bin string, args ...string) (*Proc, error) {
	return StartWith(Options{}, log, bin, args...)
}

// Options are what StartWith may change of a process.
type Options struct {
	Dir string   // working directory; default: ours
	Env []string // added to our environment
}

// StartWith is Start with options.
func StartWith(o Options, log, bin string, args ...string) (*Proc, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", log, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = o.Dir
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := StartCmd(cmd); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{}), Log: log}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Stop sends SIGTERM, then SIGKILL after 5 s, and waits. It is safe to call
// Kill ends the process with SIGKILL, as a crash or an OOM kill, and
// waits. Stop afterwards does nothing.
func (p *Proc) Kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
}

// KillGroup ends the process and every process of its group (the
// children it started) with SIGKILL, and waits for it.
func (p *Proc) KillGroup() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.Kill()
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Pid is the process ID, for reading its /proc entries.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// more than once.
func (p *Proc) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// WaitHTTP waits until url answers 200, for at most within.
func WaitHTTP(ctx context.Context, url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready within %s", url, within)
}

// FreePorts returns n ports free on 127.0.0.1 now, all different.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// KillMatching kills with SIGKILL every process whose command line
// contains s: for processes a child started in their own process group
// (haproxy-ingress's HAProxy), which KillGroup does not reach.
func KillMatching(s string) {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		raw, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if strings.Contains(strings.ReplaceAll(string(raw), "\x00", " "), s) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Tail returns the last n lines of the file at path, or why it cannot be
// read: for error messages that quote a process' log.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// BuildScript runs one of test/tools' build scripts, which build into the
// cache when something is missing (progress on our stderr) and print the
// cache directory, and returns that directory.
func BuildScript(script string) (string, error) {
	cmd := exec.Command("bash", script)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w", script, err)
	}
	return strings.TrimSpace(out.String()), nil
}
