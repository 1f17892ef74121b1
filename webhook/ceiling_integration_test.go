package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/test/must"
)

// TestTheCeilingOnMaxWaitThroughTheAPIServer: with the operator's
// --max-wait-ceiling=30m, a workload asking for a 12h max-wait is warned at
// `kubectl apply`, and its pods get the ceiling (their preStop and grace
// period) with the same warning; a pod within the ceiling is left as it
// asked — through the real API server.
func TestTheCeilingOnMaxWaitThroughTheAPIServer(t *testing.T) {
	ctx, c := admissionEnv(t, "--max-wait-ceiling=30m")
	cs, seen := warningsClient(t, c)
	must.OK(t, c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{api.OptInLabel: api.LabelEnabled}}}))
	const want = "stickydrain: annotation stickydrain.io/max-wait (12h0m0s) is above the operator's ceiling (30m0s, the webhook's --max-wait-ceiling): each pod drains for 30m0s at most"
	long := sessionDeployment("shop", "long", map[string]string{api.AnnotationURL: "http://localhost:8080/sessions", api.AnnotationMaxWait: "12h"})
	must.Eventually(t, ctx, 200*time.Millisecond, "the validating webhook's warning at apply", func() bool {
		_ = seen.take()
		_, err := cs.AppsV1().Deployments("shop").Create(ctx, long, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && len(seen.take()) > 0
	})
	_, err := cs.AppsV1().Deployments("shop").Create(ctx, long, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	must.OK(t, err)
	if got := seen.take(); !slices.Contains(got, want) {
		t.Errorf("kubectl apply of a 12h max-wait printed %q, want %q among them", got, want)
	}
	for _, tc := range []struct {
		maxWait, arg string
		warned       bool
	}{{"12h", "--max-wait=30m0s", true}, {"10m", "--max-wait=10m0s", false}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", Labels: map[string]string{api.OptInLabel: api.LabelEnabled},
			Annotations: map[string]string{api.AnnotationURL: "http://localhost:8080/sessions", api.AnnotationMaxWait: tc.maxWait}},
			Spec: long.Spec.Template.Spec}
		got, err := cs.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		must.OK(t, err)
		warnings := seen.take()
		hook := got.Spec.Containers[0].Lifecycle
		if hook == nil || hook.PreStop == nil || hook.PreStop.Exec == nil || !strings.Contains(strings.Join(hook.PreStop.Exec.Command, " "), tc.arg) {
			t.Errorf("max-wait %s: preStop %+v, want %s", tc.maxWait, hook, tc.arg)
			continue
		}
		max, _ := time.ParseDuration(strings.TrimPrefix(tc.arg, "--max-wait="))
		if g := time.Duration(*got.Spec.TerminationGracePeriodSeconds) * time.Second; g < max || g > max+time.Minute {
			t.Errorf("max-wait %s: grace period %v, want the max-wait (%v) and its margins", tc.maxWait, g, max)
		}
		if slices.Contains(warnings, want) != tc.warned {
			t.Errorf("max-wait %s: warnings %q; want the ceiling's: %v", tc.maxWait, warnings, tc.warned)
		}
	}
}
