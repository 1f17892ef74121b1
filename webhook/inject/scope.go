package inject

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickydrain/stickydrain/api"
)

// DefaultOwnerKinds are the controllers whose pods serve sessions and are
// replaced by rollouts, node drains and scale-downs. Not Jobs (their pods
// run to completion and hold no sessions), not bare pods (kubectl run,
// kubectl debug); DaemonSets only by choice (one pod per node, rarely
// behind a sticky load balancer).
var DefaultOwnerKinds = []string{"ReplicaSet", "StatefulSet"}

// ownerKinds are the kinds the webhook takes on a Namespace opt-in: the
// kinds that own pods directly. A Deployment's pods are owned by its
// ReplicaSets, a CronJob's by its Jobs, so naming those would reach
// nothing.
var ownerKinds = []string{"ReplicaSet", "StatefulSet", "DaemonSet", "Job", "ReplicationController"}

// indirectOwners are kinds whose pods another kind owns.
var indirectOwners = map[string]string{"Deployment": "ReplicaSet", "CronJob": "Job"}

// ParseOwnerKinds reads a comma-separated list of controller kinds.
func ParseOwnerKinds(v string) ([]string, error) {
	var out []string
	for _, k := range strings.Split(v, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if direct, ok := indirectOwners[k]; ok {
			return nil, fmt.Errorf("%q: a %s's pods are owned by its %ss, name %s; want a comma-separated list of %s", k, k, direct, direct, strings.Join(ownerKinds, ", "))
		}
		if !slices.Contains(ownerKinds, k) {
			return nil, fmt.Errorf("%q is not a controller kind; want a comma-separated list of %s", k, strings.Join(ownerKinds, ", "))
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty; want a comma-separated list of %s", strings.Join(ownerKinds, ", "))
	}
	return out, nil
}

// Mode is how a pod takes part.
type Mode int

// Modes.
const (
	Skip   Mode = iota // leave the pod alone
	Drain              // inject the drain
	DryRun             // record what would be injected
)

// Scope decides whether and how a pod takes part, and the reason when it
// does not: its own label first (any pod may opt itself in or out), else
// its Namespace's, which reaches only pods whose controller is of one of
// the owner kinds (the Namespace's AnnotationOwnerKinds, else cfg's).
func Scope(pod *corev1.Pod, ns Namespace, cfg Config) (Mode, Reason, error) {
	nsOptedIn := ns.Labels[api.OptInLabel] == api.LabelEnabled || ns.Labels[api.OptInLabel] == api.LabelDryRun
	switch pod.Labels[api.OptInLabel] {
	case api.LabelEnabled, api.LabelDryRun:
		if !nsOptedIn && len(cfg.PodOptInNamespaces) > 0 && !slices.Contains(cfg.PodOptInNamespaces, ns.Name) {
			return Skip, ReasonPodOptInNotAllowed, nil
		}
		if pod.Labels[api.OptInLabel] == api.LabelDryRun {
			return DryRun, "", nil
		}
		return Drain, "", nil
	case api.LabelDisabled:
		return Skip, ReasonOptedOut, nil
	}
	var mode Mode
	switch ns.Labels[api.OptInLabel] {
	case api.LabelEnabled:
		mode = Drain
	case api.LabelDryRun:
		mode = DryRun
	default:
		return Skip, ReasonNotOptedIn, nil
	}
	kinds := cfg.OwnerKinds
	if len(kinds) == 0 {
		kinds = DefaultOwnerKinds
	}
	if v, ok := ns.Annotations[api.AnnotationOwnerKinds]; ok {
		k, err := ParseOwnerKinds(v)
		if err != nil {
			return Skip, ReasonInvalid, &Error{Annotation: api.AnnotationOwnerKinds, Value: v, Problem: err.Error() + " (on the Namespace)"}
		}
		kinds = k
	}
	owner := metav1.GetControllerOf(pod)
	switch {
	case owner == nil:
		return Skip, ReasonBarePod, nil
	case !slices.Contains(kinds, owner.Kind):
		return Skip, ReasonOwnerOutOfScope, nil
	}
	return mode, "", nil
}
