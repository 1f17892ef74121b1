package inject

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/api"
)

func ownedBy(kind string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.OwnerReferences = nil
		if kind != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: kind, Name: "x", Controller: ptr.To(true)}}
		}
	}
}

func labelled(v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels = map[string]string{api.OptInLabel: v} }
}

func TestScope(t *testing.T) {
	dryNS := Namespace{Labels: map[string]string{api.OptInLabel: api.LabelDryRun}}
	withKinds := func(kinds string) Namespace {
		return Namespace{Labels: optedNS.Labels, Annotations: map[string]string{api.AnnotationOwnerKinds: kinds}}
	}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		ns     Namespace
		cfg    Config
		mode   Mode
		reason Reason
	}{
		{"a ReplicaSet's pod in an opted-in namespace", basePod(ownedBy("ReplicaSet")), optedNS, Config{}, Drain, ""},
		{"a StatefulSet's pod", basePod(ownedBy("StatefulSet")), optedNS, Config{}, Drain, ""},
		{"a Job's pod", basePod(ownedBy("Job")), optedNS, Config{}, Skip, ReasonOwnerOutOfScope},
		{"a DaemonSet's pod, by default", basePod(ownedBy("DaemonSet")), optedNS, Config{}, Skip, ReasonOwnerOutOfScope},
		{"a DaemonSet's pod, by the webhook's choice", basePod(ownedBy("DaemonSet")), optedNS, Config{OwnerKinds: []string{"DaemonSet"}}, Drain, ""},
		{"a DaemonSet's pod, by the Namespace's choice", basePod(ownedBy("DaemonSet")), withKinds("ReplicaSet, DaemonSet"), Config{}, Drain, ""},
		{"a ReplicaSet's pod, left out by the Namespace's choice", basePod(ownedBy("ReplicaSet")), withKinds("StatefulSet"), Config{}, Skip, ReasonOwnerOutOfScope},
		{"a bare pod (kubectl run)", basePod(ownedBy("")), optedNS, Config{}, Skip, ReasonBarePod},
		{"a bare pod opting itself in", basePod(ownedBy(""), labelled(api.LabelEnabled)), Namespace{}, Config{}, Drain, ""},
		{"a Job's pod opting itself in", basePod(ownedBy("Job"), labelled(api.LabelEnabled)), optedNS, Config{}, Drain, ""},
		{"a pod opting out", basePod(labelled(api.LabelDisabled)), optedNS, Config{}, Skip, ReasonOptedOut},
		{"a namespace in dry run", basePod(), dryNS, Config{}, DryRun, ""},
		{"a Job's pod in a dry-run namespace", basePod(ownedBy("Job")), dryNS, Config{}, Skip, ReasonOwnerOutOfScope},
		{"a pod in dry run", basePod(ownedBy(""), labelled(api.LabelDryRun)), Namespace{}, Config{}, DryRun, ""},
		{"not opted in", basePod(), Namespace{}, Config{}, Skip, ReasonNotOptedIn},
	}
	for _, tt := range tests {
		mode, reason, err := Scope(tt.pod, tt.ns, tt.cfg)
		if err != nil || mode != tt.mode || reason != tt.reason {
			t.Errorf("%s: mode %d reason %q err %v; want mode %d reason %q", tt.name, mode, reason, err, tt.mode, tt.reason)
		}
	}
	for kinds, want := range map[string]string{
		"ReplicaSet,Pod":        `annotation stickydrain.io/owner-kinds="ReplicaSet,Pod": "Pod" is not a controller kind; want a comma-separated list of ReplicaSet, StatefulSet, DaemonSet, Job, ReplicationController`,
		"ReplicaSet,Deployment": `annotation stickydrain.io/owner-kinds="ReplicaSet,Deployment": "Deployment": a Deployment's pods are owned by its ReplicaSets, name ReplicaSet;`,
		"CronJob":               `"CronJob": a CronJob's pods are owned by its Jobs, name Job;`,
		" , ":                   `annotation stickydrain.io/owner-kinds=" , ": empty; want a comma-separated list of`,
	} {
		_, reason, err := Scope(basePod(), withKinds(kinds), Config{})
		if err == nil || reason != ReasonInvalid || !strings.Contains(err.Error(), want) {
			t.Errorf("owner-kinds %q: reason %q, error %v; want one containing %q", kinds, reason, err, want)
		}
	}
}

func TestDryRunInjectsNothingAndSaysWhat(t *testing.T) {
	dryNS := Namespace{Labels: map[string]string{api.OptInLabel: api.LabelDryRun}}
	p := basePod()
	res, err := Inject(p, dryNS, cfg)
	if err != nil || res.Reason != ReasonDryRun {
		t.Fatalf("Inject: %+v %v", res, err)
	}
	want := basePod()
	got := p.DeepCopy()
	summary := got.Annotations[api.AnnotationDryRun]
	delete(got.Annotations, api.AnnotationDryRun)
	// The label the webhook's reporter watches by (the API server filters).
	if got.Labels[api.DryRunPodLabel] != api.DryRunPodValue {
		t.Errorf("a dry-run pod lacks the label %s=%s: %v", api.DryRunPodLabel, api.DryRunPodValue, got.Labels)
	}
	delete(got.Labels, api.DryRunPodLabel)
	if len(got.Labels) != len(want.Labels) {
		t.Errorf("a dry run changed the pod's labels: %v", got.Labels)
	}
	if got.Spec.TerminationGracePeriodSeconds != nil || len(got.Spec.InitContainers) > 0 || got.Spec.Containers[0].Lifecycle != nil ||
		len(got.Spec.Volumes) > 0 || got.Annotations[api.AnnotationStatus] != "" || len(got.Annotations) != len(want.Annotations) {
		t.Errorf("a dry run changed the pod: %+v", got)
	}
	for _, s := range []string{"would hook container tomcat with preStop \"/stickydrain/bin/drainctl wait", "--max-wait=12h0m0s",
		"terminationGracePeriodSeconds 30 -> 43240", "an init container copies drainctl from ghcr.io/stickydrain/drainctl:test"} {
		if !strings.Contains(summary, s) {
			t.Errorf("dry-run annotation lacks %q:\n%s", s, summary)
		}
	}
	// A bad parameter is recorded, not enforced: the pod is created.
	bad := basePod(func(p *corev1.Pod) { p.Annotations[api.AnnotationMaxWait] = "forever" })
	res, err = Inject(bad, dryNS, cfg)
	if err != nil || res.Reason != ReasonDryRun || !strings.HasPrefix(bad.Annotations[api.AnnotationDryRun], "would refuse the pod: annotation stickydrain.io/max-wait") {
		t.Errorf("dry run of a bad pod: %+v %v %q", res, err, bad.Annotations[api.AnnotationDryRun])
	}
}

func TestWarnings(t *testing.T) {
	ready := func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/"}}}
		p.Annotations[AutoscalerSafeToEvict] = "false"
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{"a pod as the samples write it", basePod(ready), nil},
		{"no session URL", basePod(ready, func(p *corev1.Pod) {
			delete(p.Annotations, api.AnnotationURL)
			delete(p.Annotations, api.AnnotationContext)
		}), []string{
			"stickydrain: annotation stickydrain.io/url is not set: each pod gets a timed drain of the full max-wait (12h0m0s), sessions or not; set it to the app's session-count URL, e.g. http://localhost:8080/sessions"}},
		{"a drain longer than the autoscaler waits", basePod(ready, func(p *corev1.Pod) { delete(p.Annotations, AutoscalerSafeToEvict) }), []string{
			"stickydrain: max-wait needs a 43240s grace period, over cluster-autoscaler's default --max-graceful-termination-sec=600: a scale-down cuts the drain; raise that flag to 43240 or annotate the pods cluster-autoscaler.kubernetes.io/safe-to-evict=false"}},
		{"a short drain needs nothing of the autoscaler", basePod(ready, func(p *corev1.Pod) {
			delete(p.Annotations, AutoscalerSafeToEvict)
			p.Annotations[api.AnnotationMaxWait] = "5m"
		}), nil},
		{"no readiness probe", basePod(ready, func(p *corev1.Pod) { p.Spec.Containers[0].ReadinessProbe = nil }), []string{
			`stickydrain: container "tomcat" has no readinessProbe: new pods take sessions before the app is up, and draining pods stay serving if it hangs; add spec.containers[0].readinessProbe`}},
		{"a shared process namespace", basePod(ready, func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) }), []string{
			`stickydrain: spec.shareProcessNamespace=true makes PID 1 the pause process; drainctl logs to the stdout of container "tomcat"'s oldest process instead (kubectl logs -c tomcat)`}},
		{"no ports on the hooked container", basePod(ready, func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil }), []string{
			`stickydrain: the drain hooks container "tomcat", which declares no ports; if another container serves the sessions, name it with annotation stickydrain.io/container`}},
		{"an interval longer than the drain", basePod(ready, func(p *corev1.Pod) {
			p.Annotations[api.AnnotationMaxWait] = "5m"
			p.Annotations[api.AnnotationInterval] = "10m"
		}), []string{"stickydrain: annotation stickydrain.io/interval (10m0s) exceeds stickydrain.io/max-wait (5m0s): the session count is read once at most; lower the interval"}},
	}
	for _, tt := range tests {
		res, err := Inject(tt.pod, optedNS, cfg)
		if err != nil || res.Reason != ReasonInjected {
			t.Errorf("%s: %+v %v", tt.name, res, err)
			continue
		}
		if strings.Join(res.Warnings, "\n") != strings.Join(tt.want, "\n") {
			t.Errorf("%s: warnings\n%s\nwant\n%s", tt.name, strings.Join(res.Warnings, "\n"), strings.Join(tt.want, "\n"))
		}
		for _, w := range res.Warnings {
			if len(w) > MaxWarningLength {
				t.Errorf("%s: a warning of %d characters (the API server may cut it after %d): %s", tt.name, len(w), MaxWarningLength, w)
			}
		}
	}
}
