package proc

import (
	"os/exec"
	"runtime"
	"sync"
)

// Linux sends a child's Pdeathsig when the *thread* that forked it exits,
// not the process: a Go program's threads come and go (a goroutine that
// locks its thread and returns without unlocking ends it), so a child
// started with Pdeathsig from an arbitrary goroutine can be killed in the
// middle of a test while its parent runs on. Every such child is therefore
// started by one goroutine locked to its thread for the life of the
// process: the signal then fires only when the process dies.

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

// StartCmd starts cmd (which may set SysProcAttr.Pdeathsig) from the
// spawner thread, which lives as long as the process.
func StartCmd(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives on
			for r := range spawnCh {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, done: done}
	return <-done
}
