package inject

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
)

// AutoscalerMaxGraceful is cluster-autoscaler's default
// --max-graceful-termination-sec: how long a scale-down waits for a
// node's pods before it deletes the node anyway.
const AutoscalerMaxGraceful = 600

// AutoscalerSafeToEvict is cluster-autoscaler's pod annotation; "false"
// keeps a pod's node out of scale-down.
const AutoscalerSafeToEvict = "cluster-autoscaler.kubernetes.io/safe-to-evict"

// MaxWarningLength is the longest warning the API server passes on whole
// (longer ones may be truncated).
const MaxWarningLength = 256

// warnings lists, for a pod the drain is valid for, what is legal but
// probably not what its author meant — each naming the annotation or the
// field, and the fix. get reads annotations as Resolve does.
func warnings(spec *corev1.PodSpec, plan *Plan, w *params.Wait, get func(string) (string, bool)) []string {
	var out []string
	c := spec.Containers[plan.Container]
	if w.URL == "" {
		out = append(out, fmt.Sprintf("stickydrain: annotation %s is not set: each pod gets a timed drain of the full max-wait (%s), sessions or not; set it to the app's session-count URL, e.g. http://localhost:8080/sessions",
			api.AnnotationURL, w.MaxWait))
	}
	if plan.Grace > AutoscalerMaxGraceful {
		if v, _ := get(AutoscalerSafeToEvict); v != "false" {
			out = append(out, fmt.Sprintf("stickydrain: max-wait needs a %ds grace period, over cluster-autoscaler's default --max-graceful-termination-sec=%d: a scale-down cuts the drain; raise that flag to %d or annotate the pods %s=false",
				plan.Grace, AutoscalerMaxGraceful, plan.Grace, AutoscalerSafeToEvict))
		}
	}
	if c.ReadinessProbe == nil {
		out = append(out, fmt.Sprintf("stickydrain: container %q has no readinessProbe: new pods take sessions before the app is up, and draining pods stay serving if it hangs; add spec.containers[%d].readinessProbe", c.Name, plan.Container))
	}
	if ptr.Deref(spec.ShareProcessNamespace, false) {
		out = append(out, fmt.Sprintf("stickydrain: spec.shareProcessNamespace=true makes PID 1 the pause process; drainctl logs to the stdout of container %q's oldest process instead (kubectl logs -c %s)", c.Name, c.Name))
	}
	if len(c.Ports) == 0 {
		out = append(out, fmt.Sprintf("stickydrain: the drain hooks container %q, which declares no ports; if another container serves the sessions, name it with annotation %s", c.Name, api.AnnotationContainer))
	}
	if w.URL != "" && w.Interval > w.MaxWait {
		out = append(out, fmt.Sprintf("stickydrain: annotation %s (%s) exceeds %s (%s): the session count is read once at most; lower the interval",
			api.AnnotationInterval, w.Interval, api.AnnotationMaxWait, w.MaxWait))
	}
	return out
}
