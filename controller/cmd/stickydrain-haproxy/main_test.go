package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/internal/cmdline/cmdlinetest"
	"github.com/stickydrain/stickydrain/test/haproxytest"
)

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"restart"},
		{"reload", "--no-such-flag"},
		{"save-state", "--runtime", "http://x"},
		{"save-state", "extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
	var errb bytes.Buffer
	if code := run([]string{"save-state", "--runtime", "unix:///nonexistent/admin.sock", "--timeout", "1s"}, new(bytes.Buffer), &errb); code != 1 {
		t.Errorf("an unreachable Runtime API: exit %d, want 1", code)
	}
	if !strings.Contains(errb.String(), "/nonexistent/admin.sock") {
		t.Errorf("the error does not name the socket: %q", errb.String())
	}
}

// The VM drop-in's reload line (manifests/samples/haproxy-vm), pointed at
// a test HAProxy's sockets and state file, reloads it with the drain kept.
func TestTheSystemdDropInReloadsKeepingTheDrain(t *testing.T) {
	raw, err := os.ReadFile("../../../manifests/samples/haproxy-vm/stickydrain.conf")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "ExecReload=/usr/local/bin/stickydrain-haproxy ") {
			line = strings.TrimPrefix(l, "ExecReload=/usr/local/bin/stickydrain-haproxy ")
		}
	}
	if line == "" {
		t.Fatal("no stickydrain-haproxy ExecReload line in the drop-in")
	}
	h := haproxytest.Start(t, "k", haproxytest.Backend{Name: "shop", Slots: 2})
	args := strings.Fields(strings.NewReplacer(
		"unix:///run/haproxy/admin.sock", h.Address(),
		"unix:///run/haproxy-master.sock", h.MasterAddress(),
		"/var/lib/haproxy/server-state", h.StateFile,
		"/etc/haproxy/stickydrain-ready.map", h.ReadyMap,
	).Replace(line))
	ctx := context.Background()
	inst, err := haproxy.New(h.Address(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"set server shop/pod1 addr 127.0.0.1 port 9000", "set server shop/pod1 state drain"} {
		if err := h.Command(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := inst.Identity(ctx)
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("%q: exit %d: %s\n%s", args, code, errb.String(), h.Log())
	}
	after, _ := inst.Identity(ctx)
	if after == before {
		t.Fatal("no new worker after the drop-in's reload")
	}
	got, err := backend.Read(ctx, inst, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("after the reload: %v, want the one draining server", got)
	}
	for a, s := range got {
		if a.String() != "127.0.0.1:9000" || s.String() != "draining" {
			t.Errorf("after the reload: %s %s, want 127.0.0.1:9000 draining", a, s)
		}
	}
	// The new worker read the saved state; the helper then removed it, so
	// a later crash restart cannot route by it.
	if _, err := os.Stat(h.StateFile); !os.IsNotExist(err) {
		t.Errorf("state file %s after the reload: %v, want it removed", filepath.Base(h.StateFile), err)
	}
}

// A --ready-map that haproxy.cfg does not load cannot take the key
// "replayed": the reload is done all the same (exit 0, the drain kept),
// with a warning naming the map, not an error that a --watch loop would
// answer with another reload every tick.
func TestAReadyMapNotLoadedIsAWarning(t *testing.T) {
	h := haproxytest.Start(t, "k", haproxytest.Backend{Name: "shop", Slots: 2})
	ctx := context.Background()
	if err := h.Command(ctx, "set server shop/pod1 addr 127.0.0.1 port 9000"); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	args := []string{"reload", "--runtime", h.Address(), "--master", h.MasterAddress(), "--state-file", h.StateFile, "--ready-map", "/nowhere/ready.map"}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if w := errb.String(); !strings.Contains(w, "warning: ") || !strings.Contains(w, `"replayed" not set`) || !strings.Contains(w, "/nowhere/ready.map") {
		t.Errorf("stderr %q: want a warning that \"replayed\" was not set in /nowhere/ready.map", w)
	}
	inst, err := haproxy.New(h.Address(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := backend.Read(ctx, inst, "shop"); err != nil || len(got) != 1 {
		t.Errorf("after the reload: %v %v, want the one server kept", got, err)
	}
}

// TestHelpIsGolden: each subcommand's --help, as printed, is the
// committed golden file; bad values are refused naming the flag.
func TestHelpIsGolden(t *testing.T) {
	for _, cmd := range []string{"save-state", "reload"} {
		var out, errb bytes.Buffer
		if code := run([]string{cmd, "--help"}, &out, &errb); code != 0 {
			t.Fatalf("%s --help: exit %d, stderr %q", cmd, code, errb.String())
		}
		cmdlinetest.GoldenText(t, out.String(), filepath.Join("testdata", "help-"+cmd+".golden"))
	}
	var errb bytes.Buffer
	if code := run([]string{"reload", "--every=often"}, new(bytes.Buffer), &errb); code != 2 || !strings.Contains(errb.String(), `invalid argument "often" for "--every" flag`) {
		t.Errorf("--every=often: exit %d, stderr %q", code, errb.String())
	}
}
