// Package admit adapts the pure mutation in webhook/inject to
// controller-runtime's admission webhooks: a Defaulter for Pods, answered
// with a patch computed from the typed pods, and Validators for the
// workloads that make pods, so that a bad parameter is refused at
// `kubectl apply`, before any pod fails to be created.
package admit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	sigsjson "sigs.k8s.io/json"

	"github.com/stickydrain/stickydrain/webhook/inject"
)

// Metrics of the webhooks.
type Metrics struct {
	admissions *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	admitting  *prometheus.GaugeVec
}

func (m *Metrics) inFlight(d float64) {
	if m != nil {
		m.admitting.WithLabelValues("deciding").Add(d)
	}
}

func (m *Metrics) waiting(d float64) {
	if m != nil {
		m.admitting.WithLabelValues("waiting").Add(d)
	}
}

// NewMetrics registers the webhook metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stickydrain_webhook_admissions_total",
			Help: "Admission requests handled, by webhook, result (allowed, denied, error) and reason.",
		}, []string{"webhook", "result", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "stickydrain_webhook_admission_duration_seconds",
			Help:    "Time to decide one admission request, by webhook.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"webhook"}),
		admitting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stickydrain_webhook_admissions_in_flight",
			Help: "Admission requests being decided (state=deciding, at most --max-concurrent-admissions) and waiting for their turn (state=waiting).",
		}, []string{"state"}),
	}
	for _, c := range []prometheus.Collector{m.admissions, m.duration, m.admitting} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering webhook metrics: %w", err)
		}
	}
	return m, nil
}

// reasonNamespaceUnreadable is the reason of every admission that errs.
const reasonNamespaceUnreadable inject.Reason = "namespace-unreadable"

// serves starts a webhook's error and refusal counts at 0: a series born
// at 1 has no rate() or increase() until it counts again, and the alerts
// on failing admissions and refused pods would miss the first.
func (m *Metrics) serves(webhook string) {
	if m != nil {
		m.admissions.WithLabelValues(webhook, "error", string(reasonNamespaceUnreadable))
		m.admissions.WithLabelValues(webhook, "denied", string(inject.ReasonInvalid))
	}
}

func (m *Metrics) observe(webhook string, start time.Time, result string, reason inject.Reason) {
	if m == nil {
		return
	}
	m.admissions.WithLabelValues(webhook, result, string(reason)).Inc()
	m.duration.WithLabelValues(webhook).Observe(time.Since(start).Seconds())
}

// namespaceOf reads a Namespace's labels and annotations.
func namespaceOf(ctx context.Context, c client.Reader, name string) (inject.Namespace, error) {
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
		return inject.Namespace{}, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	return inject.Namespace{Name: ns.Name, Labels: ns.Labels, Annotations: ns.Annotations}, nil
}

func requestNamespace(ctx context.Context, obj metav1.Object) string {
	if req, err := admission.RequestFromContext(ctx); err == nil && req.Namespace != "" {
		return req.Namespace
	}
	return obj.GetNamespace()
}

// PodDefaulter injects the drain into opted-in pods on CREATE.
type PodDefaulter struct {
	Client  client.Reader
	Config  inject.Config
	Metrics *Metrics
}

var _ admission.Defaulter[*corev1.Pod] = (*PodDefaulter)(nil)

// Default mutates pod; an error denies its creation with the message.
func (d *PodDefaulter) Default(ctx context.Context, pod *corev1.Pod) error {
	_, err := d.mutate(ctx, pod)
	return err
}

// mutate is Default, returning what it did and its warnings.
func (d *PodDefaulter) mutate(ctx context.Context, pod *corev1.Pod) (inject.Result, error) {
	start := time.Now()
	log := logf.FromContext(ctx)
	nsName := requestNamespace(ctx, pod)
	ns, err := namespaceOf(ctx, d.Client, nsName)
	if err != nil {
		d.Metrics.observe("mutate-pod", start, "error", reasonNamespaceUnreadable)
		return inject.Result{}, err
	}
	res, err := inject.Inject(pod, ns, d.Config)
	if err != nil {
		d.Metrics.observe("mutate-pod", start, "denied", res.Reason)
		log.Info("refused pod", "namespace", nsName, "generateName", pod.GenerateName, "name", pod.Name, "error", err.Error())
		return res, fmt.Errorf("stickydrain: %w", err)
	}
	d.Metrics.observe("mutate-pod", start, "allowed", res.Reason)
	log.V(1).Info("admitted pod", "namespace", nsName, "generateName", pod.GenerateName, "name", pod.Name, "reason", string(res.Reason), "warnings", len(res.Warnings))
	return res, nil
}

// PodHandler answers pod admissions: PodDefaulter's mutation, sent as the
// patch between the typed pods (typedPatch) instead of the diff of their
// JSON that controller-runtime's typed defaulter computes (a third of the
// webhook's CPU under load; bench/notes.md).
type PodHandler struct {
	Defaulter *PodDefaulter
}

var _ admission.Handler = (*PodHandler)(nil)

// Handle decodes the pod, mutates it and answers with the patch; a refusal
// of the mutation denies the request with its message.
func (h *PodHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation == admissionv1.Delete {
		return admission.Allowed("")
	}
	ctx = admission.NewContextWithRequest(ctx, req)
	pod, err := decodePod(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	orig := pod.DeepCopy()
	res, err := h.Defaulter.mutate(ctx, pod)
	if err != nil {
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			status := st.Status()
			return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
		}
		return admission.Denied(err.Error())
	}
	ops, err := typedPatch(orig, pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.Patched("", ops...).WithWarnings(res.Warnings...)
}

// decodePod reads the request's pod as the API server's JSON serializer
// does (case-sensitive, integers kept), in one pass: the generic decoder
// first unmarshals the whole object once more to read its apiVersion and
// kind, which the webhook configuration already fixes to v1 Pod (6.5 %
// of the webhook's CPU at 1,000 admissions/s; bench/results.md).
func decodePod(raw []byte) (*corev1.Pod, error) {
	if len(raw) == 0 {
		return nil, errors.New("the request has no object to decode")
	}
	pod := &corev1.Pod{}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, pod); err != nil {
		return nil, fmt.Errorf("decoding the pod: %w", err)
	}
	return pod, nil
}

// WorkloadValidator refuses workloads whose pod template would be refused.
type WorkloadValidator[T client.Object] struct {
	Client  client.Reader
	Config  inject.Config
	Metrics *Metrics
	Kind    string
	// OwnerKind is the kind of the controller of the workload's pods
	// (a Deployment's pods belong to a ReplicaSet).
	OwnerKind string
	Template  func(T) *corev1.PodTemplateSpec
}

// name is the webhook's name in metrics and logs.
func (v *WorkloadValidator[T]) name() string { return "validate-" + v.Kind }

// ValidateCreate checks the template of a new workload.
func (v *WorkloadValidator[T]) ValidateCreate(ctx context.Context, obj T) (admission.Warnings, error) {
	return v.validate(ctx, obj)
}

// ValidateUpdate checks the template of a changed workload.
func (v *WorkloadValidator[T]) ValidateUpdate(ctx context.Context, _, obj T) (admission.Warnings, error) {
	return v.validate(ctx, obj)
}

// ValidateDelete allows every deletion.
func (v *WorkloadValidator[T]) ValidateDelete(context.Context, T) (admission.Warnings, error) {
	return nil, nil
}

func (v *WorkloadValidator[T]) validate(ctx context.Context, obj T) (admission.Warnings, error) {
	start := time.Now()
	name := v.name()
	ns, err := namespaceOf(ctx, v.Client, requestNamespace(ctx, obj))
	if err != nil {
		v.Metrics.observe(name, start, "error", reasonNamespaceUnreadable)
		return nil, err
	}
	tpl := v.Template(obj)
	pod := &corev1.Pod{ObjectMeta: *tpl.ObjectMeta.DeepCopy(), Spec: *tpl.Spec.DeepCopy()}
	// Its pods will belong to this kind of controller.
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: v.OwnerKind, Name: obj.GetName(), Controller: ptr.To(true)}}
	res, err := inject.Inject(pod, ns, v.Config)
	if err != nil {
		v.Metrics.observe(name, start, "denied", res.Reason)
		return nil, fmt.Errorf("stickydrain: the pod template would be refused: %w", err)
	}
	v.Metrics.observe(name, start, "allowed", res.Reason)
	return res.Warnings, nil
}

// PodPath is where the pod mutating webhook is served (the path
// controller-runtime's builder would give it, and the manifests name).
const PodPath = "/mutate--v1-pod"

// Register adds the pod mutating webhook (PodPath) and the workload
// validating webhooks (/validate-apps-v1-<kind>) to mgr.
func Register(mgr manager.Manager, cfg inject.Config, m *Metrics) error {
	c := mgr.GetClient()
	m.serves("mutate-pod")
	mgr.GetWebhookServer().Register(PodPath, &admission.Webhook{
		Handler:      &PodHandler{Defaulter: &PodDefaulter{Client: c, Config: cfg, Metrics: m}},
		RecoverPanic: ptr.To(true),
		LogConstructor: func(base logr.Logger, req *admission.Request) logr.Logger {
			log := base.WithValues("webhookKind", "Pod")
			if req != nil {
				log = log.WithValues("namespace", req.Namespace, "name", req.Name, "user", req.UserInfo.Username, "requestID", req.UID)
			}
			return log
		},
	})
	errs := []error{
		registerValidator(mgr, &appsv1.Deployment{}, &WorkloadValidator[*appsv1.Deployment]{
			Client: c, Config: cfg, Metrics: m, Kind: "deployment", OwnerKind: "ReplicaSet",
			Template: func(o *appsv1.Deployment) *corev1.PodTemplateSpec { return &o.Spec.Template }}),
		registerValidator(mgr, &appsv1.StatefulSet{}, &WorkloadValidator[*appsv1.StatefulSet]{
			Client: c, Config: cfg, Metrics: m, Kind: "statefulset", OwnerKind: "StatefulSet",
			Template: func(o *appsv1.StatefulSet) *corev1.PodTemplateSpec { return &o.Spec.Template }}),
		registerValidator(mgr, &appsv1.ReplicaSet{}, &WorkloadValidator[*appsv1.ReplicaSet]{
			Client: c, Config: cfg, Metrics: m, Kind: "replicaset", OwnerKind: "ReplicaSet",
			Template: func(o *appsv1.ReplicaSet) *corev1.PodTemplateSpec { return &o.Spec.Template }}),
		registerValidator(mgr, &appsv1.DaemonSet{}, &WorkloadValidator[*appsv1.DaemonSet]{
			Client: c, Config: cfg, Metrics: m, Kind: "daemonset", OwnerKind: "DaemonSet",
			Template: func(o *appsv1.DaemonSet) *corev1.PodTemplateSpec { return &o.Spec.Template }}),
	}
	return errors.Join(errs...)
}

// registerValidator serves v for its workloads, its metrics started.
func registerValidator[T client.Object](mgr manager.Manager, obj T, v *WorkloadValidator[T]) error {
	v.Metrics.serves(v.name())
	return builder.WebhookManagedBy(mgr, obj).WithValidator(v).Complete()
}
