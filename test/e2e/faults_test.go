package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/must"
)

// TestRolloutSurvivesHAProxyReloadsAndACrash: a rolling update with users
// holding sessions through the front, and in the middle of the old pods'
// drains: instance 1 reloaded twice, four seconds apart, with the shipped
// procedure (stickydrain-haproxy reload), and instance 2 killed (SIGKILL,
// master and workers) and started again with nothing saved. What the
// users saw decides: zero misrouted, zero failed requests (but those in
// flight through the killed process, counted apart), every session kept,
// no new session on a draining pod. The restarted instance must stay out
// of rotation until the controller has filled it, and be back within a few
// seconds (probe every second).
func TestRolloutSurvivesHAProxyReloadsAndACrash(t *testing.T) {
	// The oldest version and the newest (the sample Deployment's), in slot
	// mode; the newest in dynamic mode too, where each reload's new worker
	// starts without the servers and its gate holds what reaches it until
	// the helper has added them back.
	//
	// The front is told of the kill on the newest in slot mode; elsewhere it
	// checks every second and learns from its checks alone (known-findings:
	// a restarted 2.6 answered 503 to what such a front still sent it).
	vs := haproxytest.Versions(t)
	runs := []Options{{HAProxy: haproxytest.Flavour{Version: vs[0]}, FrontProbesOnly: true}}
	if newest := vs[len(vs)-1]; len(vs) > 1 {
		runs = append(runs, Options{HAProxy: haproxytest.Flavour{Version: newest}})
		if newest.AtLeast(3, 0) {
			runs = append(runs, Options{HAProxy: haproxytest.Flavour{Version: newest, Dynamic: true}, FrontProbesOnly: true})
		}
	}
	for _, o := range runs {
		name := o.HAProxy.Name()
		if o.FrontProbesOnly {
			name += "-probes-only"
		}
		t.Run(name, func(t *testing.T) { reloadsAndACrash(t, o) })
	}
}

func reloadsAndACrash(t *testing.T, opts Options) {
	ctx, env := startEnv(t, opts)
	clients, obs := startRollout(t, ctx, env)
	for n := 1; n <= 2; n++ {
		if err := env.ReloadHAProxy(ctx, 0); err != nil {
			t.Fatal(err)
		}
		t.Logf("instance 1 reloaded (%d of 2)", n)
		time.Sleep(4 * time.Second)
	}
	killed, sawEmptyUnready := time.Now(), false
	if err := env.RestartHAProxy(1); err != nil {
		t.Fatal(err)
	}
	// The new process answers its readiness check 503 until filled: never
	// ready while empty (a sample every 20 ms until it is ready; the
	// observer checks every ready instance for the draining servers too).
	for !ready(env.HAProxy[1].ReadyURL()) && ctx.Err() == nil {
		if len(env.Pods(ctx)) > 0 && !env.filled(ctx, 1, 0) {
			sawEmptyUnready = true
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !env.filled(ctx, 1, 0) {
		t.Errorf("the restarted instance answered ready without every pod's server")
	}
	if !sawEmptyUnready {
		t.Logf("the restarted instance was filled before the first sample; the gate was not observed closed this run")
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "the restarted instance back in rotation", func() bool { return env.InstanceReady(1) })
	if opts.FrontProbesOnly {
		// The front may never have seen it down: what it sent meanwhile
		// went to the new process, held by its gate until filled.
		t.Logf("restarted instance filled and ready %v after the kill (the front, checking every second, may not have noticed it)", time.Since(killed).Round(time.Millisecond))
	} else {
		t.Logf("restarted instance back in rotation %v after the kill", time.Since(killed).Round(time.Millisecond))
	}
	if back := time.Since(killed); back > 5*time.Second {
		t.Errorf("the restarted instance took %v to be filled and marked; want a few seconds (probe every 1s)", back)
	}
	finishRollout(t, ctx, env, clients, obs)
	assertUsersKeptEverything(t, clients, obs, 3)
}

// window is a span in which misroutes are allowed: a partitioned
// instance routing with what it had until its marker aged out.
type window struct{ from, to time.Time }

// assertUsersKeptEverything is what every fault test asserts from the
// users' side: no failed request (but maxInFlight in flight through a
// killed process), no misrouted request outside the fencing windows, every
// session kept but those misrouted in a window, no new session or
// re-login on a draining pod, and every drain as it should be.
func assertUsersKeptEverything(t *testing.T, clients *Clients, obs *Observer, maxInFlight int, fencing ...window) {
	t.Helper()
	assertUsersSaw(t, clients, maxInFlight, fencing)
	assertDrains(t, clients.env, obs)
}

// misroutes counts the misrouted requests inside one of windows and
// outside all of them.
func misroutes(clients *Clients, windows []window) (in, outside int) {
	for _, at := range clients.MisrouteTimes() {
		inside := false
		for _, w := range windows {
			inside = inside || (!at.Before(w.from) && !at.After(w.to))
		}
		if inside {
			in++
		} else {
			outside++
		}
	}
	return in, outside
}

// assertUsersSaw is the users' side of assertUsersKeptEverything, for
// HAProxy instances and ingress replicas alike.
func assertUsersSaw(t *testing.T, clients *Clients, maxInFlight int, windows []window) {
	t.Helper()
	inWindow, outside := misroutes(clients, windows)
	s := clients.Stats()
	t.Logf("clients: %+v; misrouted in a fault's window: %d", s, inWindow)
	for _, p := range clients.Problems() {
		t.Logf("problem: %s", p)
	}
	if s.Errors != 0 || outside != 0 {
		t.Errorf("%d failed requests, %d sessions lost to a misroute outside any fault's window", s.Errors, outside)
	}
	unheardOfPods(t, clients)
	if lost := s.Sessions - s.SessionsKept - s.LostToUnheardPod; lost > inWindow {
		t.Errorf("sessions: %d ended, %d kept: more lost than the %d requests misrouted in a fault's window", s.Sessions, s.SessionsKept, inWindow)
	}
	if s.NewOnDraining != 0 || s.ReloginsOnDraining != 0 {
		t.Errorf("%d new sessions and %d re-logins landed on a pod the load balancer that served them had drained", s.NewOnDraining, s.ReloginsOnDraining)
	}
	if s.InFlightAtKill > maxInFlight {
		t.Errorf("%d requests failed in flight through a killed process; want at most %d", s.InFlightAtKill, maxInFlight)
	}
	// A Service with no ready endpoint sends nothing: the front failing
	// open would hide an outage of every instance.
	if fo := clients.env.Front.FailOpens(); fo > 0 {
		t.Errorf("%d connections went out with no load balancer ready (an outage, which the front's fail-open hid)", fo)
	}
}

// assertDrains: every old pod drained on every instance in rotation,
// never dropped early nor active again, removed only once gone.
func assertDrains(t *testing.T, env *Env, obs *Observer) {
	t.Helper()
	for _, d := range obs.Records() {
		if d.Drained.IsZero() && !d.ServedTerminating && !d.ServerDroppedEarly && !d.Undrained {
			t.Logf("%s: never ready while terminating (seen terminating %s, gone %s): not serving, so taken down, no drain to see", d.Pod, d.Seen.Format(time.TimeOnly), d.Gone.Format(time.TimeOnly))
			continue
		}
		// A pod whose whole terminating life fell while no replica led
		// (its min-wait shorter than the failover) cannot have been
		// drained: sessions that landed on it meanwhile are in its count,
		// which its drainctl waits for, and the users' figures say
		// whether any was lost.
		leaderless := d.Drained.IsZero() && !d.ServerDroppedEarly && !d.Undrained && env.leaderlessThroughout(d.Seen, d.Gone)
		if leaderless {
			t.Logf("%s: terminating from %s to %s while no controller replica led: not drained, its sessions waited for by drainctl", d.Pod, d.Seen.Format(time.TimeOnly), d.Gone.Format(time.TimeOnly))
		}
		if !leaderless && (d.Drained.IsZero() || d.ServerDroppedEarly || d.Undrained) {
			t.Errorf("%s: drained %v, dropped early from an instance in rotation %v, active again after its drain %v (seen terminating %s, ready while terminating %v, gone %s)",
				d.Pod, d.Drained, d.ServerDroppedEarly, d.Undrained, d.Seen.Format(time.TimeOnly), d.ServedTerminating, d.Gone.Format(time.TimeOnly))
		}
		if d.RemovedFromLB.IsZero() || d.RemovedFromLB.Before(d.Gone) {
			t.Errorf("%s: removed from the load balancers at %v, pod gone at %v", d.Pod, d.RemovedFromLB, d.Gone)
		}
	}
}

// startRollout deploys, waits for every instance to be filled and in
// rotation, starts the users and the rollout, and waits until an old pod
// is draining.
func startRollout(t *testing.T, ctx context.Context, env *Env) (*Clients, *Observer) {
	t.Helper()
	deployServing(t, ctx, env)
	return usersAndRollout(t, ctx, env)
}

// The app of the rollout scenarios: its replicas, users and idle timeout.
const (
	scenarioReplicas = 3
	scenarioUsers    = 9
	scenarioIdle     = 8 * time.Second
)

// deployServing deploys v1 and waits until every pod is active on every
// load balancer (Serving).
func deployServing(t *testing.T, ctx context.Context, env *Env) {
	t.Helper()
	if err := env.Deploy(ctx, scenarioReplicas, scenarioIdle); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "3 ready v1 pods active on every load balancer, all in rotation", func() bool { return env.Serving(ctx, "v1", scenarioReplicas) })
}

// usersAndRollout starts the users, then after 5 s the rollout to v2,
// and waits until an old pod is draining.
func usersAndRollout(t *testing.T, ctx context.Context, env *Env) (*Clients, *Observer) {
	t.Helper()
	obs := env.Observe(ctx, 100*time.Millisecond)
	clients := env.StartClients(ctx, scenarioUsers, scenarioIdle, obs)
	time.Sleep(5 * time.Second)
	clients.RolloutStarted()
	if err := env.Rollout(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "an old pod draining", obs.AnyDraining)
	return clients, obs
}

func finishRollout(t *testing.T, ctx context.Context, env *Env, clients *Clients, obs *Observer) {
	t.Helper()
	must.Eventually(t, ctx, 300*time.Millisecond, "the rollout to v2", func() bool { return env.RolloutDone(ctx, "v2", 3) })
	clients.StopNewSessions()
	AwaitRemovals(ctx, obs, len(env.NGINXPlus) > 0)
}

// TestRolloutSurvivesAPartitionAndHAProxyScaling: mid-drain, the
// controller loses instance 1's Runtime API for 20 s while the instance
// keeps serving users; a third instance is added (it must take no user
// before it is filled) and instance 1 is scaled away. The partitioned
// instance must leave rotation once its marker ages out (2 s); misroutes
// are allowed only before that (it routes with what it had: a pod that
// became ready meanwhile is unknown to it), never after, and no request
// may fail. The others keep converging; the partitioned one converges
// when it returns.
func TestRolloutSurvivesAPartitionAndHAProxyScaling(t *testing.T) {
	// The oldest version in slot mode, and the newest in dynamic mode,
	// where the added instance and the returning one get their servers by
	// `add server` and the removed pods' by `del server`.
	vs := haproxytest.Versions(t)
	fls := []haproxytest.Flavour{{Version: vs[0]}}
	if newest := vs[len(vs)-1]; len(vs) > 1 && newest.AtLeast(3, 0) {
		fls = append(fls, haproxytest.Flavour{Version: newest, Dynamic: true})
	}
	for _, fl := range fls {
		t.Run(fl.Name(), func(t *testing.T) { partitionAndScaling(t, Options{HAProxy: fl}) })
	}
}

func partitionAndScaling(t *testing.T, opts Options) {
	ctx, env := startEnv(t, opts)
	clients, obs := startRollout(t, ctx, env)

	// The partitioned instance leaves rotation once its marker is 2 s
	// old; until then it routes with what it had, so a user bound to a pod
	// that became ready meanwhile may be sent elsewhere by it. Misroutes
	// are allowed in that window only, and the window must close.
	cut := time.Now()
	partitioned := make(chan error, 1)
	go func() { partitioned <- env.PartitionHAProxy(0, 20*time.Second) }()
	fenced := make(chan time.Time, 1)
	go func() {
		for ctx.Err() == nil && env.InstanceReady(0) {
			time.Sleep(20 * time.Millisecond)
		}
		fenced <- time.Now()
	}()
	added, err := env.AddHAProxy()
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	for ctx.Err() == nil {
		// The moment its readiness first passes, it holds every server.
		if ready(env.HAProxy[added].ReadyURL()) {
			if !env.filled(ctx, added, 1) {
				t.Errorf("the added instance answered ready without every pod's server")
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "the added instance in rotation", func() bool { return env.InstanceReady(added) })
	t.Logf("added instance in rotation %v after it started (the controller reads its configuration every 5 s)", time.Since(since).Round(time.Millisecond))
	fencedAt := <-fenced
	t.Logf("the partitioned instance left rotation %v after the cut", fencedAt.Sub(cut).Round(10*time.Millisecond))
	if d := fencedAt.Sub(cut); d > 3*time.Second {
		t.Errorf("the partitioned instance stayed in rotation %v; its marker ages out after 2 s", d)
	}
	if err := <-partitioned; err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "the partitioned instance in step again", func() bool { return env.filled(ctx, 0, 1) && env.filled(ctx, 1, 0) })
	t.Log("the partitioned instance converged after it returned")
	if err := env.RemoveHAProxy(0); err != nil {
		t.Fatal(err)
	}
	finishRollout(t, ctx, env, clients, obs)
	assertUsersKeptEverything(t, clients, obs, 0, window{cut, fencedAt.Add(500 * time.Millisecond)})
}

// TestRolloutSurvivesALeaderCrash: two controller replicas; mid-drain the
// leader is killed with SIGKILL. The drains it applied stay on the load
// balancers; the standby takes over when the lease expires and applies
// the next ones.
func TestRolloutSurvivesALeaderCrash(t *testing.T) {
	ctx, env := startEnv(t, Options{ControllerReplicas: 2})
	must.Eventually(t, ctx, 300*time.Millisecond, "a leader", func() bool { return env.Leader() >= 0 })
	clients, obs := startRollout(t, ctx, env)
	leader := env.LeaderProc()
	killed := time.Now()
	leader.Kill()
	// What the leader applied stays while nobody leads.
	before := len(obs.Records())
	// The standby, or the killed replica's restart (the supervisor starts
	// it again, as the kubelet would): whichever takes the expired Lease.
	must.Eventually(t, ctx, 300*time.Millisecond, "another process leading", func() bool { c := env.LeaderProc(); return c != nil && c != leader })
	t.Logf("another replica took over %v after the leader's SIGKILL (lease 15 s)", time.Since(killed).Round(100*time.Millisecond))
	finishRollout(t, ctx, env, clients, obs)
	if after := len(obs.Records()); after <= before {
		t.Errorf("no pod drained after the takeover (%d before, %d after): the standby applied nothing", before, after)
	}
	assertUsersKeptEverything(t, clients, obs, 0)
}

// TestEveryControllerDownKeepsTheLoadBalancersServing: the instances run
// the sample's readiness rule (filled); mid-rollout every controller
// replica stops (SIGTERM, as a bad upgrade or a deleted Deployment) for
// 10 s, five times the age at which the stricter rule (confirmed) takes
// an instance out of rotation. An outage of the controller must not take
// the load balancers out while they still route what they have: both
// instances stay ready throughout, no request fails, no session is lost
// (a pod that terminates meanwhile is not drained; the sessions that land
// on it are in its count, which drainctl waits for). When the
// controllers are back the rollout's drains go on.
func TestEveryControllerDownKeepsTheLoadBalancersServing(t *testing.T) {
	fl := haproxytest.Flavour{Version: haproxytest.Versions(t)[0]}
	ctx, env := startEnv(t, Options{HAProxy: fl, ControllerReplicas: 2, Readiness: haproxytest.ReadyFilled})
	must.Eventually(t, ctx, 300*time.Millisecond, "a leader", func() bool { return env.Leader() >= 0 })
	clients, obs := startRollout(t, ctx, env)
	const outage = 10 * time.Second
	down := time.Now()
	env.StopControllers()
	t.Logf("every controller replica stopped %v after SIGTERM", time.Since(down).Round(10*time.Millisecond))
	unready := map[int]int{}
	samples := 0
	for time.Since(down) < outage && ctx.Err() == nil {
		for i, h := range env.haproxies() {
			if !ready(h.ReadyURL()) {
				unready[i]++
			}
		}
		samples++
		time.Sleep(100 * time.Millisecond)
	}
	for i, n := range unready {
		t.Errorf("instance %d answered its readiness check 503 in %d of %d samples while no controller ran: an outage of the controller took it out of rotation", i, n, samples)
	}
	if err := env.StartControllers(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("a controller leads again %v after the outage began; readiness sampled %d times during it, 503 per instance: %v", time.Since(down).Round(100*time.Millisecond), samples, unready)
	finishRollout(t, ctx, env, clients, obs)
	assertUsersKeptEverything(t, clients, obs, 0)
}

// TestRolloutSurvivesAControlPlaneRestart: mid-drain, kube-apiserver and
// etcd stop for 5 s and start again. The load balancers keep serving
// what they have; when the controller's watches come back it relists,
// and the relist removes or un-drains nothing (the observer would see a
// server dropped early or active again); the rollout then goes on.
func TestRolloutSurvivesAControlPlaneRestart(t *testing.T) {
	// Two replicas, as shipped: the leader loses its Lease in an outage
	// longer than the renew deadline and exits (restarted, as the kubelet
	// would), while the standby keeps every readiness marker fresh.
	ctx, env := startEnv(t, Options{ControllerReplicas: 2})
	clients, obs := startRollout(t, ctx, env)
	began := time.Now()
	if err := env.Cluster.RestartControlPlane(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver ready again %v after the restart began", time.Since(began).Round(100*time.Millisecond))
	finishRollout(t, ctx, env, clients, obs)
	assertUsersKeptEverything(t, clients, obs, 0)
}

// startEnv starts the whole environment for one test, stopped when it
// ends, with eight minutes for the test.
func startEnv(t *testing.T, opts Options) (context.Context, *Env) {
	t.Helper()
	return startEnvWithin(t, opts, 8*time.Minute)
}

// startEnvWithin is startEnv with within for the test.
func startEnvWithin(t *testing.T, opts Options, within time.Duration) (context.Context, *Env) {
	t.Helper()
	cluster.SkipIfShort(t)
	if opts.Node && opts.RealNodeLock == nil {
		// Another package's test may hold the real node: wait for it
		// before the clock starts.
		opts.RealNodeLock = cluster.LockRealNodeT(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	t.Cleanup(cancel)
	opts.Log = t.Logf
	if opts.Bins == nil {
		opts.Bins = bins
	}
	env, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	return ctx, env
}
