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

// TestPodOptInByLabelLimitedThroughTheAPIServer: with the operator's
// --pod-opt-in-namespaces=shop, a pod labelling itself in is injected in
// shop and in a Namespace that opted in itself, and elsewhere is created
// as it is (not refused) with a warning — through the real API server.
func TestPodOptInByLabelLimitedThroughTheAPIServer(t *testing.T) {
	ctx, c := admissionEnv(t, "--pod-opt-in-namespaces=shop")
	cs, seen := warningsClient(t, c)
	for name, labels := range map[string]map[string]string{"shop": nil, "other": nil, "team": {api.OptInLabel: api.LabelEnabled}} {
		must.OK(t, c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}))
	}
	pod := func(ns string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, Labels: map[string]string{api.OptInLabel: api.LabelEnabled},
			Annotations: map[string]string{api.AnnotationURL: "http://localhost:8080/sessions"}},
			Spec: sessionDeployment(ns, "p", nil).Spec.Template.Spec}
	}
	hooked := func(p *corev1.Pod) bool {
		h := p.Spec.Containers[0].Lifecycle
		return h != nil && h.PreStop != nil && h.PreStop.Exec != nil && strings.Contains(strings.Join(h.PreStop.Exec.Command, " "), "drainctl wait")
	}
	must.Eventually(t, ctx, 200*time.Millisecond, "the webhook answering for shop", func() bool {
		got, err := cs.CoreV1().Pods("shop").Create(ctx, pod("shop"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && hooked(got)
	})
	const want = "stickydrain: this pod opts in by its label stickydrain.io/drain=enabled, but the operator lets pods opt in by label only in Namespaces shop: it gets no drain; label Namespace other instead, or ask the operator (the webhook's --pod-opt-in-namespaces)"
	for _, tc := range []struct {
		ns             string
		hooked, warned bool
	}{{"shop", true, false}, {"team", true, false}, {"other", false, true}} {
		_ = seen.take()
		got, err := cs.CoreV1().Pods(tc.ns).Create(ctx, pod(tc.ns), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Errorf("%s: %v; want the pod created", tc.ns, err)
			continue
		}
		if warned := slices.Contains(seen.take(), want); hooked(got) != tc.hooked || warned != tc.warned {
			t.Errorf("%s: hooked %v (want %v), warned %v (want %v)", tc.ns, hooked(got), tc.hooked, warned, tc.warned)
		}
	}
}
