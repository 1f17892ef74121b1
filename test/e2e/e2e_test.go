package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/test/podhost"
)

// TestRollingUpdateKeepsEverySession is the scenario of `make demo`,
// asserted: the real webhook and controller binaries, two real HAProxy
// instances, an opted-in Namespace, 3 replicas of the session app, users
// holding sticky sessions through a rollout.
func TestRollingUpdateKeepsEverySession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env, err := Start(ctx, Options{Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	const replicas, users, idle = 3, 9, 8 * time.Second
	if err := env.Deploy(ctx, replicas, idle); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "3 ready v1 pods active on both HAProxy", func() bool {
		if !env.RolloutDone(ctx, "v1", replicas) {
			return false
		}
		for _, p := range env.Pods(ctx) {
			if len(p.LB) != 2 || p.LB[0] != "active" || p.LB[1] != "active" {
				return false
			}
		}
		return true
	})
	obs := env.Observe(ctx, 100*time.Millisecond)
	clients := env.StartClients(ctx, users, idle, obs)
	time.Sleep(6 * time.Second)
	clients.RolloutStarted()
	if err := env.Rollout(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "the rollout to v2", func() bool { return env.RolloutDone(ctx, "v2", replicas) })
	clients.StopNewSessions()
	time.Sleep(300 * time.Millisecond) // a last sample of the observer

	s := clients.Stats()
	t.Logf("clients: %+v", s)
	for _, p := range clients.Problems() {
		t.Errorf("problem: %s", p)
	}
	if s.Misrouted != 0 || s.Errors != 0 || s.SessionsKept != s.Sessions {
		t.Errorf("sessions: %d ended, %d kept; %d misrouted, %d errors", s.Sessions, s.SessionsKept, s.Misrouted, s.Errors)
	}
	if s.NewOnDraining != 0 || s.ReloginsOnDraining != 0 {
		t.Errorf("%d new sessions and %d re-logins landed on a draining pod", s.NewOnDraining, s.ReloginsOnDraining)
	}
	if s.StartedAfterRollout == 0 || s.OnNewVersion == 0 {
		t.Errorf("no session started on the new version during the rollout: %+v", s)
	}
	drains := obs.Records()
	if len(drains) != replicas {
		t.Fatalf("observed %d old pods drain, want %d", len(drains), replicas)
	}
	for _, d := range drains {
		if d.Drained.IsZero() || d.ServerDroppedEarly {
			t.Errorf("%s: drained %v, dropped early %v", d.Pod, d.Drained, d.ServerDroppedEarly)
			continue
		}
		// Well before drainctl's min-wait (3s) runs out.
		if delay := d.Drained.Sub(d.Seen); delay > 2*time.Second {
			t.Errorf("%s: drained on both instances %v after being seen terminating; min-wait is 3s", d.Pod, delay)
		}
		if d.RemovedFromLB.IsZero() || d.RemovedFromLB.Before(d.Gone) {
			t.Errorf("%s: removed from the load balancers at %v, pod gone at %v", d.Pod, d.RemovedFromLB, d.Gone)
		}
		ev, err := env.Host.WaitFor(ctx, Namespace, d.Pod, "app", podhost.StepPreStopFinished)
		if err != nil {
			t.Fatal(err)
		}
		if ev.ExitCode != 0 {
			t.Errorf("%s: preStop exit %d, want 0 (drained: its sessions ended)", d.Pod, ev.ExitCode)
		}
		start, _ := env.Host.WaitFor(ctx, Namespace, d.Pod, "app", podhost.StepPreStopStarted)
		t.Logf("%s: drained on both HAProxy %v after seen terminating; preStop waited %v", d.Pod, d.Drained.Sub(d.Seen), ev.Time.Sub(start.Time))
	}
}

func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}
