package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/haproxytest"
)

// TestSoak is the chaos soak (`make soak`; `make test` runs it for two
// minutes): steady sticky users, a rolling update every 30 s, and the
// faults of the load balancers' and the controller's life injected at
// random times — HAProxy reloads with the shipped procedure, HAProxy
// crashes (SIGKILL, restarted empty), a 5–20 s partition of one instance
// from the controller, the leading controller killed with SIGKILL (a new
// replica started in its place), an NGINX Plus API emulator restart (with
// its state file). A fault that takes an HAProxy instance out of rotation
// waits until another one is in rotation and under no fault. It reports, per fault type, how many were injected and
// what the users saw while each was the latest fault; the promises are
// those of every e2e test: zero misrouted, zero failed requests (but those
// in flight through a killed process, counted apart), every session kept.
//
// STICKYDRAIN_SOAK_DURATION sets the length (default 2m);
// STICKYDRAIN_SOAK_SEED the faults' order (default: the clock);
// STICKYDRAIN_SOAK_HAPROXY the HAProxy version and mode by subtest name,
// e.g. haproxy-2.6-slots or haproxy-3.2-dynamic (default: the newest
// version in slot mode, as the sample Deployment runs it).
var errSkip = errors.New("not injected now")

// soakFlavour is the flavour named name among vs' versions and modes, or
// the newest version in slot mode when name is empty.
func soakFlavour(vs []haproxytest.Version, name string) (haproxytest.Flavour, error) {
	if name == "" {
		return haproxytest.Flavour{Version: vs[len(vs)-1]}, nil
	}
	var names []string
	for _, v := range vs {
		for _, fl := range []haproxytest.Flavour{{Version: v}, {Version: v, Dynamic: true}} {
			if fl.Dynamic && !v.AtLeast(3, 0) {
				continue
			}
			if fl.Name() == name {
				return fl, nil
			}
			names = append(names, fl.Name())
		}
	}
	return haproxytest.Flavour{}, fmt.Errorf("STICKYDRAIN_SOAK_HAPROXY=%q: want one of %s", name, strings.Join(names, ", "))
}

func TestSoak(t *testing.T) {
	cluster.SkipIfShort(t)
	duration := 2 * time.Minute
	if v := os.Getenv("STICKYDRAIN_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("STICKYDRAIN_SOAK_DURATION=%q: want a duration such as 30m", v)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("STICKYDRAIN_SOAK_SEED"); v != "" {
		if _, err := fmt.Sscan(v, &seed); err != nil {
			t.Fatalf("STICKYDRAIN_SOAK_SEED=%q: want a number", v)
		}
	}
	flavour, err := soakFlavour(haproxytest.Versions(t), os.Getenv("STICKYDRAIN_SOAK_HAPROXY"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("soak for %v on %s, seed %d (STICKYDRAIN_SOAK_SEED=%d repeats this order of faults)", duration, flavour.Name(), seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	ctx, cancel := context.WithTimeout(context.Background(), duration+8*time.Minute)
	defer cancel()
	env, err := Start(ctx, Options{Log: t.Logf, ControllerReplicas: 2, NGINXPlus: true, HAProxy: flavour})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	defer env.KeepLogsIfFailed(t)
	clients, obs := startRollout(t, ctx, env)
	version := 2

	type fault struct {
		name string
		do   func() error
	}
	// A fault that takes an HAProxy instance out of rotation is injected
	// only while another instance is in rotation and under no fault: with
	// none ready, a Service (or cloud load balancer) has nowhere to send
	// users — an outage of the load balancer by definition, not what this
	// soak measures. busy holds, per instance, until when a fault keeps it
	// out.
	busy := map[int]time.Time{}
	pick := func(out time.Duration) (int, error) {
		var free []int
		for i := range env.HAProxy {
			if time.Now().After(busy[i]) && env.InstanceReady(i) {
				free = append(free, i)
			}
		}
		if len(free) < 2 {
			return 0, errSkip
		}
		i := free[rng.IntN(len(free))]
		busy[i] = time.Now().Add(out)
		return i, nil
	}
	faults := []fault{
		{"haproxy-reload", func() error {
			i, err := pick(5 * time.Second)
			if err != nil {
				return err
			}
			return env.ReloadHAProxy(ctx, i)
		}},
		{"haproxy-crash", func() error {
			i, err := pick(5 * time.Second)
			if err != nil {
				return err
			}
			return env.RestartHAProxy(i)
		}},
		{"partition", func() error {
			d := time.Duration(5+rng.IntN(16)) * time.Second
			i, err := pick(d + 5*time.Second)
			if err != nil {
				return err
			}
			go func() { _ = env.PartitionHAProxy(i, d) }()
			return nil
		}},
		{"leader-kill", func() error {
			if env.Leader() < 0 {
				return errSkip // the last kill's standby has not taken over yet
			}
			return env.KillLeader(ctx)
		}},
		{"nginx-plus-restart", func() error { env.NGINXPlus[rng.IntN(len(env.NGINXPlus))].Restart(); return nil }},
	}
	type record struct {
		name string
		at   time.Time
	}
	var injected []record
	end := time.Now().Add(duration)
	nextRollout := time.Now().Add(30 * time.Second)
	for time.Now().Before(end) && ctx.Err() == nil {
		wait := time.Duration(4+rng.IntN(8)) * time.Second
		time.Sleep(min(wait, time.Until(end)))
		if !time.Now().Before(end) {
			break
		}
		f := faults[rng.IntN(len(faults))]
		at := time.Now()
		switch err := f.do(); {
		case errors.Is(err, errSkip):
		case err != nil:
			t.Errorf("injecting %s: %v", f.name, err)
		default:
			injected = append(injected, record{f.name, at})
			// The times, to set beside a drain record's if one fails.
			t.Logf("%s %s", at.Format("15:04:05.000"), f.name)
		}
		if time.Now().After(nextRollout) && env.RolloutDone(ctx, fmt.Sprintf("v%d", version), 3) {
			version++
			clients.RolloutStarted()
			if err := env.Rollout(ctx, fmt.Sprintf("v%d", version)); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s rollout to v%d", time.Now().Format("15:04:05.000"), version)
			nextRollout = time.Now().Add(30 * time.Second)
		}
	}
	time.Sleep(20 * time.Second) // the last partition ends
	waitUntil(t, ctx, "the last rollout", func() bool { return env.RolloutDone(ctx, fmt.Sprintf("v%d", version), 3) })
	clients.StopNewSessions()
	settle(ctx, obs, true)

	// Per fault type: how many, and the problems the users met while it
	// was the latest fault.
	count := map[string]int{}
	for _, r := range injected {
		count[r.name]++
	}
	problems := map[string]int{}
	for _, p := range clients.ProblemTimes() {
		name := "before any fault"
		for _, r := range injected {
			if !r.at.After(p) {
				name = r.name
			}
		}
		problems[name]++
	}
	var rows []string
	for _, f := range faults {
		rows = append(rows, fmt.Sprintf("%-20s injected %3d   problems while latest %d", f.name, count[f.name], problems[f.name]))
	}
	sort.Strings(rows)
	s := clients.Stats()
	t.Logf("soak: %v, %d rollouts, %d faults\n%s\nusers: %d requests, %d sessions, %d kept, %d misrouted (%d of them after their session was lost), %d errors, %d in flight at a kill; %d connections while no HAProxy instance was ready",
		duration, version-1, len(injected), strings.Join(rows, "\n"), s.Requests, s.Sessions, s.SessionsKept, s.Misrouted, s.MisroutedAfterLoss, s.Errors, s.InFlightAtKill, env.Front.FailOpens())
	// A partitioned instance routes with what it had until its marker
	// ages out (2 s, then the front's next check).
	var fencing []window
	for _, r := range injected {
		if r.name == "partition" {
			fencing = append(fencing, window{r.at, r.at.Add(3 * time.Second)})
		}
	}
	assertUsersKeptEverything(t, clients, obs, 3*count["haproxy-crash"], fencing...)
}
