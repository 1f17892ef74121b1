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
// filters and the webhook never receives the other pods' metadata.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{api.DryRunPodLabel: api.DryRunPodValue})},
	}
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
	if !ok {
		return ctrl.Result{}, nil
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
