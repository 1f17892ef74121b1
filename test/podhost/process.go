package podhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	testproc "github.com/stickydrain/stickydrain/test/proc"
)

// mount is one bind mount into a container's mount namespace.
type mount struct {
	Source, Target string
	ReadOnly       bool
}

// proc is one running container: its own mount and PID namespaces inside
// the pod's network namespace, so that localhost is the pod, the volumes
// sit at their mount paths, and the container's command is PID 1 (its
// /proc/1/fd/1 is its stdout, as in a real container).
type proc struct {
	env     []string // the container's environment, for hooks and probes
	workdir string
	cmd     *exec.Cmd
	initPid int // host PID of the container's PID 1
	done    chan struct{}
	exit    int // valid after done
}

// startContainer runs argv as a container. Output goes to out.
func startContainer(netns string, mounts []mount, env []string, workdir string, argv []string, out io.Writer) (*proc, error) {
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, m := range mounts {
		fmt.Fprintf(&script, "mount --bind %s %s\n", shq(m.Source), shq(m.Target))
		if m.ReadOnly {
			fmt.Fprintf(&script, "mount -o remount,bind,ro %s\n", shq(m.Target))
		}
	}
	if workdir != "" {
		fmt.Fprintf(&script, "cd %s\n", shq(workdir))
	}
	script.WriteString("exec \"$@\"\n")
	args := []string{"--net=/run/netns/" + netns, "--",
		"unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--",
		"/bin/sh", "-c", script.String(), "container"}
	cmd := exec.Command("nsenter", append(args, argv...)...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	// Killed with the pod host, never left running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := testproc.StartCmd(cmd); err != nil {
		return nil, fmt.Errorf("starting container: %w", err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), env: env, workdir: workdir}
	go func() {
		err := cmd.Wait()
		p.exit = exitCode(cmd.ProcessState, err)
		close(p.done)
	}()
	// unshare forks the container's PID 1; find it to signal it and to
	// enter its namespaces for hooks and probes.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if pid := firstChild(cmd.Process.Pid); pid > 0 {
			p.initPid = pid
			return p, nil
		}
		select {
		case <-p.done:
			return p, nil // exited at once; its exit code says why
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, errors.New("container process did not start within 5s")
		}
	}
}

// signal sends sig to the container's PID 1. Like a real container's PID 1,
// it ignores signals it has no handler for, except SIGKILL.
func (p *proc) signal(sig syscall.Signal) {
	if p.initPid > 0 {
		_ = syscall.Kill(p.initPid, sig)
	}
}

// kill ends the container and everything in its PID namespace.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// execIn runs argv inside a running container's network, mount and PID
// namespaces, as the kubelet's exec hooks and probes do, killing it when
// ctx ends. It returns the exit code (-1 if it could not run) and output.
func (p *proc) execIn(ctx context.Context, env []string, workdir string, argv []string) (int, string) {
	if p.initPid == 0 || p.exited() {
		return -1, "container is not running"
	}
	args := []string{"--target", strconv.Itoa(p.initPid), "--net", "--mount", "--pid"}
	if workdir != "" {
		args = append(args, "--wd="+workdir)
	}
	cmd := exec.Command("nsenter", append(append(args, "--"), argv...)...)
	cmd.Env = env
	var out limitedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := testproc.StartCmd(cmd); err != nil {
		return -1, err.Error()
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return exitCode(cmd.ProcessState, err), out.String()
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return exitCode(cmd.ProcessState, nil), out.String()
	}
}

// exitCode follows the container runtimes: 128+signal when killed.
func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func firstChild(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	c, _ := strconv.Atoi(f[0])
	return c
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// limitedBuffer keeps the first 64 KiB written to it.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 64<<10 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }
