package admit

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/webhook/inject"
)

// BenchmarkAdmitPod is one pod admission as the webhook server handles it,
// TLS and HTTP aside: the pod is decoded from the review, the defaulter
// reads the Namespace (from a cache in the webhook; an in-memory client
// here) and injects, and the patch is computed from the typed pods. Beside
// BenchmarkInject it shows what the admission costs around the mutation.
func BenchmarkAdmitPod(b *testing.B) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{api.OptInLabel: api.LabelEnabled},
		Annotations: map[string]string{"stickydrain.io/url": "http://localhost:8080/sessions"}}}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	wh := &PodHandler{Defaulter: &PodDefaulter{
		Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(ns).Build(),
		Config: inject.Config{DrainctlImage: "ghcr.io/stickydrain/drainctl:v0.1.0"}, Metrics: m,
	}}
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "shop-7d9c5b8f4-", Namespace: "shop", Labels: map[string]string{"app": "shop", api.OptInLabel: api.LabelEnabled}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: "shop:v42", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}},
			{Name: "envoy", Image: "envoy"},
			{Name: "log", Image: "fluent-bit"},
		}},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: "shop", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
	}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp := wh.Handle(ctx, req)
		if !resp.Allowed || len(resp.Patches) == 0 {
			b.Fatalf("not mutated: %+v", resp.Result)
		}
	}
}
