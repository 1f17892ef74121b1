package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/must"
	"github.com/stickydrain/stickydrain/webhook/inject"
)

// warningsSeen collects the warnings the API server sends back, as kubectl
// prints them.
type warningsSeen struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningsSeen) HandleWarningHeaderWithContext(_ context.Context, code int, _ string, msg string) {
	if code == 299 {
		w.mu.Lock()
		w.msgs = append(w.msgs, msg)
		w.mu.Unlock()
	}
}

func (w *warningsSeen) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

// warningsClient is a clientset on c that collects the API server's
// warnings, as kubectl prints them, in the returned warningsSeen.
func warningsClient(t *testing.T, c *cluster.Cluster) (kubernetes.Interface, *warningsSeen) {
	t.Helper()
	seen := &warningsSeen{}
	wcfg := rest.CopyConfig(c.Config)
	wcfg.WarningHandlerWithContext = seen
	cs, err := kubernetes.NewForConfig(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, seen
}

// TestWebhookScopeWarningsAndDryRun: a Namespace opt-in reaches the pods of
// ReplicaSets and StatefulSets only; legal but probably unmeant settings
// come back as warnings at `kubectl apply` (and at pod creation), exactly;
// a dry-run Namespace gets no drain, only an annotation and an Event on
// each pod saying what it would have been — through the real API server.
func TestWebhookScopeWarningsAndDryRun(t *testing.T) {
	c := cluster.StartT(t, cluster.Options{})
	port, metricsPort, ca, _ := startWebhook(t, c)
	installWebhookConfigurations(t, c, port, ca)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := c.Client
	cs, seen := warningsClient(t, c)
	must.OK(t, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{api.OptInLabel: api.LabelEnabled}}}))
	must.OK(t, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "look", Labels: map[string]string{api.OptInLabel: api.LabelDryRun}}}))

	// As the quick start's user first wrote it: no session URL, no probe,
	// no port, the default max-wait of 1h.
	careless := func(name string) *appsv1.Deployment {
		d := sessionDeployment("shop", name, nil)
		ctr := &d.Spec.Template.Spec.Containers[0]
		ctr.ReadinessProbe, ctr.Ports = nil, nil
		d.Spec.Template.Spec.ShareProcessNamespace = ptr.To(true)
		return d
	}
	want := []string{
		"stickydrain: annotation stickydrain.io/url is not set: each pod gets a timed drain of the full max-wait (1h0m0s), sessions or not; set it to the app's session-count URL, e.g. http://localhost:8080/sessions",
		"stickydrain: max-wait needs a 3640s grace period, over cluster-autoscaler's default --max-graceful-termination-sec=600: a scale-down cuts the drain; raise that flag to 3640 or annotate the pods cluster-autoscaler.kubernetes.io/safe-to-evict=false",
		`stickydrain: container "app" has no readinessProbe: new pods take sessions before the app is up, and draining pods stay serving if it hangs; add spec.containers[0].readinessProbe`,
		`stickydrain: spec.shareProcessNamespace=true makes PID 1 the pause process; drainctl logs to the stdout of container "app"'s oldest process instead (kubectl logs -c app)`,
		`stickydrain: the drain hooks container "app", which declares no ports; if another container serves the sessions, name it with annotation stickydrain.io/container`,
	}
	must.Eventually(t, ctx, 200*time.Millisecond, "the validating webhook's warnings at apply", func() bool {
		_ = seen.take()
		_, err := cs.AppsV1().Deployments("shop").Create(ctx, careless("careless"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && len(seen.take()) > 0
	})
	if _, err := cs.AppsV1().Deployments("shop").Create(ctx, careless("careless"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := seen.take(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("kubectl apply of the careless Deployment printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The mutating webhook says the same at pod creation (here a pod
	// opting itself in, as the ReplicaSet controller's pod would).
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "careless", Namespace: "shop", Labels: map[string]string{api.OptInLabel: api.LabelEnabled}},
		Spec: careless("x").Spec.Template.Spec}
	if _, err := cs.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if got := seen.take(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("creating the careless pod printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A session URL, but polled less often than the drain may last.
	impatient := sessionDeployment("shop", "impatient", map[string]string{api.AnnotationURL: "http://localhost:8080/sessions",
		api.AnnotationMaxWait: "5m", api.AnnotationInterval: "10m"})
	if _, err := cs.AppsV1().Deployments("shop").Create(ctx, impatient, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	wantInterval := "stickydrain: annotation stickydrain.io/interval (10m0s) exceeds stickydrain.io/max-wait (5m0s): the session count is read once at most; lower the interval"
	if got := seen.take(); strings.Join(got, "\n") != wantInterval {
		t.Errorf("kubectl apply of a Deployment polling every 10m with a 5m max-wait printed\n%s\nwant\n%s", strings.Join(got, "\n"), wantInterval)
	}
	// Written as the samples are: no warning.
	good := sessionDeployment("shop", "good", map[string]string{api.AnnotationURL: "http://localhost:8080/sessions", inject.AutoscalerSafeToEvict: "false"})
	if _, err := cs.AppsV1().Deployments("shop").Create(ctx, good, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := seen.take(); len(got) > 0 {
		t.Errorf("a Deployment written as the samples are printed warnings:\n%s", strings.Join(got, "\n"))
	}

	// Scope: in the opted-in Namespace, a Job's pod and a bare pod are left
	// alone; a StatefulSet's is not.
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "report", Namespace: "shop"}, Spec: batchv1.JobSpec{
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "sessionapp"}}}}}}
	must.OK(t, k.Create(ctx, job))
	owned := func(kind, name string, uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "v1", Kind: kind, Name: name, UID: apitypes.UID(uid), Controller: ptr.To(true)}}
	}
	for _, tc := range []struct {
		name   string
		owners []metav1.OwnerReference
		hooked bool
	}{
		{"job-pod", owned("Job", "report", string(job.UID)), false},
		{"debug", nil, false},
		{"db-0", owned("StatefulSet", "db", "00000000-0000-0000-0000-000000000001"), true},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: "shop", OwnerReferences: tc.owners,
			Annotations: map[string]string{api.AnnotationURL: "http://localhost:8080/sessions"}},
			Spec: sessionDeployment("shop", "x", nil).Spec.Template.Spec}
		must.OK(t, k.Create(ctx, p, client.DryRunAll))
		if hooked := p.Annotations[api.AnnotationStatus] == api.StatusInjected; hooked != tc.hooked {
			t.Errorf("pod %s (owners %v): injected %v, want %v", tc.name, tc.owners, hooked, tc.hooked)
		}
	}

	// The dry-run reporter watches only the pods the webhook labelled (the
	// API server filters): a pod outside any opt-in carrying the
	// annotation by hand is never read, so it gets no Event; one carrying
	// the label too is read, but outside any dry-run opt-in it is not the
	// webhook's, and gets none either.
	must.OK(t, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}}))
	must.OK(t, k.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: "quiet",
		Annotations: map[string]string{api.AnnotationDryRun: "forged by hand"}}, Spec: sessionDeployment("quiet", "x", nil).Spec.Template.Spec}))
	must.OK(t, k.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forged-labelled", Namespace: "quiet",
		Labels:      map[string]string{api.DryRunPodLabel: api.DryRunPodValue},
		Annotations: map[string]string{api.AnnotationDryRun: "forged by hand", "padding": strings.Repeat("x", 200<<10)}}, Spec: sessionDeployment("quiet", "x", nil).Spec.Template.Spec}))

	// Dry run: the Deployment's pod is created unchanged, annotated, and
	// gets an Event saying what the drain would have been.
	must.OK(t, k.Create(ctx, sessionDeployment("look", "web", map[string]string{api.AnnotationURL: "http://localhost:8080/sessions", api.AnnotationMaxWait: "20m"})))
	var looked corev1.Pod
	must.Eventually(t, ctx, 200*time.Millisecond, "the dry-run Deployment's pod", func() bool {
		var pods corev1.PodList
		if k.List(ctx, &pods, client.InNamespace("look")) != nil || len(pods.Items) != 1 {
			return false
		}
		looked = pods.Items[0]
		return true
	})
	ctr := looked.Spec.Containers[0]
	if ctr.Lifecycle != nil || len(looked.Spec.InitContainers) > 0 || ptr.Deref(looked.Spec.TerminationGracePeriodSeconds, 30) != 30 || looked.Annotations[api.AnnotationStatus] != "" {
		t.Errorf("a dry-run pod was changed: lifecycle %v, init containers %d, grace %v", ctr.Lifecycle, len(looked.Spec.InitContainers), looked.Spec.TerminationGracePeriodSeconds)
	}
	summary := looked.Annotations[api.AnnotationDryRun]
	for _, s := range []string{`would hook container app with preStop "/stickydrain/bin/drainctl wait`, "--url=http://localhost:8080/sessions", "terminationGracePeriodSeconds 30 -> 1240"} {
		if !strings.Contains(summary, s) {
			t.Errorf("annotation %s lacks %q: %q", api.AnnotationDryRun, s, summary)
		}
	}
	must.Eventually(t, ctx, 200*time.Millisecond, "the DrainDryRun Event on the pod", func() bool {
		var evs eventsv1.EventList
		if k.List(ctx, &evs, client.InNamespace("look")) != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == looked.Name && e.Reason == api.ReasonDryRun && strings.Contains(e.Note, summary) {
				return true
			}
		}
		return false
	})
	if looked.Labels[api.DryRunPodLabel] != api.DryRunPodValue {
		t.Errorf("the dry-run pod lacks the label %s=%s: %v", api.DryRunPodLabel, api.DryRunPodValue, looked.Labels)
	}
	var quiet eventsv1.EventList
	must.OK(t, k.List(ctx, &quiet, client.InNamespace("quiet")))
	for _, e := range quiet.Items {
		if e.Reason == api.ReasonDryRun {
			t.Errorf("an Event on a pod the webhook never let through in dry run: %s %s", e.Regarding.Name, e.Note)
		}
	}

	// The Job's pod reached the webhook through the fail-open entry of the
	// other kinds; the bare pod never did (the matchConditions keep it
	// away, so an outage never blocks it).
	metrics := scrape(t, c, metricsPort)
	for _, m := range []string{
		`stickydrain_webhook_admissions_total{reason="owner-out-of-scope",result="allowed",webhook="mutate-pod"}`,
		`stickydrain_webhook_admissions_total{reason="dry-run",result="allowed",webhook="mutate-pod"}`,
	} {
		if !strings.Contains(metrics, m) {
			t.Errorf("metrics lack %s", m)
		}
	}
	if m := `reason="bare-pod"`; strings.Contains(metrics, m) {
		t.Errorf("a bare pod reached the webhook (%s)", m)
	}
}
