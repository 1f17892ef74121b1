package admit

import (
	"encoding/json"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/webhook/inject"
)

// apply applies ops to raw, as kube-apiserver applies a webhook's patch.
func apply(t *testing.T, raw []byte, ops []jsonpatch.JsonPatchOperation) []byte {
	t.Helper()
	b, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatchapply.DecodePatch(b)
	if err != nil {
		t.Fatalf("decoding the patch %s: %v", b, err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("applying the patch %s: %v", b, err)
	}
	return out
}

// podShapes are pods as users write them, each opted in: what the webhook
// adds lands next to what they already have.
func podShapes() map[string]*corev1.Pod {
	base := func() *corev1.Pod {
		return &corev1.Pod{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{GenerateName: "shop-7d9c5b8f4-", Namespace: "shop",
				Labels:      map[string]string{"app": "shop", api.OptInLabel: api.LabelEnabled},
				Annotations: map[string]string{"stickydrain.io/url": "http://localhost:8080/sessions", "a/b~c": "escaped key"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "app", Image: "shop:v42",
				Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/ready", Port: intstr.FromString("http")}}},
			}}},
		}
	}
	shapes := map[string]*corev1.Pod{"one container, no volumes": base()}

	p := base()
	p.Annotations = nil
	p.Labels = map[string]string{api.OptInLabel: api.LabelEnabled}
	shapes["no annotations at all"] = p

	p = base()
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "envoy", Image: "envoy"}, corev1.Container{Name: "log", Image: "fluent-bit"})
	p.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "shop:v42", Command: []string{"migrate"}}}
	p.Spec.Volumes = []corev1.Volume{{Name: "logs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "logs", MountPath: "/logs"}}
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	shapes["three containers, an init container, a volume, a grace period"] = p

	p = base()
	p.Annotations[api.AnnotationKeepPreStop] = "true"
	p.Annotations[api.AnnotationContainer] = "app"
	p.Spec.Containers = append([]corev1.Container{{Name: "sidecar", Image: "s"}}, p.Spec.Containers...)
	p.Spec.Containers[1].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/flush"}}}}
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](999999)
	shapes["the second container, its own preStop kept, a longer grace period kept"] = p

	p = base()
	p.Annotations[api.AnnotationDrainctl] = "image"
	shapes["drainctl in the image"] = p
	return shapes
}

func TestTypedPatchTurnsTheReceivedPodIntoTheMutatedOne(t *testing.T) {
	for name, pod := range podShapes() {
		t.Run(name, func(t *testing.T) {
			mutated := pod.DeepCopy()
			res, err := inject.Inject(mutated, inject.Namespace{}, inject.Config{DrainctlImage: "drainctl:test"})
			if err != nil || res.Reason != inject.ReasonInjected {
				t.Fatalf("inject: %v %v", res.Reason, err)
			}
			ops, err := typedPatch(pod, mutated)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			var got corev1.Pod
			if err := json.Unmarshal(apply(t, raw, ops), &got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(mutated, &got); d != "" {
				t.Errorf("the patched pod differs from the mutated one (-want +got):\n%s", d)
			}
			// As small as the JSON diff controller-runtime would send, or smaller.
			want, err := json.Marshal(mutated)
			if err != nil {
				t.Fatal(err)
			}
			diff, err := jsonpatch.CreatePatch(raw, want)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) > len(diff) {
				t.Errorf("%d operations, the JSON diff has %d", len(ops), len(diff))
			}
			if again, _ := typedPatch(mutated, mutated.DeepCopy()); len(again) != 0 {
				t.Errorf("equal pods give a patch: %v", again)
			}
		})
	}
}

// A request may carry members this build's types do not know (a newer API
// server): the patch must leave them where they are, in the container it
// hooks too.
func TestTypedPatchKeepsMembersItDoesNotKnow(t *testing.T) {
	pod := podShapes()["three containers, an init container, a volume, a grace period"]
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	spec := doc["spec"].(map[string]any)
	spec["futureSpecField"] = "kept"
	app := spec["containers"].([]any)[0].(map[string]any)
	app["futureContainerField"] = map[string]any{"x": 1.0}
	spec["volumes"].([]any)[0].(map[string]any)["futureVolumeField"] = true
	raw, err = json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	mutated := pod.DeepCopy()
	if _, err := inject.Inject(mutated, inject.Namespace{}, inject.Config{DrainctlImage: "drainctl:test"}); err != nil {
		t.Fatal(err)
	}
	ops, err := typedPatch(pod, mutated)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(apply(t, raw, ops), &out); err != nil {
		t.Fatal(err)
	}
	spec = out["spec"].(map[string]any)
	app = spec["containers"].([]any)[0].(map[string]any)
	if spec["futureSpecField"] != "kept" || app["futureContainerField"] == nil || spec["volumes"].([]any)[0].(map[string]any)["futureVolumeField"] != true {
		t.Errorf("unknown members lost: spec %v", spec)
	}
	if app["lifecycle"] == nil {
		t.Errorf("the hooked container got no preStop: %v", app)
	}
}

func TestTypedPatchOperations(t *testing.T) {
	type inner struct {
		N int    `json:"n,omitempty"`
		S string `json:"s"`
	}
	type doc struct {
		metav1.TypeMeta `json:",inline"`
		Map             map[string]string `json:"map,omitempty"`
		List            []inner           `json:"list,omitempty"`
		Ptr             *inner            `json:"ptr,omitempty"`
		Bytes           []byte            `json:"bytes,omitempty"`
		Time            metav1.Time       `json:"time"`
		Zero            inner             `json:"zero,omitzero"`
		Skipped         string            `json:"-"`
	}
	t0 := metav1.Unix(1000, 0)
	tests := []struct {
		name string
		a, b doc
		want []jsonpatch.JsonPatchOperation
	}{
		{
			name: "equal values give no operation",
			a:    doc{Map: map[string]string{"k": "v"}, List: []inner{{N: 1}}},
			b:    doc{Map: map[string]string{"k": "v"}, List: []inner{{N: 1}}},
		},
		{
			name: "map keys are escaped, sorted, added, replaced and removed",
			a:    doc{Map: map[string]string{"a/b": "1", "gone": "x", "same": "s"}},
			b:    doc{Map: map[string]string{"a/b": "2", "c~d": "3", "same": "s"}},
			want: []jsonpatch.JsonPatchOperation{
				jsonpatch.NewOperation("add", "/map/a~1b", "2"),
				jsonpatch.NewOperation("add", "/map/c~0d", "3"),
				jsonpatch.NewOperation("remove", "/map/gone", nil),
			},
		},
		{
			name: "a list keeps shared elements in place and appends",
			a:    doc{List: []inner{{N: 1}, {N: 2}}},
			b:    doc{List: []inner{{N: 1}, {N: 3}, {N: 4}}},
			want: []jsonpatch.JsonPatchOperation{
				jsonpatch.NewOperation("add", "/list/1/n", 3),
				jsonpatch.NewOperation("add", "/list/-", inner{N: 4}),
			},
		},
		{
			name: "a list that shrinks loses its end, last first",
			a:    doc{List: []inner{{S: "a"}, {S: "b"}, {S: "c"}}},
			b:    doc{List: []inner{{S: "a"}}},
			want: []jsonpatch.JsonPatchOperation{
				jsonpatch.NewOperation("remove", "/list/2", nil),
				jsonpatch.NewOperation("remove", "/list/1", nil),
			},
		},
		{
			name: "an omitted member is added whole, and removed when emptied",
			a:    doc{Ptr: nil, Map: map[string]string{"k": "v"}},
			b:    doc{Ptr: &inner{N: 7}},
			want: []jsonpatch.JsonPatchOperation{
				jsonpatch.NewOperation("remove", "/map", nil),
				jsonpatch.NewOperation("add", "/ptr", &inner{N: 7}),
			},
		},
		{
			name: "inline fields at the parent, self-marshalling and byte values whole, omitzero honoured, json:\"-\" skipped",
			a:    doc{Skipped: "x", Bytes: []byte("ab")},
			b:    doc{TypeMeta: metav1.TypeMeta{Kind: "Doc"}, Time: t0, Bytes: []byte("abc"), Zero: inner{S: "z"}, Skipped: "y"},
			want: []jsonpatch.JsonPatchOperation{
				jsonpatch.NewOperation("add", "/kind", "Doc"),
				jsonpatch.NewOperation("add", "/bytes", []byte("abc")),
				jsonpatch.NewOperation("add", "/time", t0),
				jsonpatch.NewOperation("add", "/zero", inner{S: "z"}),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := typedPatch(&tc.a, &tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			// And it does what it says on the JSON.
			ra, _ := json.Marshal(tc.a)
			rb, _ := json.Marshal(tc.b)
			var want, have any
			_ = json.Unmarshal(rb, &want)
			_ = json.Unmarshal(apply(t, ra, got), &have)
			if d := cmp.Diff(want, have); d != "" {
				t.Errorf("patched JSON differs (-want +got):\n%s", d)
			}
		})
	}
	if _, err := typedPatch(&doc{}, &inner{}); err == nil {
		t.Error("two types: no error")
	}
}

// The pod is read as the API server's serializer reads it: a field this
// build does not know is ignored (a newer API server's), a bad document or
// none is refused, naming what went wrong.
func TestDecodePod(t *testing.T) {
	p, err := decodePod([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","annotations":{"a":"b"}},"spec":{"futureField":true,"containers":[{"name":"app","image":"app:1","ports":[{"containerPort":8080}]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "web-1" || p.Annotations["a"] != "b" || len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Ports[0].ContainerPort != 8080 {
		t.Errorf("decoded %+v", p)
	}
	for _, raw := range []string{"", `{"metadata":`, `{"spec":{"containers":"app"}}`} {
		if _, err := decodePod([]byte(raw)); err == nil {
			t.Errorf("%q: decoded without an error", raw)
		}
	}
}
