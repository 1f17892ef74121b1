package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkInject mutates an opted-in pod of three containers, as the
// webhook does on each admission.
func BenchmarkInject(b *testing.B) {
	pod := basePod(func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "envoy", Image: "envoy"}, corev1.Container{Name: "log", Image: "fluent-bit"})
	})
	b.ReportAllocs()
	for b.Loop() {
		p := pod.DeepCopy()
		if _, err := Inject(p, optedNS, cfg); err != nil {
			b.Fatal(err)
		}
	}
}
