package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/must"
)

// TestSoak is the chaos soak (`make soak`; `make test` runs a short
// rotation): it rotates through every flavour a user can put the promise
// on — HAProxy 2.6, 3.0 and 3.2 in slot mode, 3.0 and 3.2 in dynamic-server
// mode (each beside two NGINX Plus API emulators, not NGINX Plus, mapped
// the same Service), haproxy-ingress and Traefik (the webhook alone) —
// one after another, each on an environment of its own for its share of
// the duration: steady sticky users, a rolling update every 30 s, and the
// faults of that flavour's life injected at random times. Behind HAProxy:
// reloads with the shipped procedure, crashes (SIGKILL, restarted empty),
// a 5–20 s partition of one instance from the controller, the leading
// controller killed with SIGKILL, an NGINX Plus emulator restart (with its
// state file). Behind an ingress: a replica crash, a reload of every
// replica (a new Ingress), one replica cut off the API server for 3–8 s,
// the webhook down for 3 s. On every flavour: an eviction of a pod
// holding sessions and a scale-down by one (scaled back 10 s later). A
// fault that takes an instance or replica out
// of rotation waits until another one is in rotation and under no fault.
// It reports, per flavour and fault type, how many were injected and the
// problems users met while each was the latest fault, and per flavour the
// users' totals; the promises are those of every e2e test: zero misrouted
// (but where a fault's own window allows it, counted), zero failed
// requests (but those in flight through a killed process, counted apart),
// every session kept.
//
// STICKYDRAIN_SOAK_DURATION sets the whole rotation's length, shared
// evenly (default: 40 s per flavour); STICKYDRAIN_SOAK_SEED the faults'
// order (default: the clock); STICKYDRAIN_SOAK_FLAVOURS the flavours, by
// name, comma-separated (default: every one); STICKYDRAIN_SOAK_SHARD=k/n
// every n-th of them from the k-th; STICKYDRAIN_SOAK_FAULTS the faults
// injected, by name (default: every one of the flavour);
// STICKYDRAIN_SOAK_TABLE a file to write the table to (Markdown).
var errSkip = errors.New("not injected now")

// soakTarget is one flavour of the rotation: an HAProxy version and mode
// with the controller, or an ingress with the webhook alone.
type soakTarget struct {
	HAProxy haproxytest.Flavour
	Ingress Ingress
}

func (s soakTarget) Name() string {
	if s.Ingress != "" {
		return string(s.Ingress)
	}
	return s.HAProxy.Name()
}

// soakTargets are the flavours names asks for (comma-separated; empty:
// every HAProxy version in slot mode and, 3.0 on, in dynamic mode, then
// the ingress controllers), or an error naming the accepted ones.
func soakTargets(vs []haproxytest.Version, names string) ([]soakTarget, error) {
	var all []soakTarget
	for _, v := range vs {
		all = append(all, soakTarget{HAProxy: haproxytest.Flavour{Version: v}})
		if v.AtLeast(3, 0) {
			all = append(all, soakTarget{HAProxy: haproxytest.Flavour{Version: v, Dynamic: true}})
		}
	}
	all = append(all, soakTarget{Ingress: HAProxyIngress}, soakTarget{Ingress: Traefik})
	return pickNamed(all, soakTarget.Name, names, "STICKYDRAIN_SOAK_FLAVOURS", "a flavour here")
}

// pickNamed is the items whose names are listed in names
// (comma-separated, in that order; every item when empty), or an error
// naming the variable env, the unknown name and the accepted ones.
func pickNamed[T any](items []T, name func(T) string, names, env, what string) ([]T, error) {
	if strings.TrimSpace(names) == "" {
		return items, nil
	}
	var known []string
	for _, it := range items {
		known = append(known, name(it))
	}
	var out []T
	for _, n := range strings.Split(names, ",") {
		i := slices.Index(known, strings.TrimSpace(n))
		if i < 0 {
			return nil, fmt.Errorf("%s: %q is not %s; want a comma-separated list of %s", env, n, what, strings.Join(known, ", "))
		}
		out = append(out, items[i])
	}
	return out, nil
}

// soakShard is the shard k/n of targets (every n-th from the k-th, k
// from 1; make test runs the rotation as two shards at once), or all of
// them when shard is empty.
func soakShard(targets []soakTarget, shard string) ([]soakTarget, error) {
	if shard == "" {
		return targets, nil
	}
	var k, n int
	if _, err := fmt.Sscanf(shard, "%d/%d", &k, &n); err != nil || n < 1 || k < 1 || k > n {
		return nil, fmt.Errorf("STICKYDRAIN_SOAK_SHARD=%q: want k/n with 1 ≤ k ≤ n, e.g. 1/2", shard)
	}
	var out []soakTarget
	for i, t := range targets {
		if i%n == k-1 {
			out = append(out, t)
		}
	}
	return out, nil
}

// soakRow is one flavour's outcome.
type soakRow struct {
	flavour  string
	faults   []string       // in the order the flavour defines them
	injected map[string]int // per fault
	problems map[string]int // users' problems while that fault was the latest
	stats    Stats
	rollouts int
	// allowed are the misroutes inside a fault's own window (a partitioned
	// proxy routing with what it had), counted, not failed.
	allowed int
	// memory is the controller's, start → half time → end (HAProxy
	// flavours).
	memory string
}

func TestSoak(t *testing.T) {
	cluster.SkipIfShort(t)
	targets, err := soakTargets(haproxytest.Versions(t), os.Getenv("STICKYDRAIN_SOAK_FLAVOURS"))
	if err != nil {
		t.Fatal(err)
	}
	if targets, err = soakShard(targets, os.Getenv("STICKYDRAIN_SOAK_SHARD")); err != nil {
		t.Fatal(err)
	}
	each := 40 * time.Second
	if v := os.Getenv("STICKYDRAIN_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("STICKYDRAIN_SOAK_DURATION=%q: want a duration such as 30m", v)
		}
		each = d / time.Duration(len(targets))
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("STICKYDRAIN_SOAK_SEED"); v != "" {
		if _, err := fmt.Sscan(v, &seed); err != nil {
			t.Fatalf("STICKYDRAIN_SOAK_SEED=%q: want a number", v)
		}
	}
	var names []string
	for _, s := range targets {
		names = append(names, s.Name())
	}
	t.Logf("soak: %v on each of %s, seed %d (STICKYDRAIN_SOAK_SEED=%d repeats this order of faults)", each, strings.Join(names, ", "), seed, seed)
	var rows []soakRow
	for i, target := range targets {
		t.Run(target.Name(), func(t *testing.T) {
			// Each flavour its own sequence of the seed.
			rng := rand.New(rand.NewPCG(seed, uint64(i+1)))
			rows = append(rows, soakOne(t, target, each, rng))
		})
	}
	table := soakTable(fmt.Sprintf("%v per flavour, seed %d.\n\n", each, seed), rows)
	t.Logf("soak table:\n%s", table)
	if f := os.Getenv("STICKYDRAIN_SOAK_TABLE"); f != "" {
		if err := os.WriteFile(f, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// soakTable is the rotation's outcome in Markdown: one row per flavour
// and fault type, then the users' totals per flavour.
func soakTable(header string, rows []soakRow) string {
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("| flavour | fault | injected | users' problems while it was the latest fault |\n| --- | --- | --- | --- |\n")
	for _, r := range rows {
		for _, f := range r.faults {
			fmt.Fprintf(&b, "| %s | %s | %d | %d |\n", r.flavour, f, r.injected[f], r.problems[f])
		}
	}
	b.WriteString("\n| flavour | rollouts | requests | failed | in flight at a kill | misrouted (in a fault's own window) | sessions kept | controller memory, start → half time → end |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		s := r.stats
		memory := r.memory
		if memory == "" {
			memory = "(no controller)"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d (%d) | %d of %d | %s |\n", r.flavour, r.rollouts, s.Requests, s.Errors, s.InFlightAtKill, s.Misrouted, r.allowed, s.SessionsKept, s.Sessions, memory)
	}
	return b.String()
}

// soakFault is one fault a flavour can be given; do answers errSkip when
// it cannot be injected now.
type soakFault struct {
	name string
	do   func() error
}

// soakOne runs one flavour for d and asserts its promises; its row's
// flavour says "(failed)" when they did not hold.
func soakOne(t *testing.T, target soakTarget, d time.Duration, rng *rand.Rand) soakRow {
	ctx, cancel := context.WithTimeout(context.Background(), d+8*time.Minute)
	defer cancel()
	opts := Options{Log: t.Logf, HAProxy: target.HAProxy, Ingress: target.Ingress, Bins: bins}
	if target.Ingress == "" {
		opts.ControllerReplicas, opts.NGINXPlus, opts.ControllerPprof = 2, true, true
	}
	env, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	defer env.KeepLogsIfFailed(t)
	deployServing(t, ctx, env)
	if target.Ingress != "" {
		if err := env.ScaleIngress(ctx); err != nil {
			t.Fatal(err)
		}
	}
	clients, obs := usersAndRollout(t, ctx, env)
	version := 2
	var mem *MemoryWatch
	if target.Ingress == "" {
		// The controllers' memory over the flavour's run (a leader kill
		// starts a new process: the longest-sampled one is reported).
		if mem, err = env.WatchMemory(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// Faults end on their own (partitions, the webhook's outage) in
	// goroutines; the soak waits for them before it ends.
	var pending sync.WaitGroup
	var asyncMu sync.Mutex
	var asyncErrs []error
	async := func(f func() error) {
		pending.Add(1)
		go func() {
			defer pending.Done()
			if err := f(); err != nil {
				asyncMu.Lock()
				asyncErrs = append(asyncErrs, err)
				asyncMu.Unlock()
			}
		}()
	}
	var windows []window // where a fault's own misroutes are allowed
	var faults []soakFault
	if target.Ingress == "" {
		faults = haproxySoakFaults(ctx, env, rng, async, &windows)
	} else {
		faults = ingressSoakFaults(ctx, env, rng, async, &windows)
	}
	faults = append(faults, podSoakFaults(ctx, env, rng, async)...)
	if faults, err = onlyFaults(faults, os.Getenv("STICKYDRAIN_SOAK_FAULTS")); err != nil {
		t.Fatal(err)
	}

	type record struct {
		name string
		at   time.Time
	}
	var injected []record
	end := time.Now().Add(d)
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
		if time.Now().After(nextRollout) && env.RolloutDone(ctx, fmt.Sprintf("v%d", version), scenarioReplicas) {
			version++
			clients.RolloutStarted()
			if err := env.Rollout(ctx, fmt.Sprintf("v%d", version)); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s rollout to v%d", time.Now().Format("15:04:05.000"), version)
			nextRollout = time.Now().Add(30 * time.Second)
		}
	}
	pending.Wait()
	memory := ""
	if mem != nil {
		mem.Stop()
		var detail string
		leader := 0
		if c := env.LeaderProc(); c != nil {
			leader = c.Pid()
		}
		memory, detail = mem.Report(leader)
		t.Log(detail)
	}
	for _, err := range asyncErrs {
		t.Errorf("a fault: %v", err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "the last rollout", func() bool {
		return env.RolloutDone(ctx, fmt.Sprintf("v%d", version), scenarioReplicas)
	})
	clients.StopNewSessions()
	if target.Ingress != "" {
		awaitIngressRemovals(ctx, obs, len(obs.Records()))
	} else {
		AwaitRemovals(ctx, obs, true)
	}

	row := soakRow{flavour: target.Name(), injected: map[string]int{}, problems: map[string]int{}, stats: clients.Stats(), rollouts: version - 1, memory: memory}
	for _, f := range faults {
		row.faults = append(row.faults, f.name)
	}
	for _, r := range injected {
		row.injected[r.name]++
	}
	for _, p := range clients.ProblemTimes() {
		name := "before any fault"
		for _, r := range injected {
			if !r.at.After(p) {
				name = r.name
			}
		}
		row.problems[name]++
	}
	if n := row.problems["before any fault"]; n > 0 {
		row.faults = append(row.faults, "before any fault")
	}
	row.allowed, _ = misroutes(clients, windows)
	t.Logf("%s", soakTable("", []soakRow{row}))
	if target.Ingress != "" {
		// A killed proxy fails the requests in flight through it, whichever
		// proxy it is: up to three a kill, as for HAProxy (9 users, each
		// with at most one request out; one a kill was too few: two were
		// in flight through a killed Traefik replica in a CI run, nothing
		// else wrong).
		assertIngressKeptEverything(t, clients, obs, 3*row.injected["ingress-crash"], windows...)
	} else {
		assertUsersKeptEverything(t, clients, obs, 3*row.injected["haproxy-crash"], windows...)
	}
	if t.Failed() {
		row.flavour += " (failed)"
	}
	return row
}

// haproxySoakFaults are the faults of an HAProxy flavour's life.
func haproxySoakFaults(ctx context.Context, env *Env, rng *rand.Rand, async func(func() error), windows *[]window) []soakFault {
	// A fault that takes an HAProxy instance out of rotation is injected
	// only while another instance is in rotation and under no fault: with
	// none ready, a Service (or cloud load balancer) has nowhere to send
	// users — an outage of the load balancer by definition, not what this
	// soak measures. busy holds, per instance, until when a fault keeps it
	// out.
	busy := map[int]time.Time{}
	pick := func(out time.Duration) (int, error) {
		var free []int
		for i := range env.haproxies() {
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
	return []soakFault{
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
			// A partitioned instance routes with what it had until its
			// marker ages out (2 s, then the front's next check).
			now := time.Now()
			*windows = append(*windows, window{now, now.Add(3 * time.Second)})
			async(func() error { return env.PartitionHAProxy(i, d) })
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
}

// onlyFaults keeps the faults names lists (comma-separated; all when
// empty): a soak without leader kills, say, keeps one controller process
// for its whole length, to follow its memory.
func onlyFaults(faults []soakFault, names string) ([]soakFault, error) {
	return pickNamed(faults, func(f soakFault) string { return f.name }, names, "STICKYDRAIN_SOAK_FAULTS", "a fault of this flavour")
}

// podSoakFaults take pods away as users' clusters do, on every flavour:
// an eviction (as kubectl drain evicts) of a pod holding sessions, and a
// scale-down by one, scaled back 10 s later.
func podSoakFaults(ctx context.Context, env *Env, rng *rand.Rand, async func(func() error)) []soakFault {
	var scaledUntil time.Time
	return []soakFault{
		{"eviction", func() error {
			var holding []string
			for _, p := range env.Pods(ctx) {
				if p.Sessions > 0 && !p.Terminating && p.Ready {
					holding = append(holding, p.Name)
				}
			}
			if len(holding) == 0 {
				return errSkip
			}
			victim := holding[rng.IntN(len(holding))]
			return env.Cluster.Clientset.PolicyV1().Evictions(Namespace).Evict(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Name: victim, Namespace: Namespace}})
		}},
		{"scale-down", func() error {
			if time.Now().Before(scaledUntil) {
				return errSkip
			}
			scaledUntil = time.Now().Add(12 * time.Second)
			if err := env.ScaleTo(ctx, scenarioReplicas-1); err != nil {
				return err
			}
			async(func() error { time.Sleep(10 * time.Second); return env.ScaleTo(ctx, scenarioReplicas) })
			return nil
		}},
	}
}

// ingressSoakFaults are the faults of an ingress flavour's life (the
// webhook-only install).
func ingressSoakFaults(ctx context.Context, env *Env, rng *rand.Rand, async func(func() error), windows *[]window) []soakFault {
	// One fault at a time on the replicas (a crash replaces the first; a
	// partition cuts one): until busy, neither is injected.
	var busy time.Time
	reloads := 0
	return []soakFault{
		{"ingress-crash", func() error {
			if time.Now().Before(busy) {
				return errSkip
			}
			busy = time.Now().Add(2 * time.Second)
			return env.CrashIngress(ctx)
		}},
		{"ingress-reload", func() error {
			reloads++
			return env.ReloadIngress(ctx, fmt.Sprintf("other-%d", reloads))
		}},
		{"ingress-partition", func() error {
			if time.Now().Before(busy) {
				return errSkip
			}
			// Below the default min-wait: a pod that terminates during the
			// cut is still there when the replica hears of it
			// (docs/ingress.md says what a longer one does).
			d := time.Duration(3+rng.IntN(6)) * time.Second
			busy = time.Now().Add(d + 2*time.Second)
			i := rng.IntN(len(env.ingressReplicas()))
			heal := env.PartitionIngress(i)
			// The cut replica routes with what it had: a cookie of a pod
			// that became ready meanwhile is unknown to it, until it hears
			// of the pod (within the reaction bound after the heal).
			now := time.Now()
			*windows = append(*windows, window{now, now.Add(d + ingressReactionBound)})
			async(func() error { time.Sleep(d); heal(); return nil })
			return nil
		}},
		{"webhook-outage", func() error {
			// Here, not in a goroutine: the next outage must not stop the
			// webhook while this one's restart is under way.
			env.StopWebhook()
			time.Sleep(3 * time.Second)
			return env.RestartWebhook(ctx)
		}},
	}
}

// assertIngressKeptEverything is assertUsersKeptEverything behind an
// ingress: what the users saw, every terminating pod fenced and removed
// only once gone, and every pod the webhook created injected.
func assertIngressKeptEverything(t *testing.T, clients *Clients, obs *Observer, maxInFlight int, windows ...window) {
	t.Helper()
	assertUsersSaw(t, clients, maxInFlight, windows)
	for _, d := range obs.Records() {
		if d.Drained.IsZero() && !d.ServedTerminating {
			continue // never ready while terminating: no session there
		}
		if d.Drained.IsZero() || d.ServerDroppedEarly || d.Undrained {
			t.Errorf("%s: fenced on the ingress %v, dropped while the pod existed %v, active again after its fence %v", d.Pod, d.Drained, d.ServerDroppedEarly, d.Undrained)
		}
		if d.RemovedFromLB.IsZero() || d.RemovedFromLB.Before(d.Gone) {
			t.Errorf("%s: removed from the ingress at %v, pod gone at %v", d.Pod, d.RemovedFromLB, d.Gone)
		}
	}
	if u := clients.env.uninjected(context.Background(), ""); len(u) > 0 {
		t.Errorf("pods without the drain (created around a webhook outage?): %v", u)
	}
}
