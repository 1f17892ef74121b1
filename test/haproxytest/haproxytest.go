// Package haproxytest runs real HAProxy processes (Debian's haproxy, which
// test/deps.sh installs) for tests.
package haproxytest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/test/proc"
)

// HAProxy is one running process.
type HAProxy struct {
	dir    string
	cfg    string
	Socket string // the Runtime API's unix socket
	Port   int    // the frontend port on 127.0.0.1
	cmd    *exec.Cmd
	log    bytes.Buffer
}

// Backend is a backend of server-template slots, as in the example config.
type Backend struct {
	Name  string
	Slots int
}

// Start runs HAProxy with one frontend on a free port and the backends
// (the first is the frontend's default), each with dynamic cookies keyed
// by key. It stops when the test ends.
func Start(t testing.TB, key string, backends ...Backend) *HAProxy {
	t.Helper()
	h, err := Run(t.TempDir(), 0, key, backends...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}

// Run is Start outside tests: the configuration, socket and log live in
// dir; port 0 picks a free frontend port. Stop ends it.
func Run(dir string, port int, key string, backends ...Backend) (*HAProxy, error) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return nil, fmt.Errorf("haproxy is not installed (test/deps.sh installs Debian's): %w", err)
	}
	if port == 0 {
		if port, err = proc.FreePort(); err != nil {
			return nil, err
		}
	}
	h := &HAProxy{dir: dir, Socket: filepath.Join(dir, "admin.sock"), Port: port}
	var b strings.Builder
	fmt.Fprintf(&b, `global
    stats socket %s level admin
    stats timeout 30s
defaults
    mode http
    option redispatch
    retries 2
    timeout connect 2s
    timeout client 30s
    timeout server 30s
frontend www
    bind 127.0.0.1:%d
    default_backend %s
`, h.Socket, h.Port, backends[0].Name)
	for _, be := range backends {
		fmt.Fprintf(&b, `backend %s
    balance roundrobin
    cookie SRV insert indirect nocache dynamic
    dynamic-cookie-key %s
    server-template pod 1-%d 0.0.0.0:0 disabled
`, be.Name, key, be.Slots)
	}
	h.cfg = filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(h.cfg, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command(bin, "-c", "-f", h.cfg).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("haproxy config check: %w\n%s", err, out)
	}
	if err := h.start(); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *HAProxy) start() error {
	_ = os.Remove(h.Socket)
	h.log.Reset()
	h.cmd = exec.Command("haproxy", "-db", "-f", h.cfg)
	h.cmd.Stdout, h.cmd.Stderr = &h.log, &h.log
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		return fmt.Errorf("starting haproxy: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", h.Socket); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			h.Stop()
			return fmt.Errorf("haproxy did not open its socket:\n%s", h.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart stops the process and starts a new one from the same
// configuration: every runtime change is lost, as in a real restart.
func (h *HAProxy) Restart() error {
	h.Stop()
	return h.start()
}

// Stop ends the process.
func (h *HAProxy) Stop() {
	if h.cmd != nil && h.cmd.Process != nil && h.cmd.ProcessState == nil {
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
	}
}

// URL is the frontend's base URL.
func (h *HAProxy) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", h.Port) }

// Address is the Runtime API address for the controller's configuration.
func (h *HAProxy) Address() string { return "unix://" + h.Socket }
