package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/must"
)

// TestUninstallInOrderLosesNoRequest follows docs/install.md's
// "Uninstall", step by step, with users holding sticky sessions through
// two HAProxy instances all along (slot mode, the newest version):
//
//  1. the Namespace stops opting in and the app rolls: the old pods still
//     drain (the controller runs), the new ones get no preStop;
//  2. the operator's own discovery takes over: each HAProxy is reloaded
//     with the shipped procedure and a configuration whose frontend sends
//     users to a backend of the operator's, listing the pods — with the
//     same cookie key and the same addresses, hence the same dynamic
//     cookies as the slots the controller filled — and whose readiness no
//     longer asks for the controller's marker;
//  3. the Service is unmapped: the controller takes its servers out, and
//     the users' cookies find the operator's servers;
//  4. the webhook configurations are deleted, then a pod is created: not
//     refused;
//  5. the controller and the webhook are stopped, for longer than the
//     marker's 2 s: the instances stay in rotation.
//
// What the users saw decides: no failed or misrouted request, every
// session kept, no pod creation refused.
func TestUninstallInOrderLosesNoRequest(t *testing.T) {
	vs := haproxytest.Versions(t)
	fl := haproxytest.Flavour{Version: vs[len(vs)-1]}
	ctx, env := startEnv(t, Options{HAProxy: fl})
	k := env.Cluster.Client
	const replicas, users, idle = 3, 9, 8 * time.Second
	if err := env.Deploy(ctx, replicas, idle); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "3 ready v1 pods active on both HAProxy", func() bool { return env.Serving(ctx, "v1", replicas) })
	obs := env.Observe(ctx, 100*time.Millisecond)
	clients := env.StartClients(ctx, users, idle, obs)
	time.Sleep(4 * time.Second)

	// 1. Stop opting in, and roll.
	var ns corev1.Namespace
	must.OK(t, k.Get(ctx, types.NamespacedName{Name: Namespace}, &ns))
	delete(ns.Labels, api.OptInLabel)
	must.OK(t, k.Update(ctx, &ns))
	t.Log("step 1: the Namespace no longer opts in; rolling to v2")
	clients.RolloutStarted()
	must.OK(t, env.Rollout(ctx, "v2"))
	must.Eventually(t, ctx, 300*time.Millisecond, "the rollout to v2", func() bool { return env.RolloutDone(ctx, "v2", replicas) })
	AwaitRemovals(ctx, obs, false)
	for _, d := range obs.Records() {
		if d.Drained.IsZero() || d.ServerDroppedEarly {
			t.Errorf("step 1: old pod %s: drained %v, dropped early %v (the controller still runs: it must drain)", d.Pod, d.Drained, d.ServerDroppedEarly)
		}
	}
	var pods corev1.PodList
	must.OK(t, k.List(ctx, &pods, client.InNamespace(Namespace), client.MatchingLabels{"app": "web"}))
	var ips []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Annotations[api.AnnotationStatus] != "" || p.Spec.Containers[0].Lifecycle != nil {
			t.Errorf("step 1: pod %s created after the opt-out was injected", p.Name)
		}
		ips = append(ips, p.Status.PodIP)
	}
	if len(ips) != replicas {
		t.Fatalf("step 1: %d v2 pods running, want %d", len(ips), replicas)
	}

	// 2. The operator's own servers, and readiness without the marker.
	t.Logf("step 2: each HAProxy reloaded with its own servers %v and readiness without the controller's marker", ips)
	readiness := haproxytest.ReadinessRules(haproxytest.ReadyConfirmed, env.readyMap())
	gate := haproxytest.GateFor(env.readyMap(), haproxytest.GateScript()).Frontend
	for i, h := range env.haproxies() {
		err := h.Rewrite(func(cfg string) (string, error) {
			if !strings.Contains(cfg, readiness) || !strings.Contains(cfg, gate) {
				return "", fmt.Errorf("the readiness rules or the gate are not where the test put them:\n%s", cfg)
			}
			cfg = strings.Replace(cfg, readiness, "    http-request return status 200 content-type text/plain string ready\n", 1)
			cfg = strings.Replace(cfg, gate, "", 1)
			// A backend of its own, not servers beside the slots: in slot
			// mode every server of the controller's backend is a slot, which
			// unmapping would free. The same cookie settings and key give
			// each pod the cookie its slot gave it.
			key := regexp.MustCompile(`(?m)^\s*dynamic-cookie-key \S+$`).FindString(cfg)
			if key == "" || !strings.Contains(cfg, "    default_backend shop\n") {
				return "", fmt.Errorf("no dynamic-cookie-key or default_backend shop in:\n%s", cfg)
			}
			own := "backend shop-own\n    balance roundrobin\n    cookie SRV insert indirect nocache dynamic\n" + key + "\n"
			for j, ip := range ips {
				own += fmt.Sprintf("    server own-%d %s:8080\n", j+1, ip)
			}
			return strings.Replace(cfg, "    default_backend shop\n", "    default_backend shop-own\n", 1) + own, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := env.ReloadHAProxy(ctx, i); err != nil {
			t.Fatal(err)
		}
	}

	// 3. Unmap the Service: the controller takes its servers out.
	t.Log("step 3: the Service's stickydrain.io/upstreams removed")
	var svc corev1.Service
	must.OK(t, k.Get(ctx, types.NamespacedName{Namespace: Namespace, Name: "web"}, &svc))
	delete(svc.Annotations, api.AnnotationUpstreams)
	must.OK(t, k.Update(ctx, &svc))
	must.Eventually(t, ctx, 300*time.Millisecond, "the controller's servers out of both instances", func() bool {
		for _, v := range env.views(ctx, false) {
			if len(v.states) != 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(3 * time.Second) // users go on through the operator's servers

	// 4. Delete the webhook configurations; pods are created unhooked.
	t.Log("step 4: the webhook configurations deleted; a fourth pod created")
	for _, name := range []string{"stickydrain", "stickydrain-other-kinds"} {
		must.OK(t, k.Delete(ctx, &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	}
	must.OK(t, k.Delete(ctx, &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "stickydrain"}}))
	var d appsv1.Deployment
	must.OK(t, k.Get(ctx, types.NamespacedName{Namespace: Namespace, Name: "web"}, &d))
	d.Spec.Replicas = ptr.To[int32](replicas + 1)
	must.OK(t, k.Update(ctx, &d))
	must.Eventually(t, ctx, 300*time.Millisecond, "a fourth pod ready", func() bool {
		return k.Get(ctx, types.NamespacedName{Namespace: Namespace, Name: "web"}, &d) == nil && d.Status.ReadyReplicas == replicas+1
	})

	// 5. The rest of the install goes: the instances stay in rotation.
	t.Log("step 5: the controller and the webhook stopped")
	env.StopStickydrain()
	time.Sleep(6 * time.Second) // three times the marker's 2 s
	for i, h := range env.haproxies() {
		if !ready(h.ReadyURL()) {
			t.Errorf("step 5: HAProxy %d left rotation once the controller was gone", i+1)
		}
	}
	clients.StopNewSessions()
	time.Sleep(idle + 2*time.Second) // the last sessions end

	s := everySessionKept(t, clients)
	if s.Sessions == 0 {
		t.Fatal("no session ended: nothing was tested")
	}
	var events corev1.EventList
	must.OK(t, k.List(ctx, &events, client.InNamespace(Namespace)))
	for _, ev := range events.Items {
		if ev.Reason == "FailedCreate" {
			t.Errorf("a pod creation was refused: %s", ev.Message)
		}
	}
}
