// Package dryrun reports dry runs: the mutating webhook can annotate a
// pod it lets through unchanged (stickydrain.io/drain=dry-run), but the
// pod does not exist yet, so no Event can name it then. This controller
// watches pods' metadata only and, once per pod, records a Normal Event
// DrainDryRun on it with what the drain would have been.
package dryrun

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/stickydrain/stickydrain/api"
)

// Reporter records one Event per dry-run pod.
type Reporter struct {
	Client   client.Reader
	Recorder recorder.EventRecorder

	mu   sync.Mutex
	done map[types.NamespacedName]types.UID // reported, until the pod goes
}

// CacheByObject is the manager's cache setting for pods: only those the
// webhook labelled in dry run (api.DryRunPodLabel), so that the API server
// filters and the webhook never receives the other pods' metadata. Anyone
// who may create pods can set that label by hand, so each pod is kept as
// its name, UID, opt-in label and summary alone (at most
// api.MaxDryRunSummaryBytes): whatever else a pod carries (up to 256 KiB of
// annotations) never stays in the webhook's memory.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{api.DryRunPodLabel: api.DryRunPodValue}), Transform: strip},
	}
}

// strip keeps of a pod's metadata what the reporter reads.
func strip(o any) (any, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return o, nil
	}
	var ann, lab map[string]string
	if v, ok := m.GetAnnotations()[api.AnnotationDryRun]; ok {
		if len(v) > api.MaxDryRunSummaryBytes {
			v = v[:api.MaxDryRunSummaryBytes]
		}
		ann = map[string]string{api.AnnotationDryRun: v}
	}
	if v, ok := m.GetLabels()[api.OptInLabel]; ok && len(v) <= len(api.LabelDryRun) {
		lab = map[string]string{api.OptInLabel: v}
	}
	meta := metav1.ObjectMeta{Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
		DeletionTimestamp: m.GetDeletionTimestamp(), Labels: lab, Annotations: ann}
	switch o.(type) {
	case *metav1.PartialObjectMetadata:
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: meta}, nil
	case *corev1.Pod:
		return &corev1.Pod{ObjectMeta: meta}, nil
	}
	return o, nil
}

// SetupWithManager watches the metadata of pods carrying the dry-run
// annotation (only the leader reports).
func (r *Reporter) SetupWithManager(mgr ctrl.Manager) error {
	r.done = map[types.NamespacedName]types.UID{}
	return ctrl.NewControllerManagedBy(mgr).
		Named("dry-run").
		For(&corev1.Pod{}, builder.OnlyMetadata, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			_, ok := o.GetAnnotations()[api.AnnotationDryRun]
			return ok
		}))).
		Complete(r)
}

// Reconcile records the Event of one dry-run pod, once.
func (r *Reporter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pod metav1.PartialObjectMetadata
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	if err := r.Client.Get(ctx, req.NamespacedName, &pod); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.mu.Lock()
			delete(r.done, req.NamespacedName)
			r.mu.Unlock()
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading pod %s: %w", req.NamespacedName, err)
	}
	summary, ok := pod.Annotations[api.AnnotationDryRun]
	if !ok || len(summary) >= api.MaxDryRunSummaryBytes {
		return ctrl.Result{}, nil
	}
	// Only a pod the webhook let through in dry run: one that says so
	// itself, or whose Namespace does. The label alone anyone can write.
	if pod.Labels[api.OptInLabel] != api.LabelDryRun {
		var ns metav1.PartialObjectMetadata
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		if err := r.Client.Get(ctx, types.NamespacedName{Name: pod.Namespace}, &ns); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		if ns.Labels[api.OptInLabel] != api.LabelDryRun {
			return ctrl.Result{}, nil
		}
	}
	r.mu.Lock()
	seen := r.done[req.NamespacedName] == pod.UID
	r.done[req.NamespacedName] = pod.UID
	r.mu.Unlock()
	if seen || pod.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	ref := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}}
	r.Recorder.Eventf(ref, nil, corev1.EventTypeNormal, api.ReasonDryRun, "Admit", "stickydrain dry run (%s=%s): %s", api.OptInLabel, api.LabelDryRun, summary)
	return ctrl.Result{}, nil
}
