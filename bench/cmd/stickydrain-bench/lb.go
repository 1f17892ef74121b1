package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/framework"
	"github.com/stickydrain/stickydrain/test/nginxplus"
	"github.com/stickydrain/stickydrain/test/proc"
	"github.com/stickydrain/stickydrain/test/testbin"
)

// change is one server change a load-balancer instance confirmed: the
// time its answer left the instance.
type change struct {
	instance, upstream, op string
	at                     time.Time
}

// journal records what the instances were asked and confirmed; it sits
// between the controller and each instance, so its times are the
// instances', not the controller's.
type journal struct {
	mu       sync.Mutex
	changes  []change
	requests map[string]int // instance → API requests (HAProxy: connections)
	commands map[string]int // instance → HAProxy commands
}

func newJournal() *journal {
	return &journal{requests: map[string]int{}, commands: map[string]int{}}
}

func (j *journal) record(instance string, cmds int, cs ...change) {
	j.mu.Lock()
	j.requests[instance]++
	j.commands[instance] += cmds
	j.changes = append(j.changes, cs...)
	j.mu.Unlock()
}

// reset forgets everything recorded so far.
func (j *journal) reset() {
	j.mu.Lock()
	j.changes = nil
	j.requests, j.commands = map[string]int{}, map[string]int{}
	j.mu.Unlock()
}

// firstDrain is when each instance first confirmed a drain on upstream.
func (j *journal) firstDrain(upstream string) map[string]time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string]time.Time{}
	for _, c := range j.changes {
		if c.upstream == upstream && c.op == "drain" {
			if t, ok := out[c.instance]; !ok || c.at.Before(t) {
				out[c.instance] = c.at
			}
		}
	}
	return out
}

// readOther reports whether a backend for which mine is false was read
// (a pass that is not part of the changes being measured: a resync).
func (j *journal) readOther(mine func(upstream string) bool) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, c := range j.changes {
		if c.op == "read" && !mine(c.upstream) {
			return true
		}
	}
	return false
}

func (j *journal) counts(prefix string) (requests, commands int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for k, v := range j.requests {
		if strings.HasPrefix(k, prefix) {
			requests += v
			commands += j.commands[k]
		}
	}
	return
}

// runtimeProxy forwards the HAProxy Runtime API from a socket of its own
// to the instance's, recording each connection (one request, however many
// commands: one line, or an interactive session's lines), each
// `set server B/S state S` it carried (op S) and each
// `show servers state B` (op "read"), at the time its answer came back.
func runtimeProxy(ctx context.Context, j *journal, name, listen, target string) error {
	_ = os.Remove(listen)
	ln, err := net.Listen("unix", listen)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go relayRuntimeAPI(j, name, c, target)
		}
	}()
	return nil
}

// relayRuntimeAPI carries one client connection to the instance at target:
// a single line, answered until HAProxy closes, or, once the client sent
// `prompt`, line after line, each answered up to its prompts. Lines the
// client sent together are forwarded together, as the controller's pass
// pipelines `prompt` and its first command.
func relayRuntimeAPI(j *journal, name string, c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("unix", target)
	if err != nil {
		return
	}
	defer up.Close()
	in, answers := bufio.NewReader(c), bufio.NewReader(up)
	interactive, liveness := false, false
	cmds := 0
	var cs []change
	for first := true; ; first = false {
		line, err := in.ReadString('\n')
		if line == "" || err != nil && !errors.Is(err, io.EOF) {
			break
		}
		batch := []string{line}
		for in.Buffered() > 0 {
			more, _ := in.Peek(in.Buffered())
			if !bytes.ContainsRune(more, '\n') {
				break
			}
			next, _ := in.ReadString('\n')
			batch = append(batch, next)
		}
		if _, err := up.Write([]byte(strings.Join(batch, ""))); err != nil {
			break
		}
		if first {
			text := strings.TrimSpace(line)
			liveness = strings.HasPrefix(text, "show info") || strings.HasPrefix(text, "set map")
			interactive = text == "prompt"
		}
		// Each command gets its answer and, in interactive mode, a prompt;
		// `prompt` itself is not counted as a command.
		var parts []string
		answered := 0
		for _, l := range batch {
			t := strings.TrimSpace(l)
			answered += strings.Count(t, ";") + 1
			if t != "prompt" {
				parts = append(parts, strings.Split(t, ";")...)
			}
		}
		if interactive {
			if copyPrompts(c, answers, answered) != nil {
				return
			}
		} else {
			_, _ = io.Copy(c, answers) // HAProxy closes after answering a non-interactive request
		}
		at := time.Now()
		cmds += len(parts)
		for _, cmd := range parts {
			f := strings.Fields(cmd)
			switch {
			case len(f) == 5 && f[0] == "set" && f[1] == "server" && f[3] == "state":
				be, _, _ := strings.Cut(f[2], "/")
				cs = append(cs, change{instance: name, upstream: be, op: f[4], at: at})
			case len(f) == 4 && f[0] == "show" && f[1] == "servers" && f[2] == "state":
				cs = append(cs, change{instance: name, upstream: f[3], op: "read", at: at})
			}
		}
		if !interactive {
			break
		}
	}
	if cmds > 0 {
		j.record(livenessKey(name, liveness), cmds, cs...)
	}
}

// copyPrompts copies an interactive session's answers from r to w until n
// prompts ("\n> ", which ends each answer) went through.
func copyPrompts(w io.Writer, r *bufio.Reader, n int) error {
	var last [2]byte
	buf := make([]byte, 32<<10)
	for n > 0 {
		k, err := r.Read(buf)
		for _, b := range buf[:k] {
			if b == ' ' && last == [2]byte{'\n', '>'} {
				n--
			}
			last = [2]byte{last[1], b}
		}
		if _, werr := w.Write(buf[:k]); werr != nil {
			return werr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// emulatorServer serves an NGINX Plus API emulator (not NGINX Plus) on a
// free port, recording each request and each server it set to drain.
func emulatorServer(ctx context.Context, j *journal, name string, em *nginxplus.Emulator) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	h := em.Handler()
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r)
		at := time.Now()
		var cs []change
		// /api/9/http/upstreams/NAME/servers/ID
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		if r.Method == http.MethodPatch && len(parts) == 7 && bytes.Contains(body, []byte(`"drain":true`)) {
			cs = append(cs, change{instance: name, upstream: parts[4], op: "drain", at: at})
		}
		j.record(livenessKey(name, r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/nginx")), 1, cs...)
	})}
	go func() { _ = srv.Serve(ln) }()
	go func() { <-ctx.Done(); srv.Close() }()
	return fmt.Sprintf("http://%s/api", ln.Addr()), nil
}

// livenessKey files the controller's liveness requests (its probe each
// second, the readiness marker's heartbeat) apart from the requests that
// read and change servers, so that "requests per change" counts the
// latter only; livenessRate reads them.
func livenessKey(instance string, liveness bool) string {
	if liveness {
		return "liveness:" + instance
	}
	return instance
}

// activeHAProxyServers counts the servers of an instance that have an
// address (the slots the controller filled).
func activeHAProxyServers(sock string) (int, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := c.Write([]byte("show servers state\n")); err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	n := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// be_id be_name srv_id srv_name srv_addr …
		if len(f) > 5 && !strings.HasPrefix(f[0], "#") && f[4] != "0.0.0.0" {
			n++
		}
	}
	return n, sc.Err()
}

// controllerRun is which controller binary a benchmark runs, and with
// which flags beside the benchmark's own.
type controllerRun struct {
	Bin  string   // default: built from this tree
	Args []string // more flags
}

// startController runs the controller (ctl.Bin, or built from this tree)
// as its shipped ServiceAccount with config and ctl.Args, its files in dir.
func startController(ctx context.Context, c *cluster.Cluster, ctl controllerRun, dir, config string) (*framework.Controller, error) {
	bin := ctl.Bin
	if bin == "" {
		b := testbin.New()
		defer b.Close() // Linux keeps a running binary's file until it exits
		var err error
		if bin, err = b.Build("github.com/stickydrain/stickydrain/controller"); err != nil {
			return nil, err
		}
	}
	kubeconfig, err := framework.ServiceAccount(ctx, c, "controller")
	if err != nil {
		return nil, err
	}
	return framework.StartController(ctx, bin, kubeconfig, dir, config, ctl.Args...)
}

// startFloorDrainer runs bench/cmd/floor-drainer, built from this tree,
// with kubeconfig (the controller's: its shipped ServiceAccount) on the
// propagation namespace and the HAProxy Runtime API sockets socks, and
// waits until it has read the slots and synced its watch.
func startFloorDrainer(kubeconfig, dir string, socks []string) (*proc.Proc, error) {
	b := testbin.New()
	defer b.Close()
	bin, err := b.Build("github.com/stickydrain/stickydrain/bench/cmd/floor-drainer")
	if err != nil {
		return nil, err
	}
	ready := filepath.Join(dir, "floor-drainer.ready")
	args := []string{"--kubeconfig", kubeconfig, "--namespace", propNS, "--ready-file", ready}
	for _, s := range socks {
		args = append(args, "--haproxy", s)
	}
	p, err := proc.Start(filepath.Join(dir, "floor-drainer.log"), bin, args...)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(ready); err == nil {
			return p, nil
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("the floor drainer was not ready after a minute (log %s)", p.Log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
