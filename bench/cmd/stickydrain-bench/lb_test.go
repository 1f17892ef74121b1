package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// The recorder is what the propagation and scale figures are read from:
// it must see each drain and each backend read a connection carries.
func TestRuntimeProxyRecordsDrainsAndReads(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "haproxy.sock")
	ln, err := net.Listen("unix", target)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // answers each command with an empty result, as HAProxy does for `set`
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // HAProxy's two modes: one line, or `prompt` and then lines
				defer c.Close()
				r := bufio.NewReader(c)
				line, _ := r.ReadString('\n')
				if line != "prompt\n" {
					_, _ = c.Write([]byte("\n\n"))
					return
				}
				// The same answer to any command, `prompt` included.
				for err := error(nil); err == nil; _, err = r.ReadString('\n') {
					_, _ = c.Write([]byte("1\n# be_id\n\n> "))
				}
			}()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := newJournal()
	listen := filepath.Join(dir, "recorder.sock")
	if err := runtimeProxy(ctx, j, "haproxy-0", listen, target); err != nil {
		t.Fatal(err)
	}
	send := func(line string) {
		c, err := net.Dial("unix", listen)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(c) // the recorder records once the answer is through
	}
	send("show servers state svc-1;set server svc-1/pod3 state drain")
	if _, ok := j.firstDrain("svc-1")["haproxy-0"]; !ok {
		t.Errorf("the drain of svc-1 was not recorded: %+v", j.changes)
	}
	if j.readOther(func(u string) bool { return u == "svc-1" }) {
		t.Error("a read of svc-1 counted as another backend's")
	}
	send("show servers state svc-7")
	if !j.readOther(func(u string) bool { return u == "svc-1" }) {
		t.Errorf("the read of svc-7 (a resync) was not seen: %+v", j.changes)
	}
	if req, cmds := j.counts("haproxy"); req != 2 || cmds != 3 {
		t.Errorf("%d connections and %d commands recorded, want 2 and 3", req, cmds)
	}

	// An interactive session (the controller's pass): its read and its
	// drain on one connection, each recorded once its answer is through.
	j.reset()
	c, err := net.Dial("unix", listen)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	for _, line := range []string{"prompt", "show servers state svc-2", "set server svc-2/pod1 state drain"} {
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := r.ReadString('>'); err != nil {
			t.Fatalf("no prompt after %q: %v", line, err)
		}
	}
	c.Close()
	waitCounts(t, j, "an interactive session", 1, 2)
	if _, ok := j.firstDrain("svc-2")["haproxy-0"]; !ok {
		t.Errorf("the drain of svc-2 in an interactive session was not recorded: %+v", j.changes)
	}

	// `prompt` and the read sent together, as the controller's pass does.
	j.reset()
	c, err = net.Dial("unix", listen)
	if err != nil {
		t.Fatal(err)
	}
	r = bufio.NewReader(c)
	for _, write := range []struct {
		lines   string
		answers int
	}{{"prompt\nshow servers state svc-3\n", 2}, {"set server svc-3/pod1 state drain\n", 1}} {
		if _, err := c.Write([]byte(write.lines)); err != nil {
			t.Fatal(err)
		}
		for range write.answers {
			if _, err := r.ReadString('>'); err != nil {
				t.Fatalf("no prompt after %q: %v", write.lines, err)
			}
		}
	}
	c.Close()
	waitCounts(t, j, "a pipelined session", 1, 2)
	if _, ok := j.firstDrain("svc-3")["haproxy-0"]; !ok {
		t.Errorf("the drain of svc-3 in a pipelined session was not recorded: %+v", j.changes)
	}
}

// waitCounts waits until the journal counts conns connections and cmds
// commands (the recorder records a session once it closes).
func waitCounts(t *testing.T, j *journal, what string, conns, cmds int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		req, n := j.counts("haproxy")
		if req == conns && n == cmds {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d connections and %d commands recorded, want %d and %d", what, req, n, conns, cmds)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
