package reload

import (
	"context"
	"fmt"
	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy/instancetest"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/stickydrain/stickydrain/certs"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/proc"
)

// cookieFor finds the SRV cookie HAProxy gives new clients of pod name.
func cookieFor(t *testing.T, h *haproxytest.HAProxy, name string) string {
	t.Helper()
	for n := 0; n < 20; n++ {
		if who, c := instancetest.Get(t, h, ""); who == name {
			return c
		}
	}
	t.Fatalf("never routed to pod %s", name)
	return ""
}

// TestReloadKeepsSlotsDrainsAndStickyTraffic reloads a master-worker
// HAProxy twice with the shipped procedure (Reload: save the state, then
// the master CLI's reload) while clients hold cookies on a draining server
// and send requests all along: every slot keeps its address and state, no
// request fails and every sticky request reaches its pod. A reload without
// the saved state, the same HAProxy otherwise, empties the backend: what
// the procedure prevents.
//
// In dynamic mode the new worker starts without the servers: Reload adds
// them back as soon as it answers and says so in its ready map, and the
// configuration's gate (docs/haproxy.md) holds the requests that reach the
// new worker before then, so none fails there either.
func TestReloadKeepsSlotsDrainsAndStickyTraffic(t *testing.T) {
	instancetest.ForEachFlavour(t, testReloadKeeps)
}

func testReloadKeeps(t *testing.T, f instancetest.Flavour) {
	h := f.StartWith(t, haproxytest.Options{Key: "k1", Gate: true}, f.Backend("shop", 4))
	opts := []haproxy.Option{haproxy.WithReadyMap(h.ReadyMap)}
	if f.Dynamic {
		opts = append(opts, haproxy.WithDynamicServers())
	}
	i := instancetest.Instance(t, h, opts...)
	a, b := instancetest.Pod(t, "a"), instancetest.Pod(t, "b")
	instancetest.Apply(t, i, map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})
	// As the controller does once a process holds every server.
	if id, err := i.Identity(context.Background()); err != nil {
		t.Fatal(err)
	} else if err := i.MarkFilled(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	cookieA := cookieFor(t, h, "a")
	want := map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active}
	instancetest.Apply(t, i, want)

	var sent, failed, slowest atomic.Int64
	var mu sync.Mutex
	var problems []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				// A new connection each time: each reaches whichever
				// worker holds the listener then.
				req, _ := http.NewRequest("GET", h.URL()+"/", nil)
				req.Header.Set("Cookie", "SRV="+cookieA)
				req.Close = true
				start := time.Now()
				resp, err := http.DefaultClient.Do(req)
				sent.Add(1)
				if d := int64(time.Since(start)); d > slowest.Load() {
					slowest.Store(d) // racy max: a figure for the log
				}
				if err != nil {
					failed.Add(1)
					mu.Lock()
					problems = append(problems, err.Error())
					mu.Unlock()
					continue
				}
				body := make([]byte, 8)
				n, _ := resp.Body.Read(body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(body[:n]) != "a" {
					failed.Add(1)
					mu.Lock()
					problems = append(problems, resp.Status+" "+string(body[:n]))
					mu.Unlock()
				}
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for n := 0; n < 2; n++ {
		time.Sleep(300 * time.Millisecond)
		before, err := i.Identity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := Reload(ctx, i, h.MasterAddress(), h.StateFile); err != nil {
			t.Fatalf("reload %d: %v\n%s", n+1, err, h.Log())
		}
		after, err := i.Identity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after == before {
			t.Fatalf("reload %d: still the worker %s", n+1, before)
		}
		got, err := backend.Read(ctx, i, "shop")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
			t.Fatalf("servers after reload %d (-want +got):\n%s", n+1, diff)
		}
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%s: %d sticky requests across two reloads, %d failed, the slowest took %s", f.Name(), sent.Load(), failed.Load(), time.Duration(slowest.Load()).Round(time.Millisecond))
	found := func(key string) bool {
		out, err := i.Command(ctx, "get map "+h.ReadyMap+" "+key)
		return err == nil && strings.Contains(out[0], "found=yes")
	}
	if !found("replayed") || found("filled") {
		t.Errorf("the new worker's ready map: replayed %v, filled %v; want replayed set by Reload, filled not (only the controller sets it)", found("replayed"), found("filled"))
	}
	if failed.Load() != 0 || sent.Load() < 50 {
		t.Errorf("%d of %d sticky requests failed or went astray: %v", failed.Load(), sent.Load(), problems[:min(len(problems), 5)])
	}
	for n := 0; n < 5; n++ {
		if who, _ := instancetest.Get(t, h, ""); who != "b" {
			t.Fatalf("after the reloads a new client went to %q, want b (a drains)", who)
		}
	}

	// The helper's reload used its save and removed it: nothing stale is
	// left for a later restart.
	if _, err := os.Stat(h.StateFile); !os.IsNotExist(err) {
		t.Errorf("after the reloads the server-state-file is still there (%v): a crash restart would route by it", err)
	}
	// The same reload without saving first: the new worker starts with
	// nothing (the last save is gone), not with what ran (b alone).
	instancetest.Apply(t, i, map[netip.AddrPort]plan.State{b: plan.Active})
	if err := h.ReloadWithoutState(); err != nil {
		t.Fatal(err)
	}
	waitNewWorker(t, i, ctx)
	got, err := backend.Read(ctx, i, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("a reload without the helper started with servers %v; want none (dynamic servers are not in the configuration, and the helper's save was used by its reload and removed): then the helper is not what keeps them", got)
	}
}

// The gate docs/haproxy.md and the sample configuration give is the one
// the tests run (haproxytest.GateFor), line for line.
func TestTheDocsGateIsTheTestedOne(t *testing.T) {
	g := haproxytest.GateFor("/usr/local/etc/haproxy/stickydrain-ready.map", "/usr/local/etc/haproxy/stickydrain-gate.lua")
	tested := g.Global + g.Frontend
	for _, file := range []string{"docs/haproxy.md", "manifests/samples/haproxy/haproxy.cfg"} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", file))
		if err != nil {
			t.Fatal(err)
		}
		var shown []string
		for _, l := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(l); len(f) > 1 && (f[0] == "setenv" && f[1] == "STICKYDRAIN_READY_MAP" || f[0] == "lua-load" || f[0] == "http-request" && f[1] == "lua.stickydrain_gate") {
				shown = append(shown, l+"\n")
			}
		}
		if strings.Join(shown, "") != tested {
			t.Errorf("%s's gate:\n%s\nthe tested gate:\n%s", file, strings.Join(shown, ""), tested)
		}
	}
}

func waitNewWorker(t *testing.T, i *haproxy.Instance, ctx context.Context) {
	t.Helper()
	before, _ := i.Identity(ctx)
	for {
		now, err := i.Identity(ctx)
		if err == nil && now != before {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no new worker after the reload")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestMarkFilledGatesReadiness: the readiness frontend answers 503 until
// the marker is set on the process the controller filled, refuses a
// marker meant for another process, and a new process starts unmarked.
func TestMarkFilledGatesReadiness(t *testing.T) {
	haproxytest.ForEachVersion(t, testMarkFilled)
}

func testMarkFilled(t *testing.T, v haproxytest.Version) {
	h := v.Start(t, "k1", haproxytest.Backend{Name: "shop", Slots: 4})
	ctx := context.Background()
	i, err := haproxy.New(h.Address(), 2*time.Second, haproxy.WithReadyMap(h.ReadyMap))
	if err != nil {
		t.Fatal(err)
	}
	ready := func() int { return readiness(t, h.ReadyURL()) }
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Fatalf("a fresh process answers readiness %d, want 503", got)
	}
	id, err := i.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := i.MarkFilled(ctx, "pid 1 started 1"); err == nil {
		t.Fatal("a marker meant for another process was set")
	}
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Fatalf("after a refused marker readiness is %d, want 503", got)
	}
	for n := 0; n < 2; n++ { // twice: setting it again is harmless
		if err := i.MarkFilled(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if got := ready(); got != http.StatusOK {
		t.Fatalf("after the marker readiness is %d, want 200", got)
	}
	// A heartbeat refreshes a marker confirmed recently.
	recent := strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10)
	if err := h.Command(ctx, "set map "+h.ReadyMap+" filled "+recent); err != nil {
		t.Fatal(err)
	}
	if err := i.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if age, ok, err := i.MarkerAge(ctx); err != nil || !ok || age > 500*time.Millisecond {
		t.Fatalf("after a heartbeat the marker is %v old (present %v, %v), want fresh", age, ok, err)
	}
	// A marker no controller confirmed for more than 2 s is refused, and a
	// heartbeat does not revive it (the process may have missed changes):
	// only MarkFilled, after a pass, does.
	stale := strconv.FormatInt(time.Now().Add(-10*time.Second).UnixMilli(), 10)
	if err := h.Command(ctx, "set map "+h.ReadyMap+" filled "+stale); err != nil {
		t.Fatal(err)
	}
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Fatalf("with a marker 10 s old readiness is %d, want 503", got)
	}
	if err := i.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Fatalf("a heartbeat revived a stale marker: readiness %d, want 503", got)
	}
	if err := i.MarkFilled(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := ready(); got != http.StatusOK {
		t.Fatalf("after marking again readiness is %d, want 200", got)
	}
	if err := Reload(ctx, i, h.MasterAddress(), h.StateFile); err != nil {
		t.Fatalf("%v\n%s", err, h.Log())
	}
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Fatalf("a reloaded process answers readiness %d before it is marked, want 503", got)
	}
	// A heartbeat never marks a process that was not filled.
	if err := i.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Fatalf("a heartbeat marked an unmarked process: readiness %d, want 503", got)
	}
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Fatalf("a restarted process answers readiness %d, want 503", got)
	}
	again, err := i.Identity(ctx)
	if err != nil || again == id {
		t.Fatalf("identity after a restart %q (%v), before %q: want a new one", again, err, id)
	}
}

// TestTheSampleConfigurationKeepsItsPromises runs the shipped sample
// configuration (manifests/samples/haproxy/haproxy.cfg) as the sample
// Deployment does — only its paths moved to a temporary directory and its
// ports to free ones on 127.0.0.1 — and walks an operator's steps: a fresh
// process is not ready; filled and marked it is; a drain survives the
// shipped reload procedure, with the drained pod's cookie still reaching
// it; the reloaded process is ready at once (the helper replayed it).
func TestTheSampleConfigurationKeepsItsPromises(t *testing.T) {
	haproxytest.ForEachVersion(t, testTheSample)
}

func testTheSample(t *testing.T, v haproxytest.Version) {
	raw, err := os.ReadFile("../../../../manifests/samples/haproxy/haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "stickydrain-ready.map"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	gate, err := os.ReadFile("../../../../manifests/samples/haproxy/stickydrain-gate.lua")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stickydrain-gate.lua"), gate, 0o644); err != nil {
		t.Fatal(err)
	}
	if !v.AtLeast(3, 1) {
		// The sample runs 3.2; the one line it says to drop before 3.1.
		raw = []byte(strings.Replace(string(raw), "    tune.lua.bool-sample-conversion normal\n", "", 1))
	}
	ports, err := proc.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	// The Runtime API's TLS as the sample mounts it (tls.pem, its key in
	// tls.pem.key, ca.crt) and the controller's client certificate.
	tlsDir := filepath.Join(dir, "runtime-tls")
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ca, err := certs.Generate(certs.Options{DNSNames: []string{"haproxy-runtime.lb.svc"}})
	if err != nil {
		t.Fatal(err)
	}
	clientCrt, clientKey := instancetest.ClientCert(t, ca)
	files := map[string][]byte{"tls.pem": ca.Cert, "tls.pem.key": ca.Key, "ca.crt": ca.CACert, "client.crt": clientCrt, "client.key": clientKey}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(tlsDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := strings.NewReplacer(
		"/usr/local/etc/haproxy/", dir+"/", "/var/run/haproxy/", dir+"/", "/var/lib/haproxy/", dir+"/",
		"/etc/haproxy/runtime-tls/", tlsDir+"/",
		"bind :9999", fmt.Sprintf("bind 127.0.0.1:%d", ports[0]),
		"bind :8080", fmt.Sprintf("bind 127.0.0.1:%d", ports[1]),
		"bind :8404", fmt.Sprintf("bind 127.0.0.1:%d", ports[2]),
	).Replace(string(raw))
	cfgFile := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(v.Bin, "-c", "-f", cfgFile).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c on the sample: %v\n%s", err, out)
	} else if strings.Contains(strings.ToLower(string(out)), "lua") {
		t.Errorf("haproxy -c on the sample warns about its Lua:\n%s", out)
	}
	// The sample Deployment's args.
	logFile, err := os.Create(filepath.Join(dir, "haproxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	haproxyLog := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }
	cmd := exec.Command(v.Bin, "-W", "-db", "-S", filepath.Join(dir, "master.sock")+",mode,600", "-f", cfgFile)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The controller's view: the TCP Runtime API over mutual TLS and
	// readyMap as the controller's sample configuration names them.
	i, err := haproxy.New(fmt.Sprintf("tcp://127.0.0.1:%d", ports[0]), 2*time.Second, haproxy.WithReadyMap(filepath.Join(dir, "stickydrain-ready.map")),
		haproxy.WithTLS(haproxy.TLSFiles{CAFile: filepath.Join(tlsDir, "ca.crt"), CertFile: filepath.Join(tlsDir, "client.crt"), KeyFile: filepath.Join(tlsDir, "client.key"), ServerName: "haproxy-runtime.lb.svc"}))
	if err != nil {
		t.Fatal(err)
	}
	// Without the client certificate, the sample's Runtime API port gives
	// nothing.
	if _, err := instancetest.New(t, fmt.Sprintf("tcp://127.0.0.1:%d", ports[0])).Identity(ctx); err == nil {
		t.Error("the sample's Runtime API answered a client without a certificate")
	}
	var id string
	for id == "" {
		if id, _ = i.Identity(ctx); id == "" {
			select {
			case <-ctx.Done():
				t.Fatalf("the sample never answered on its Runtime API:\n%s", haproxyLog())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	readyURL := fmt.Sprintf("http://127.0.0.1:%d/", ports[2])
	status := func() int { return readiness(t, readyURL) }
	if got := status(); got != http.StatusServiceUnavailable {
		t.Fatalf("a fresh sample process answers readiness %d, want 503", got)
	}
	a, b := instancetest.Pod(t, "a"), instancetest.Pod(t, "b")
	instancetest.Apply(t, i, map[netip.AddrPort]plan.State{a: plan.Active, b: plan.Active})
	if err := i.MarkFilled(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := status(); got != http.StatusOK {
		t.Fatalf("a filled, marked sample process answers readiness %d, want 200", got)
	}
	front := &haproxytest.HAProxy{Port: ports[1]}
	cookieA := cookieFor(t, front, "a")
	want := map[netip.AddrPort]plan.State{a: plan.Draining, b: plan.Active}
	instancetest.Apply(t, i, want)

	// The sidecar's procedure, through the paths the sample mounts.
	local, err := haproxy.New("unix://"+filepath.Join(dir, "admin.sock"), 2*time.Second, haproxy.WithReadyMap(filepath.Join(dir, "stickydrain-ready.map")))
	if err != nil {
		t.Fatal(err)
	}
	if err := Reload(ctx, local, "unix://"+filepath.Join(dir, "master.sock"), filepath.Join(dir, "server-state")); err != nil {
		t.Fatalf("%v\n%s", err, haproxyLog())
	}
	got, err := backend.Read(ctx, i, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
		t.Fatalf("servers after the sample's reload (-want +got):\n%s", diff)
	}
	if who, _ := instancetest.Get(t, front, cookieA); who != "a" {
		t.Errorf("after the reload a's cookie reached %q, want a (draining)", who)
	}
	if who, _ := instancetest.Get(t, front, ""); who != "b" {
		t.Errorf("after the reload a new client reached %q, want b", who)
	}
	if got := status(); got != http.StatusOK {
		t.Errorf("the reloaded process, replayed by the helper, answers readiness %d, want 200 (the sample's readiness is \"filled\")", got)
	}
}

// TestFilledReadinessOutlivesTheController: with the sample's readiness
// (haproxytest.ReadyFilled) a process is ready once filled, and stays
// ready when no controller has confirmed it for 10 s (a controller
// outage); a reload's new worker is ready as soon as the helper replayed
// it; a reload without the helper, and a restart, are not ready until a
// controller fills them again.
func TestFilledReadinessOutlivesTheController(t *testing.T) {
	haproxytest.ForEachVersion(t, func(t *testing.T, v haproxytest.Version) {
		h := v.StartWith(t, haproxytest.Options{Key: "k1", Readiness: haproxytest.ReadyFilled}, haproxytest.Backend{Name: "shop", Slots: 4})
		ctx := context.Background()
		i, err := haproxy.New(h.Address(), 2*time.Second, haproxy.WithReadyMap(h.ReadyMap))
		if err != nil {
			t.Fatal(err)
		}
		ready := func() int { return readiness(t, h.ReadyURL()) }
		mark := func() {
			t.Helper()
			id, err := i.Identity(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := i.MarkFilled(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if got := ready(); got != http.StatusServiceUnavailable {
			t.Fatalf("a fresh process answers readiness %d, want 503", got)
		}
		mark()
		stale := strconv.FormatInt(time.Now().Add(-10*time.Second).UnixMilli(), 10)
		if err := h.Command(ctx, "set map "+h.ReadyMap+" filled "+stale); err != nil {
			t.Fatal(err)
		}
		if got := ready(); got != http.StatusOK {
			t.Fatalf("a filled process no controller confirmed for 10 s answers readiness %d, want 200 (a controller outage must not take it out)", got)
		}
		if err := Reload(ctx, i, h.MasterAddress(), h.StateFile); err != nil {
			t.Fatalf("%v\n%s", err, h.Log())
		}
		if got := ready(); got != http.StatusOK {
			t.Errorf("a reloaded worker the helper replayed answers readiness %d, want 200", got)
		}
		before, err := i.Identity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.ReloadWithoutState(); err != nil {
			t.Fatal(err)
		}
		// A master still re-executing from the reload before misses a
		// SIGUSR2 (seen on 2.6): send it again each second until it takes.
		deadline, resend := time.Now().Add(10*time.Second), time.Now().Add(time.Second)
		for now, _ := i.Identity(ctx); now == before || now == ""; now, _ = i.Identity(ctx) {
			if time.Now().After(deadline) {
				t.Fatalf("no new worker 10 s after SIGUSR2 (still %s):\n%s", before, h.Log())
			}
			if time.Now().After(resend) {
				_ = h.ReloadWithoutState()
				resend = time.Now().Add(time.Second)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got := ready(); got != http.StatusServiceUnavailable {
			t.Errorf("a worker reloaded without the helper answers readiness %d before a controller fills it, want 503", got)
		}
		mark()
		if err := h.Restart(); err != nil {
			t.Fatal(err)
		}
		if got := ready(); got != http.StatusServiceUnavailable {
			t.Errorf("a restarted process answers readiness %d, want 503", got)
		}
	})
}

// The readiness rules the sample and docs/load-balancer-lifecycle.md give
// are the ones the tests run: the sample's is ReadyFilled, the docs show
// both.
func TestTheReadinessRulesAreTheTestedOnes(t *testing.T) {
	const m = "/usr/local/etc/haproxy/stickydrain-ready.map"
	rules := func(file string) []string {
		raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", file))
		if err != nil {
			t.Fatal(err)
		}
		var out, cur []string
		in := false
		for _, l := range strings.Split(string(raw), "\n") {
			switch {
			case strings.HasPrefix(l, "frontend stickydrain-ready"):
				in, cur = true, nil
			case in && strings.HasPrefix(l, "    bind "):
			case in && strings.HasPrefix(l, "    "):
				cur = append(cur, l+"\n")
			case in:
				in = false
				out = append(out, strings.Join(cur, ""))
			}
		}
		return out
	}
	filled, confirmed := haproxytest.ReadinessRules(haproxytest.ReadyFilled, m), haproxytest.ReadinessRules(haproxytest.ReadyConfirmed, m)
	if got := rules("manifests/samples/haproxy/haproxy.cfg"); len(got) != 1 || got[0] != filled {
		t.Errorf("the sample's readiness frontend:\n%v\nthe tested ReadyFilled:\n%s", got, filled)
	}
	got := rules("docs/load-balancer-lifecycle.md")
	if !slices.Contains(got, filled) || !slices.Contains(got, confirmed) {
		t.Errorf("docs/load-balancer-lifecycle.md's readiness frontends:\n%v\nwant both tested ones:\n%s\n%s", got, filled, confirmed)
	}
}

// readiness is the status the readiness frontend at url answers.
func readiness(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
