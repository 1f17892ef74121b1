package main

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// The sandbox process must end on SIGTERM (the runtime stops a pod so)
// and not before.
func TestPauseWaitsForSIGTERM(t *testing.T) {
	if os.Getenv("STICKYDRAIN_PAUSE_CHILD") == "1" {
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPauseWaitsForSIGTERM$")
	cmd.Env = append(os.Environ(), "STICKYDRAIN_PAUSE_CHILD=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("pause ended before any signal: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	// A SIGCHLD alone must not end it.
	_ = cmd.Process.Signal(syscall.SIGCHLD)
	select {
	case err := <-done:
		t.Fatalf("pause ended on SIGCHLD: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pause did not exit cleanly on SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("pause still running 10 s after SIGTERM")
	}
}
