package haproxy

import (
	"context"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/haproxytest"
)

var capture = flag.Bool("capture", false, "rewrite testdata/servers-state-*.txt from the HAProxy versions under test")

func TestAdminState(t *testing.T) {
	for _, tc := range []struct {
		a       AdminState
		state   plan.State
		name    string
		unknown AdminState
	}{
		{0, plan.Active, "0", 0},
		{0x04, plan.Active, "CMAINT", 0},              // a filled slot: `disabled` in the configuration, set ready
		{0x05, plan.Down, "FMAINT|CMAINT", 0},         // a free slot, or one put into maintenance
		{0x0c, plan.Draining, "CMAINT|FDRAIN", 0},     // a draining slot
		{0x08, plan.Draining, "FDRAIN", 0},            // a draining dynamic server
		{0x10, plan.Draining, "IDRAIN", 0},            // drain inherited from a tracked server
		{0x02, plan.Down, "IMAINT", 0},                // maintenance inherited from a tracked server
		{0x20, plan.Down, "RMAINT", 0},                // its address did not resolve
		{0x18, plan.Draining, "FDRAIN|IDRAIN", 0},     // drained twice over
		{0x09, plan.Down, "FMAINT|FDRAIN", 0},         // maintenance wins over drain
		{0x44, plan.Active, "CMAINT|FQDN_CHANGED", 0}, // informational bits only
		{0x80, plan.Active, "0x80", 0x80},             // a bit no supported version defines
		{0x188, plan.Draining, "FDRAIN|0x180", 0x180}, // unknown bits never change the reading
		{0x7f, plan.Down, "FMAINT|IMAINT|CMAINT|FDRAIN|IDRAIN|RMAINT|FQDN_CHANGED", 0},
	} {
		if got := tc.a.State(); got != tc.state {
			t.Errorf("AdminState(%#x).State() = %v, want %v", uint32(tc.a), got, tc.state)
		}
		if got := tc.a.String(); got != tc.name {
			t.Errorf("AdminState(%#x).String() = %q, want %q", uint32(tc.a), got, tc.name)
		}
		if got := tc.a.Unknown(); got != tc.unknown {
			t.Errorf("AdminState(%#x).Unknown() = %#x, want %#x", uint32(tc.a), uint32(got), uint32(tc.unknown))
		}
	}
}

// stateScene is what captureScene sets up on every version, by server
// name: the state each must read as ("free" for an empty slot).
var stateScene = map[string]string{
	"pod1": "active", "pod2": "draining", "pod3": "down", "pod4": "free",
	// dynamic servers (3.0 and later), in the backend dyn
	"sd_127.0.0.1_9001": "active", "sd_127.0.0.1_9002": "draining", "sd_127.0.0.1_9003": "down",
	"sd_127.0.0.1_9004": "down", // added, never set: a new dynamic server starts in maintenance
}

// captureScene puts slots and dynamic servers into the states of
// stateScene through the Runtime API, as the controller does.
func captureScene(t *testing.T, v haproxytest.Version) string {
	t.Helper()
	backends := []haproxytest.Backend{{Name: "shop", Slots: 4}}
	if v.AtLeast(3, 0) {
		backends = append(backends, haproxytest.Backend{Name: "dyn", Dynamic: true})
	}
	h := v.Start(t, "k", backends...)
	cmds := []string{
		"set server shop/pod1 addr 127.0.0.1 port 8001", "set server shop/pod1 state ready",
		"set server shop/pod2 addr 127.0.0.1 port 8002", "set server shop/pod2 state drain",
		"set server shop/pod3 addr 127.0.0.1 port 8003", "set server shop/pod3 state ready", "set server shop/pod3 state maint",
	}
	if v.AtLeast(3, 0) {
		for i, st := range []string{"ready", "drain", "maint", ""} {
			srv := "dyn/sd_127.0.0.1_900" + string(rune('1'+i))
			cmds = append(cmds, "add server "+srv+" 127.0.0.1:900"+string(rune('1'+i))+" cookie c"+string(rune('1'+i)))
			if st != "" {
				cmds = append(cmds, "set server "+srv+" state "+st)
			}
		}
	}
	i, err := New(h.Address(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := i.run(ctx, cmds); err != nil {
		t.Fatal(err)
	}
	// Address changes land a moment after their answer from 3.0.
	sess, err := i.openSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.close()
	if err := i.awaitAddrs(ctx, sess, "shop", []addrWant{
		{0, "pod1", netip.MustParseAddrPort("127.0.0.1:8001")},
		{0, "pod2", netip.MustParseAddrPort("127.0.0.1:8002")},
		{0, "pod3", netip.MustParseAddrPort("127.0.0.1:8003")},
	}, make([]error, 1)); err != nil {
		t.Fatal(err)
	}
	outs, err := i.run(ctx, []string{"show servers state"})
	if err != nil {
		t.Fatal(err)
	}
	return outs[0] + "\n"
}

// TestServersStateOfEachVersion sets the scene on each HAProxy version
// under test and reads it back as the controller does; -capture writes
// what each answered into testdata, which TestServersStateCaptures reads.
func TestServersStateOfEachVersion(t *testing.T) {
	haproxytest.ForEachVersion(t, func(t *testing.T, v haproxytest.Version) {
		state := captureScene(t, v)
		checkScene(t, v.Series, state)
		if *capture {
			if err := os.WriteFile(filepath.Join("testdata", "servers-state-"+v.Series+".txt"), []byte(state), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestServersStateCaptures reads the answers captured from each version
// (HAProxy 2.6, 3.0, 3.2) without running any.
func TestServersStateCaptures(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "servers-state-*.txt"))
	if len(files) < 3 {
		t.Fatalf("captures %v; want one for each of 2.6, 3.0 and 3.2 (go test -run TestServersStateOfEachVersion -capture)", files)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkScene(t, filepath.Base(f), string(raw))
	}
}

func checkScene(t *testing.T, what, state string) {
	t.Helper()
	for _, be := range []struct {
		name    string
		dynamic bool
	}{{"shop", false}, {"dyn", true}} {
		section := sectionOf(state, be.name)
		if section == "" {
			continue // no dynamic backend before 3.0
		}
		slots, err := parseServersState(section, be.dynamic)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for _, s := range slots {
			got := "free"
			if !s.free {
				got = s.state.String()
			}
			if want := stateScene[s.name]; got != want {
				t.Errorf("%s: %s/%s (srv_admin_state %s) reads %s, want %s", what, be.name, s.name, s.admin, got, want)
			}
			if s.admin.Unknown() != 0 {
				t.Errorf("%s: %s/%s has unknown bits %s", what, be.name, s.name, s.admin)
			}
		}
	}
}

// sectionOf keeps the lines of one backend of a whole `show servers
// state` answer.
func sectionOf(state, backend string) string {
	out := ""
	for _, line := range strings.Split(state, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && f[1] == backend {
			out += line + "\n"
		}
	}
	return out
}

func TestUnknownAdminBitsAreLoggedOnce(t *testing.T) {
	var lines []string
	h, _ := New("unix:///nowhere", 0, WithLogger(funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})))
	for range 3 {
		h.noteUnknown("shop", slot{name: "pod1", admin: 0x84})
	}
	h.noteUnknown("shop", slot{name: "pod2", admin: 0x04})
	h.noteUnknown("shop", slot{name: "pod3", admin: 0x104})
	if len(lines) != 2 {
		t.Fatalf("logged %d lines, want 2 (0x80 once, then 0x100):\n%v", len(lines), lines)
	}
}
