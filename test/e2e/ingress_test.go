package e2e

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/test/must"
)

// TestIngressKeepsEverySession is the webhook-only install behind the
// ingress controllers users already run, each built from source: no
// stickydrain controller, two replicas of the ingress behind the front,
// users holding sessions through the ingress's own affinity cookie, and —
// one after the other on the same Deployment, each with a fault in the
// middle of it:
//
//   - a rolling update begun while the webhook is down (the ReplicaSet's
//     pods are refused until it is back: every new pod must still come
//     injected), during which one ingress replica is killed (SIGKILL, its
//     pod crashing) once an old pod drains and a new replica takes its
//     place, and then every replica reloads its configuration for
//     another team's new Ingress;
//   - an eviction (as kubectl drain evicts) with kube-apiserver and etcd
//     restarted mid-drain;
//   - a scale-down with one ingress replica cut off the API server (its
//     watches stalled, as in a network partition) for 6 s from the
//     moment the pod terminates.
//
// The webhook's preStop holds each old pod until its sessions end; the
// ingress keeps their cookies on it, on every replica, and sends new users
// elsewhere — the partitioned replica once it hears of it, which the
// default min-wait (10 s) outlasts.
func TestIngressKeepsEverySession(t *testing.T) {
	for _, kind := range []Ingress{HAProxyIngress, Traefik} {
		t.Run(string(kind), func(t *testing.T) { ingressScenario(t, kind) })
	}
}

// ingressPartition is how long the scale-down's pod terminates with one
// ingress replica cut off the API server: below the default min-wait, so
// the pod is still there when the replica hears of it.
const ingressPartition = 6 * time.Second

func ingressScenario(t *testing.T, kind Ingress) {
	ctx, env := startEnv(t, Options{Ingress: kind})
	const replicas = scenarioReplicas
	deployServing(t, ctx, env)
	if err := env.ScaleIngress(ctx); err != nil {
		t.Fatal(err)
	}
	obs := env.Observe(ctx, 100*time.Millisecond)
	clients := env.StartClients(ctx, scenarioUsers, scenarioIdle, obs)
	// What the users saw, again at the end of a failed run's output (CI
	// shows its end).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed; what the users saw: %+v; problems: %q", clients.Stats(), clients.Problems())
		}
	})
	time.Sleep(5 * time.Second)

	// A rolling update begun with the webhook down.
	stamp := func() string { return time.Now().Format("15:04:05.000") }
	t.Logf("%s webhook stopped; rolling out v2", stamp())
	env.StopWebhook()
	clients.RolloutStarted()
	if err := env.Rollout(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "the ReplicaSet's pod refused while the webhook is down", func() bool { return env.refusedCreates(ctx) > 0 })
	time.Sleep(2 * time.Second)
	if err := env.RestartWebhook(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s webhook back after %d refused pod creations", stamp(), env.refusedCreates(ctx))
	must.Eventually(t, ctx, 300*time.Millisecond, "an old pod draining", obs.AnyDraining)
	// An ingress replica crashing during a drain, then a reload of every
	// replica.
	t.Logf("%s killing an ingress replica", stamp())
	if err := env.CrashIngress(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s its replacement routes; a new Ingress makes every replica reload", stamp())
	if err := env.ReloadIngress(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "the rollout to v2", func() bool { return env.RolloutDone(ctx, "v2", replicas) })
	awaitIngressRemovals(ctx, obs, replicas)
	if u := env.uninjected(ctx, "v2"); len(u) > 0 {
		t.Errorf("pods created after the webhook's outage without the drain: %v", u)
	}

	// An eviction of a pod holding sessions, the control plane restarted
	// while it drains.
	victim := ""
	must.Eventually(t, ctx, 300*time.Millisecond, "a v2 pod holding sessions", func() bool {
		for _, p := range env.Pods(ctx) {
			if p.Sessions > 0 && !p.Terminating {
				victim = p.Name
				return true
			}
		}
		return false
	})
	t.Logf("%s evicting %s", stamp(), victim)
	if err := env.Cluster.Clientset.PolicyV1().Evictions(Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: victim, Namespace: Namespace}}); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "the evicted pod fenced on every replica", func() bool {
		for _, r := range obs.Records() {
			if r.Pod == victim && !r.Drained.IsZero() {
				return true
			}
		}
		return false
	})
	t.Logf("%s restarting kube-apiserver and etcd (5 s down)", stamp())
	if err := env.Cluster.RestartControlPlane(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s kube-apiserver ready again", stamp())
	must.Eventually(t, ctx, 300*time.Millisecond, "the evicted pod replaced", func() bool { return env.RolloutDone(ctx, "v2", replicas) })
	awaitIngressRemovals(ctx, obs, replicas+1)

	// A scale-down by one, the first replica cut off the API server.
	var d appsv1.Deployment
	if err := env.Cluster.Client.Get(ctx, types.NamespacedName{Namespace: Namespace, Name: "web"}, &d); err != nil {
		t.Fatal(err)
	}
	cutOff := env.ingressReplicas()[0].frontAddr()
	heal := env.PartitionIngress(0)
	cut := time.Now()
	t.Logf("%s scaling down, %s cut off the API server for %v", stamp(), cutOff, ingressPartition)
	d.Spec.Replicas = ptr.To[int32](replicas - 1)
	if err := env.Cluster.Client.Update(ctx, &d); err != nil {
		heal()
		t.Fatal(err)
	}
	time.Sleep(ingressPartition)
	heal()
	healed := time.Now()
	must.Eventually(t, ctx, 300*time.Millisecond, "the scale-down", func() bool { return env.RolloutDone(ctx, "v2", replicas-1) })
	awaitIngressRemovals(ctx, obs, replicas+2)
	clients.StopNewSessions()

	t.Logf("%s %s", kind, env.ingressPeer.Version)
	s := everySessionKept(t, clients) // draining: fenced by the ingress
	if s.StartedAfterRollout == 0 || s.OnNewVersion == 0 {
		t.Errorf("no session started on the new version: %+v", s)
	}
	drains := obs.Records()
	if len(drains) != replicas+2 {
		t.Fatalf("observed %d pods terminate, want %d (3 by the rollout, 1 eviction, 1 scale-down): %+v", len(drains), replicas+2, drains)
	}
	for _, d := range drains {
		// Undrained: active again on a replica after it fenced it there
		// (a reload that lost the drain would show so).
		if d.Drained.IsZero() || d.ServerDroppedEarly || d.Undrained {
			t.Errorf("%s: fenced on the ingress %v, dropped while the pod existed %v, active again after its fence %v", d.Pod, d.Drained, d.ServerDroppedEarly, d.Undrained)
			continue
		}
		if d.RemovedFromLB.IsZero() || d.RemovedFromLB.Before(d.Gone) {
			t.Errorf("%s: removed from the ingress at %v, pod gone at %v", d.Pod, d.RemovedFromLB, d.Gone)
		}
		// A session that lands before the fence is kept by drainctl's
		// count, but only if the drain has not ended by then: the default
		// min-wait (10 s) must outlast the proxy's reaction with room.
		// The replica cut off the API server reacts from the heal.
		reactions := map[string]time.Duration{"on every replica %v after it was seen terminating": d.Drained.Sub(d.Seen)}
		if d.Seen.After(cut) {
			reactions = map[string]time.Duration{}
			for via, at := range d.DrainedOn {
				if via == cutOff {
					reactions["on "+via+" %v after the partition healed"] = at.Sub(healed)
				} else {
					reactions["on "+via+" %v after it was seen terminating"] = at.Sub(d.Seen)
				}
			}
			// The cut held: the replica heard nothing until the heal.
			if at, ok := d.DrainedOn[cutOff]; !ok || at.Before(healed) {
				t.Errorf("%s: the replica cut off the API server fenced it at %v, the partition healed at %v: want after the heal", d.Pod, at, healed)
			}
		}
		for how, reaction := range reactions {
			t.Logf("%s: fenced "+how, d.Pod, reaction)
			if reaction > ingressReactionBound {
				t.Errorf("%s: fenced "+how+"; the bound is %v (the default min-wait, which keeps a session that lands before the fence)", d.Pod, reaction, ingressReactionBound)
			}
		}
		preStopReturnedOnTime(ctx, t, env, clients, d.Pod)
	}
}

// ingressReactionBound is the most an ingress proxy may take to fence a
// terminating pod: the webhook's default min-wait (10 s), the margin the
// product itself relies on (drainctl does not end a drain before it, so a
// session that lands before the fence is counted). A peer's reaction time
// on a loaded machine is a figure the test logs, not a promise: a run
// where a Traefik replica fenced at 5.1 s had every session kept.
const ingressReactionBound = api.DefaultMinWait

// awaitIngressRemovals waits up to 20 s until n terminated pods have left the
// ingress; the assertions decide.
func awaitIngressRemovals(ctx context.Context, obs *Observer, n int) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		done := 0
		for _, r := range obs.Records() {
			if !r.RemovedFromLB.IsZero() {
				done++
			}
		}
		if done >= n {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
