// Command pause is the sandbox ("pause") process of the real-node tests'
// pods: the first process of each pod, holding its namespaces. It waits for
// SIGINT or SIGTERM and reaps any child re-parented to it (it is PID 1 of a
// pod that shares its PID namespace). No image can be pulled here, so the
// tests build this one with the others (tools/images) and name it as
// containerd's sandbox image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		reap()
	}
}

// reap collects every child that has exited, without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
