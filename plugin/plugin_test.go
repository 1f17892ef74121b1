package plugin

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/internal/golden"
)

// goldenFile compares got with testdata/name (-update rewrites it).
func goldenFile(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Compare(t, filepath.Join("testdata", name), got)
}

var now = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

// drainingPod is an injected pod of deployment web deleted `ago` ago with
// a 10-minute grace period.
func drainingPod(name string, ago time.Duration) *corev1.Pod {
	p := runningPod(name)
	p.DeletionGracePeriodSeconds = ptr.To[int64](600)
	p.DeletionTimestamp = &metav1.Time{Time: now.Add(-ago).Add(600 * time.Second)}
	return p
}

func runningPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "shop", UID: types.UID("uid-" + name),
			Labels:          map[string]string{"app": "web", "pod-template-hash": "7d9c"},
			Annotations:     map[string]string{api.AnnotationStatus: api.StatusInjected},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-7d9c", Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](600),
			Containers: []corev1.Container{{Name: "app", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
				Command: []string{"/stickydrain/bin/drainctl", "wait", "--max-wait=9m", "--min-wait=10s", "--podinfo=/etc/stickydrain/podinfo/annotations", "--url=http://localhost:8080/sessions"},
			}}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func serverEvent(pod *corev1.Pod, n api.ServerNote, i int) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: pod.Name + "." + n.Reason + string(rune('a'+i)), Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Reason:         n.Reason, Message: n.String(), Type: corev1.EventTypeNormal,
	}
}

func withoutUID(e *corev1.Event, at time.Time) *corev1.Event {
	e.InvolvedObject.UID = ""
	e.EventTime = metav1.MicroTime{Time: at}
	return e
}

func TestStatusGolden(t *testing.T) {
	ts := func(ago time.Duration) string { return now.Add(-ago).Format(time.RFC3339) }
	logs := map[string]string{
		"web-7d9c-draining": ts(3*time.Minute) + " drainctl: drain started: polling http://localhost:8080/sessions every 2s, until 0 sessions or 9m0s (min-wait 10s)\n" +
			ts(170*time.Second) + " drainctl: draining: 14 sessions left, waited 10s of 9m0s\nGET /app/cart 200\n" +
			ts(20*time.Second) + " drainctl: draining: 3 sessions left, waited 2m40s of 9m0s\n",
		"web-7d9c-partial": ts(40*time.Second) + " drainctl: draining: 8 sessions left, waited 5s of 9m0s\n",
		"web-7d9c-drained": ts(5*time.Second) + " drainctl: drained: 0 sessions left after 4m2s\n" + ts(5*time.Second) + " drainctl: drained after 4m2s (120 polls, last count 0)\n",
		"web-7d9c-hung": ts(6*time.Minute) + " drainctl: poll failed (3 of 3 in a row): connection refused\n" + ts(6*time.Minute) +
			" drainctl: app unreachable: 3 polls failed in a row; giving up after 6s\n",
		"web-7d9c-unseen": `{"time":"` + ts(50*time.Second) + `","logger":"drainctl","msg":"drain started: polling http://localhost:8080/sessions every 2s, until 0 sessions or 9m0s (min-wait 10s)","event":"start"}` + "\n" +
			`{"time":"` + ts(45*time.Second) + `","logger":"drainctl","msg":"draining: 1 sessions left, waited 5s of 9m0s","event":"progress","sessions":1}` + "\n",
		"web-7d9c-fresh": "",
	}
	pods := []*corev1.Pod{
		drainingPod("web-7d9c-draining", 3*time.Minute),
		drainingPod("web-7d9c-partial", 45*time.Second),
		drainingPod("web-7d9c-drained", 4*time.Minute),
		drainingPod("web-7d9c-hung", 6*time.Minute),
		drainingPod("web-7d9c-unseen", 50*time.Second),
		drainingPod("web-7d9c-fresh", time.Second),
		runningPod("web-7d9c-running"),
	}
	pods[5].CreationTimestamp = metav1.Time{Time: now.Add(-5 * time.Minute)}
	plain := drainingPod("other-1", time.Minute) // deleted, but not opted in
	plain.Annotations, plain.Spec.Containers[0].Lifecycle = nil, nil
	objs := []runtime.Object{plain}
	for _, p := range pods {
		objs = append(objs, p)
	}
	note := func(reason string, answered, of int) api.ServerNote {
		return api.ServerNote{Reason: reason, Server: "198.18.4.7:8080", Upstream: "edge/shop", Answered: answered, Instances: of}
	}
	objs = append(objs,
		serverEvent(pods[0], note(api.ReasonDraining, 1, 2), 0), serverEvent(pods[0], note(api.ReasonDraining, 2, 2), 1),
		serverEvent(pods[0], api.ServerNote{Reason: api.ReasonDraining, Server: "198.18.4.7:8080", Upstream: "plus/shop", Answered: 3, Instances: 3}, 2),
		serverEvent(pods[1], note(api.ReasonDraining, 1, 2), 0),
		// An Event naming its pod without a uid (as earlier controllers
		// wrote them): counted, since recorded after the pod was created ...
		withoutUID(serverEvent(pods[2], note(api.ReasonDraining, 2, 2), 0), now.Add(-3*time.Minute)),
		// ... unlike one recorded before (an earlier pod of that name).
		withoutUID(serverEvent(pods[5], note(api.ReasonDraining, 2, 2), 0), now.Add(-10*time.Minute)),
		serverEvent(pods[3], note(api.ReasonDraining, 2, 2), 0), serverEvent(pods[3], note(api.ReasonRemoved, 2, 2), 1),
	)
	c := &Client{Kube: fake.NewClientset(objs...), Now: func() time.Time { return now },
		Logs: func(_ context.Context, ns, pod, container string) (string, error) {
			if ns != "shop" || container != "app" {
				return "", errors.New("wrong container")
			}
			return logs[pod], nil
		}}
	statuses, err := c.Status(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var table, js bytes.Buffer
	if err := WriteTable(&table, statuses, true, now); err != nil {
		t.Fatal(err)
	}
	goldenFile(t, "status.golden", table.Bytes())
	if err := WriteJSON(&js, statuses); err != nil {
		t.Fatal(err)
	}
	goldenFile(t, "status.json.golden", js.Bytes())

	// A namespace with none.
	statuses, err = c.Status(context.Background(), "empty")
	if err != nil || len(statuses) != 0 {
		t.Fatalf("empty namespace: %v, %v", statuses, err)
	}
	table.Reset()
	_ = WriteTable(&table, statuses, false, now)
	if !strings.HasPrefix(table.String(), "No terminating") {
		t.Errorf("empty: %q", table.String())
	}
}

func TestReleaseAndShortenAnnotateOnlyDrainingPods(t *testing.T) {
	plain := runningPod("plain")
	plain.Annotations, plain.Spec.Containers[0].Lifecycle = nil, nil
	kube := fake.NewClientset(drainingPod("web-1", time.Minute), runningPod("web-2"), plain)
	var ran []string
	c := &Client{Kube: kube, Exec: func(_ context.Context, ns, pod, container string, cmd []string) (string, string, error) {
		ran = append(ran, ns+"/"+pod+"/"+container+": "+strings.Join(cmd, " "))
		return "ok: released\n", "", nil
	}}
	ctx := context.Background()
	// Draining: annotated, and its drainctl told through exec.
	lines, err := c.Release(ctx, "shop", []string{"web-1"})
	if err != nil || len(lines) != 1 || lines[0] != "pod/web-1 annotated stickydrain.io/release=true; its drain answered: ok: released" {
		t.Fatalf("release: %q, %v", lines, err)
	}
	if want := "shop/web-1/app: /stickydrain/bin/drainctl release"; len(ran) != 1 || ran[0] != want {
		t.Errorf("exec: %q, want [%q]", ran, want)
	}
	// Running: annotated only, for the drain to come.
	if lines, err := c.Shorten(ctx, "shop", []string{"web-2"}, 15*time.Minute); err != nil || len(ran) != 1 ||
		lines[0] != "pod/web-2 annotated stickydrain.io/max-wait=15m0s: its drain reads it when the pod stops" {
		t.Fatalf("shorten a running pod: %q, %v; exec %q", lines, err, ran)
	}
	if _, err := c.Shorten(ctx, "shop", []string{"web-1"}, 5*time.Minute); err != nil || ran[1] != "shop/web-1/app: /stickydrain/bin/drainctl shorten --max-wait=5m0s" {
		t.Fatalf("shorten a draining pod: %v; exec %q", err, ran)
	}
	for pod, want := range map[string][2]string{"web-1": {api.AnnotationRelease, "true"}, "web-2": {api.AnnotationMaxWait, "15m0s"}} {
		p, err := kube.CoreV1().Pods("shop").Get(ctx, pod, metav1.GetOptions{})
		if err != nil || p.Annotations[want[0]] != want[1] || p.Annotations[api.AnnotationStatus] != api.StatusInjected {
			t.Errorf("%s: annotations %v, %v; want %s=%s beside the others", pod, p.Annotations, err, want[0], want[1])
		}
	}
	for _, tc := range []struct {
		pods []string
		d    time.Duration
		want string
	}{
		{[]string{"plain"}, time.Minute, "pod shop/plain has no stickydrain drain"},
		{[]string{"gone"}, time.Minute, "pod shop/gone not found"},
		{[]string{"web-1"}, 0, "--max-wait 0s: want a positive duration"},
		{nil, time.Minute, "name at least one pod"},
	} {
		if _, err := c.Shorten(ctx, "shop", tc.pods, tc.d); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("shorten %v %v: %v, want %q", tc.pods, tc.d, err, tc.want)
		}
	}
}

func TestCheckNamesEachMisconfigurationWithItsFix(t *testing.T) {
	template := func(labels map[string]string, probe bool) corev1.PodTemplateSpec {
		c := corev1.Container{Name: "app"}
		if probe {
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready"}}}
		}
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	}
	deploy := func(ns, name string, labels map[string]string, probe bool) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Template: template(labels, probe)}}
	}
	// shop: opted in, one pod from before the opt-in, a 2-hour grace
	// period, a Service the controller refused. legacy: not opted in, no
	// probe, no Service.
	web := deploy("shop", "web", map[string]string{"app": "web"}, true)
	good, long := runningPod("web-7d9c-a"), runningPod("web-7d9c-b")
	long.Spec.TerminationGracePeriodSeconds = ptr.To[int64](7230)
	before := runningPod("web-5b8f-c")
	before.Annotations, before.Spec.Containers[0].Lifecycle = nil, nil
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "uid-svc", Annotations: map[string]string{api.AnnotationUpstreams: "edge/checkout"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}}
	refused := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web.1", Namespace: "shop"}, Type: corev1.EventTypeWarning, Reason: api.ReasonUpstreamNotAllowed,
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Name: "web", Namespace: "shop", UID: "uid-svc"},
		Message:        "upstream edge/checkout is not given to namespace shop by the controller's configuration (tenants)"}
	legacy := deploy("legacy", "old", map[string]string{"app": "old"}, false)
	oldPod := runningPod("old-1")
	oldPod.Namespace, oldPod.Labels = "legacy", map[string]string{"app": "old"}
	oldPod.Annotations, oldPod.Spec.Containers[0].Lifecycle = nil, nil
	// The install's webhooks span two configurations; the second one's
	// entry has no caBundle yet.
	webhooks := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "stickydrain"}, Webhooks: []admissionv1.MutatingWebhook{
		{Name: "namespace-opt-in.pods.stickydrain.io", ClientConfig: admissionv1.WebhookClientConfig{CABundle: []byte("ca")}},
		{Name: "pod-opt-in.pods.stickydrain.io", ClientConfig: admissionv1.WebhookClientConfig{CABundle: []byte("ca")}},
	}}
	others := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "stickydrain-other-kinds"}, Webhooks: []admissionv1.MutatingWebhook{
		{Name: "namespace-opt-in-other-kinds.pods.stickydrain.io"},
	}}
	kube := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{api.OptInLabel: api.LabelEnabled}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}},
		web, good, long, before, svc, refused, legacy, oldPod, webhooks, others)
	var ran []string
	c := &Client{Kube: kube, Exec: func(_ context.Context, ns, pod, container string, cmd []string) (string, string, error) {
		ran = append(ran, strings.Join(cmd, " "))
		return "42\n", "format: number\n", nil
	}}
	var out bytes.Buffer
	for _, target := range []string{"deploy/web", "ns/legacy"} {
		ns := "shop"
		fs, err := c.Check(context.Background(), ns, target)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		out.WriteString("$ kubectl stickydrain check " + target + "\n")
		if err := WriteFindings(&out, fs); err != nil {
			t.Fatal(err)
		}
		if Worst(fs) != LevelError {
			t.Errorf("%s: worst %s, want error", target, Worst(fs))
		}
	}
	goldenFile(t, "check.golden", out.Bytes())
	// drainctl count ran in the injected pod with its source flags only.
	if want := "/stickydrain/bin/drainctl count --url=http://localhost:8080/sessions"; len(ran) != 1 || ran[0] != want {
		t.Errorf("exec: %q, want [%q]", ran, want)
	}
	for _, target := range []string{"web", "pod/web", "deploy/"} {
		if _, err := c.Check(context.Background(), "shop", target); err == nil || !strings.Contains(err.Error(), "want deploy/NAME, sts/NAME or ns/NAME") {
			t.Errorf("check %s: %v", target, err)
		}
	}
}
