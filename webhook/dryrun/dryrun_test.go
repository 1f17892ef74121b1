package dryrun

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickydrain/stickydrain/api"
)

// TestTheCacheKeepsAPodsSummaryAlone: anyone who may create pods can label
// one as the webhook labels its dry runs, with 256 KiB of annotations
// beside; the cache keeps what the reporter reads, bounded.
func TestTheCacheKeepsAPodsSummaryAlone(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	in := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: "p", UID: "u", ResourceVersion: "7",
		Labels:      map[string]string{api.DryRunPodLabel: api.DryRunPodValue, api.OptInLabel: api.LabelDryRun, "junk": "y"},
		Annotations: map[string]string{api.AnnotationDryRun: big, "junk": big}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: big}}}}
	out, err := strip(in)
	if err != nil {
		t.Fatal(err)
	}
	m := out.(*metav1.PartialObjectMetadata)
	if m.Name != "p" || m.Namespace != "evil" || m.UID != "u" || m.ResourceVersion != "7" || m.Kind != "Pod" {
		t.Errorf("identity lost: %+v", m.ObjectMeta)
	}
	if len(m.Annotations) != 1 || len(m.Annotations[api.AnnotationDryRun]) != api.MaxDryRunSummaryBytes {
		t.Errorf("annotations kept: %d, summary %d bytes; want the summary alone, %d bytes", len(m.Annotations), len(m.Annotations[api.AnnotationDryRun]), api.MaxDryRunSummaryBytes)
	}
	if len(m.Labels) != 1 || m.Labels[api.OptInLabel] != api.LabelDryRun || m.ManagedFields != nil {
		t.Errorf("kept labels %v, managed fields %d", m.Labels, len(m.ManagedFields))
	}
	pod, err := strip(&corev1.Pod{ObjectMeta: in.ObjectMeta, Spec: corev1.PodSpec{NodeName: big}})
	if err != nil {
		t.Fatal(err)
	}
	if p := pod.(*corev1.Pod); p.Spec.NodeName != "" || len(p.Annotations) != 1 {
		t.Errorf("a typed pod kept its spec or annotations: %d annotations", len(p.Annotations))
	}
}
