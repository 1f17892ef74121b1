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
)

// TestIngressKeepsEverySession is the webhook-only install behind the
// ingress controllers users already run, each built from source: no
// stickydrain controller, two replicas of the ingress behind the front,
// users holding sessions through the ingress's own affinity cookie, and —
// one after the other on the same Deployment — a rolling update during
// which one ingress replica is killed (SIGKILL, its pod crashing) once an
// old pod drains and a new replica takes its place, an eviction (as
// kubectl drain evicts) and a scale-down. The webhook's preStop holds each
// old pod until its sessions end; the ingress keeps their cookies on it,
// on every replica, and sends new users elsewhere.
func TestIngressKeepsEverySession(t *testing.T) {
	for _, kind := range []Ingress{HAProxyIngress, Traefik} {
		t.Run(string(kind), func(t *testing.T) { ingressScenario(t, kind) })
	}
}

func ingressScenario(t *testing.T, kind Ingress) {
	ctx, env := startEnv(t, Options{Ingress: kind})
	const replicas = scenarioReplicas
	deployServing(t, ctx, env)
	if err := env.ScaleIngress(ctx); err != nil {
		t.Fatal(err)
	}
	// A rolling update, and an ingress replica crashing during a drain.
	clients, obs := usersAndRollout(t, ctx, env)
	t.Logf("%s killing an ingress replica", time.Now().Format("15:04:05.000"))
	if err := env.CrashIngress(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s its replacement routes", time.Now().Format("15:04:05.000"))
	waitUntil(t, ctx, "the rollout to v2", func() bool { return env.RolloutDone(ctx, "v2", replicas) })
	settleIngress(ctx, obs, replicas)

	// An eviction of a pod holding sessions.
	victim := ""
	waitUntil(t, ctx, "a v2 pod holding sessions", func() bool {
		for _, p := range env.Pods(ctx) {
			if p.Sessions > 0 && !p.Terminating {
				victim = p.Name
				return true
			}
		}
		return false
	})
	t.Logf("%s evicting %s", time.Now().Format("15:04:05.000"), victim)
	if err := env.Cluster.Clientset.PolicyV1().Evictions(Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: victim, Namespace: Namespace}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "the evicted pod replaced", func() bool { return env.RolloutDone(ctx, "v2", replicas) })
	settleIngress(ctx, obs, replicas+1)

	// A scale-down by one.
	var d appsv1.Deployment
	if err := env.Cluster.Client.Get(ctx, types.NamespacedName{Namespace: Namespace, Name: "web"}, &d); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s scaling down", time.Now().Format("15:04:05.000"))
	d.Spec.Replicas = ptr.To[int32](replicas - 1)
	if err := env.Cluster.Client.Update(ctx, &d); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "the scale-down", func() bool { return env.RolloutDone(ctx, "v2", replicas-1) })
	settleIngress(ctx, obs, replicas+2)
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
		if d.Drained.IsZero() || d.ServerDroppedEarly {
			t.Errorf("%s: fenced on the ingress %v, dropped while the pod existed %v", d.Pod, d.Drained, d.ServerDroppedEarly)
			continue
		}
		if d.RemovedFromLB.IsZero() || d.RemovedFromLB.Before(d.Gone) {
			t.Errorf("%s: removed from the ingress at %v, pod gone at %v", d.Pod, d.RemovedFromLB, d.Gone)
		}
		reaction := d.Drained.Sub(d.Seen)
		t.Logf("%s: the ingress fenced it %v after it was seen terminating", d.Pod, reaction)
		// A session that lands before the fence is kept by drainctl's
		// count, but only if the drain has not ended by then: the default
		// min-wait (10 s) must outlast the proxy's reaction with room.
		if reaction > ingressReactionBound {
			t.Errorf("%s: the ingress fenced it %v after it was seen terminating; the bound is %v (half the default min-wait, which keeps a session that lands before the fence)", d.Pod, reaction, ingressReactionBound)
		}
		preStopReturnedOnTime(ctx, t, env, clients, d.Pod)
	}
}

// ingressReactionBound is the most an ingress proxy may take to fence a
// terminating pod: half the webhook's default min-wait (10 s).
const ingressReactionBound = 5 * time.Second

// settleIngress waits up to 20 s until n terminated pods have left the
// ingress; the assertions decide.
func settleIngress(ctx context.Context, obs *Observer, n int) {
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
