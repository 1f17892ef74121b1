package proc

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// A child started with Pdeathsig from a goroutine whose thread then ends
// (locked, returned without unlocking: Go ends the thread) must live on
// while this process does. Started plainly from that thread, it dies with
// the thread: the control, which shows why StartCmd exists.
func TestPdeathsigChildOutlivesTheStartingThread(t *testing.T) {
	start := func(viaSpawner bool) *exec.Cmd {
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if viaSpawner {
				errc <- StartCmd(cmd)
			} else {
				errc <- cmd.Start()
			}
		}()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	// alive reports whether cmd still runs after d.
	alive := func(cmd *exec.Cmd, d time.Duration) bool {
		exited := make(chan struct{})
		go func() { _, _ = cmd.Process.Wait(); close(exited) }()
		select {
		case <-exited:
			return false
		case <-time.After(d):
			return true
		}
	}
	if !alive(start(true), 500*time.Millisecond) {
		t.Error("a child started through StartCmd died when the goroutine that asked for it ended its thread")
	}
	// The thread ends on the runtime's own time, later on a loaded
	// machine (a run of every package at once once saw the control alive
	// at 500 ms): the control is given 10 s to die.
	if alive(start(false), 10*time.Second) {
		t.Error("control: a child started plainly from a thread that then ended lived on; the kernel no longer sends Pdeathsig at the thread's exit, and StartCmd may not be needed")
	}
}
