package inject

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/google/go-cmp/cmp"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/api"
)

var update = flag.Bool("update", false, "rewrite the golden patch files in testdata")

var cfg = Config{DrainctlImage: "ghcr.io/stickydrain/drainctl:test"}

var optedNS = Namespace{Labels: map[string]string{api.OptInLabel: api.LabelEnabled}}

func basePod(mod ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Annotations: map[string]string{
			api.AnnotationURL: "http://localhost:8080/manager/text/list", api.AnnotationContext: "/app", api.AnnotationMaxWait: "12h",
		}, OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d7f", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "tomcat", Image: "tomcat:10"}}},
	}
	for _, m := range mod {
		m(p)
	}
	return p
}

func prestop(p *corev1.Pod, i int) []string {
	c := p.Spec.Containers[i]
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		return nil
	}
	return c.Lifecycle.PreStop.Exec.Command
}

func TestInject(t *testing.T) {
	tests := []struct {
		name   string
		pod    *corev1.Pod
		ns     Namespace
		reason Reason
		check  func(t *testing.T, p *corev1.Pod)
		errHas []string
	}{
		{
			name: "leaves a pod alone when neither it nor its namespace opted in",
			pod:  basePod(), ns: Namespace{}, reason: ReasonNotOptedIn,
		},
		{
			name: "leaves a pod alone that opts out of an opted-in namespace",
			pod:  basePod(func(p *corev1.Pod) { p.Labels = map[string]string{api.OptInLabel: api.LabelDisabled} }), ns: optedNS, reason: ReasonOptedOut,
		},
		{
			name: "injects a pod opted in by its own label",
			pod:  basePod(func(p *corev1.Pod) { p.Labels = map[string]string{api.OptInLabel: api.LabelEnabled} }), ns: Namespace{}, reason: ReasonInjected,
		},
		{
			name: "builds the preStop from the annotations with drainctl's flags",
			pod:  basePod(), ns: optedNS, reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				want := []string{"/stickydrain/bin/drainctl", "wait", "--context=/app", "--max-wait=12h0m0s",
					"--podinfo=/etc/stickydrain/podinfo/annotations", "--url=http://localhost:8080/manager/text/list"}
				if diff := cmp.Diff(want, prestop(p, 0)); diff != "" {
					t.Errorf("preStop (-want +got):\n%s", diff)
				}
			},
		},
		{
			name:   "falls back to the namespace's annotations",
			pod:    basePod(func(p *corev1.Pod) { delete(p.Annotations, api.AnnotationMaxWait) }),
			ns:     Namespace{Labels: optedNS.Labels, Annotations: map[string]string{api.AnnotationMaxWait: "2h", api.AnnotationInterval: "30s"}},
			reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				got := strings.Join(prestop(p, 0), " ")
				if !strings.Contains(got, "--max-wait=2h0m0s") || !strings.Contains(got, "--interval=30s") {
					t.Errorf("preStop %q lacks the namespace's max-wait and interval", got)
				}
			},
		},
		{
			name: "raises a short grace period to max-wait + min-wait + margin",
			pod:  basePod(), ns: optedNS, reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				if g := ptr.Deref(p.Spec.TerminationGracePeriodSeconds, 0); g != 12*3600+10+30 {
					t.Errorf("grace %d, want %d", g, 12*3600+10+30)
				}
			},
		},
		{
			name: "keeps a larger existing grace period",
			pod:  basePod(func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](86400) }), ns: optedNS, reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				if g := *p.Spec.TerminationGracePeriodSeconds; g != 86400 {
					t.Errorf("grace lowered to %d", g)
				}
			},
		},
		{
			name: "adds the shutdown margin from its annotation",
			pod: basePod(func(p *corev1.Pod) {
				p.Annotations[api.AnnotationShutdownMargin] = "2m"
				p.Annotations[api.AnnotationMinWait] = "0s"
				p.Annotations[api.AnnotationMaxWait] = "10m"
			}), ns: optedNS, reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				if g := *p.Spec.TerminationGracePeriodSeconds; g != 720 {
					t.Errorf("grace %d, want 720", g)
				}
			},
		},
		{
			name: "hooks the default-container, not the first",
			pod: basePod(func(p *corev1.Pod) {
				p.Annotations[api.DefaultContainerAnnotation] = "app"
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "app", Image: "app"})
			}), ns: optedNS, reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				if prestop(p, 0) != nil || prestop(p, 1) == nil {
					t.Error("the hook is not on the default container alone")
				}
				if len(p.Spec.Containers[0].VolumeMounts) != 0 {
					t.Error("the other container got mounts")
				}
			},
		},
		{
			name: "hooks the container named by its annotation",
			pod: basePod(func(p *corev1.Pod) {
				p.Annotations[api.AnnotationContainer] = "app"
				p.Annotations[api.DefaultContainerAnnotation] = "tomcat"
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "app", Image: "app"})
			}), ns: optedNS, reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				if prestop(p, 1) == nil || prestop(p, 0) != nil {
					t.Error("the hook is not on the named container")
				}
			},
		},
		{
			name: "uses drainctl from the image without an init container",
			pod: basePod(func(p *corev1.Pod) {
				p.Annotations[api.AnnotationDrainctl] = "image"
				p.Annotations[api.AnnotationDrainctlPath] = "/opt/bin/drainctl"
			}), ns: optedNS, reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				if len(p.Spec.InitContainers) != 0 {
					t.Error("an init container was added in image mode")
				}
				if got := prestop(p, 0)[0]; got != "/opt/bin/drainctl" {
					t.Errorf("preStop runs %q", got)
				}
				if len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].Name != PodinfoVolume {
					t.Errorf("volumes %+v, want only the podinfo volume", p.Spec.Volumes)
				}
			},
		},
		{
			name: "avoids the names of the pod's own volumes and containers",
			pod: basePod(func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: BinVolume}, {Name: PodinfoVolume}}
				p.Spec.InitContainers = []corev1.Container{{Name: InitContainer, Image: "x"}}
			}), ns: optedNS, reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				names := map[string]int{}
				for _, v := range p.Spec.Volumes {
					names[v.Name]++
				}
				for _, c := range p.Spec.InitContainers {
					names[c.Name]++
				}
				for n, k := range names {
					if k > 1 {
						t.Errorf("name %s used %d times", n, k)
					}
				}
				if p.Spec.InitContainers[1].Name != InitContainer+"-2" || p.Spec.InitContainers[0].Image != "x" {
					t.Errorf("init containers %+v", p.Spec.InitContainers)
				}
			},
		},
		{
			name: "keeps an exec preStop when asked, running it first",
			pod: basePod(func(p *corev1.Pod) {
				p.Annotations[api.AnnotationKeepPreStop] = "true"
				p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/flush", "--all"}}}}
			}), ns: optedNS, reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				cmd := prestop(p, 0)
				if n := len(cmd); n < 3 || cmd[n-3] != "--" || cmd[n-2] != "/bin/flush" || cmd[n-1] != "--all" {
					t.Errorf("preStop %q does not end with -- /bin/flush --all", cmd)
				}
			},
		},
		{
			name: "refuses to replace an existing preStop",
			pod: basePod(func(p *corev1.Pod) {
				p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/flush"}}}}
			}), ns: optedNS, reason: ReasonInvalid,
			errHas: []string{`container "tomcat" already has a preStop hook`, "stickydrain.io/keep-prestop=true"},
		},
		{
			name: "keeps an httpGet preStop: called first, by port name, with its headers; the grace period counts its timeout",
			pod: basePod(func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
				p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/stop?now=1", Port: intstr.FromString("http"), HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Stop", Value: "a, b"}},
				}}}
			}), ns: optedNS, reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				cmd := strings.Join(prestop(p, 0), " ")
				for _, want := range []string{"--pre-http-get=http://localhost:8080/stop?now=1", "--pre-http-header=X-Stop: a, b"} {
					if !strings.Contains(cmd, want) {
						t.Errorf("preStop %q lacks %q", cmd, want)
					}
				}
				// 12h max-wait + 10s min-wait + 30s margin + the call's 30s.
				if got := *p.Spec.TerminationGracePeriodSeconds; got != 12*3600+10+30+30 {
					t.Errorf("grace %d", got)
				}
			},
		},
		{
			name: "keeps a preStop sleep: slept first, counted in the grace period",
			pod: basePod(func(p *corev1.Pod) {
				p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 15}}}
			}), ns: optedNS, reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				if cmd := strings.Join(prestop(p, 0), " "); !strings.Contains(cmd, "--pre-sleep=15s") {
					t.Errorf("preStop %q lacks --pre-sleep=15s", cmd)
				}
				if got := *p.Spec.TerminationGracePeriodSeconds; got != 12*3600+10+30+15 {
					t.Errorf("grace %d", got)
				}
			},
		},
		{
			name: "takes a zero-second preStop sleep for no hook",
			pod: basePod(func(p *corev1.Pod) {
				p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 0}}}
			}), ns: optedNS, reason: ReasonInjected,
			check: func(t *testing.T, p *corev1.Pod) {
				if cmd := strings.Join(prestop(p, 0), " "); strings.Contains(cmd, "--pre-") {
					t.Errorf("preStop %q keeps a zero-second sleep", cmd)
				}
			},
		},
		{
			name: "refuses an httpGet preStop on a port name the container does not have",
			pod: basePod(func(p *corev1.Pod) {
				p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/stop", Port: intstr.FromString("admin")}}}
			}), ns: optedNS, reason: ReasonInvalid, errHas: []string{`container "tomcat": its preStop httpGet cannot be kept: port "admin" is not a port name of the container`},
		},
		{
			name: "names every bad annotation and its accepted form",
			pod: basePod(func(p *corev1.Pod) {
				p.Annotations[api.AnnotationMaxWait] = "12"
				p.Annotations[api.AnnotationFormat] = "xml"
				p.Annotations[api.AnnotationDrainctl] = "sidecar"
				p.Annotations[api.AnnotationShutdownMargin] = "soon"
				p.Annotations[api.AnnotationContainer] = "nope"
			}), ns: optedNS, reason: ReasonInvalid,
			errHas: []string{
				`annotation stickydrain.io/max-wait: "12" is not a duration; want a number with a unit`,
				`annotation stickydrain.io/format: "xml" is not one of auto|number|json|prometheus|tomcat-list|tomcat-sessions|match`,
				`annotation stickydrain.io/drainctl="sidecar": want "inject"`,
				`annotation stickydrain.io/shutdown-margin="soon": want a duration`,
				`annotation stickydrain.io/container="nope": no container of that name; want one of tomcat`,
			},
		},
		{
			name: "names the annotations of a bad combination",
			pod:  basePod(func(p *corev1.Pod) { p.Annotations[api.AnnotationMinWait] = "13h" }), ns: optedNS, reason: ReasonInvalid,
			errHas: []string{"stickydrain.io/min-wait 13h0m0s is longer than stickydrain.io/max-wait 12h0m0s"},
		},
		{
			name: "refuses a user mount inside stickydrain's mount path",
			pod: basePod(func(p *corev1.Pod) {
				p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/stickydrain/bin"}}
			}), ns: optedNS, reason: ReasonInvalid, errHas: []string{"mounts volume data at /stickydrain/bin"},
		},
		{
			name: "leaves an already injected pod alone",
			pod:  basePod(func(p *corev1.Pod) { p.Annotations[api.AnnotationStatus] = api.StatusInjected }), ns: optedNS, reason: ReasonAlreadyInjected,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.pod.DeepCopy()
			res, err := Inject(p, tt.ns, cfg)
			reason := res.Reason
			if reason != tt.reason {
				t.Errorf("reason %q, want %q (error %v)", reason, tt.reason, err)
			}
			if len(tt.errHas) > 0 {
				if err == nil {
					t.Fatal("no error")
				}
				for _, s := range tt.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error lacks %q:\n%v", s, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Inject: %v", err)
			}
			if reason != ReasonInjected && reason != ReasonDryRun {
				if diff := cmp.Diff(tt.pod, p); diff != "" {
					t.Errorf("a pod left alone was changed (-before +after):\n%s", diff)
				}
				return
			}
			if tt.check != nil {
				tt.check(t, p)
			}
		})
	}
}

// TestInjectIsIdempotent: a second pass (reinvocation) changes nothing,
// also when the status annotation was lost on the way.
func TestInjectIsIdempotent(t *testing.T) {
	p := basePod(func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: "envoy"})
		p.Spec.Volumes = []corev1.Volume{{Name: "data"}}
	})
	if _, err := Inject(p, optedNS, cfg); err != nil {
		t.Fatal(err)
	}
	once := p.DeepCopy()
	if r, err := Inject(p, optedNS, cfg); err != nil || r.Reason != ReasonAlreadyInjected {
		t.Fatalf("second pass: %v %v", r, err)
	}
	if diff := cmp.Diff(once, p); diff != "" {
		t.Errorf("second pass changed the pod:\n%s", diff)
	}
	delete(p.Annotations, api.AnnotationStatus)
	lost := p.DeepCopy()
	if r, err := Inject(p, optedNS, cfg); err != nil || r.Reason != ReasonAlreadyInjected {
		t.Fatalf("a pass over a mutated pod that lost its status annotation: %v %v", r, err)
	}
	if diff := cmp.Diff(lost, p); diff != "" {
		t.Errorf("a pass without the status annotation changed the pod:\n%s", diff)
	}
}

// TestInitContainerPassesRestricted checks the fields the Pod Security
// Standard "restricted" requires of every container.
func TestInitContainerPassesRestricted(t *testing.T) {
	p := basePod()
	if _, err := Inject(p, optedNS, cfg); err != nil {
		t.Fatal(err)
	}
	sc := p.Spec.InitContainers[0].SecurityContext
	if sc == nil || !ptr.Deref(sc.RunAsNonRoot, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || ptr.Deref(sc.RunAsUser, 0) == 0 {
		t.Errorf("init container security context does not meet restricted: %+v", sc)
	}
	r := p.Spec.InitContainers[0].Resources
	if r.Requests.Cpu().MilliValue() > 50 || r.Requests.Memory().Value() > 32<<20 {
		t.Errorf("init container requests are not tiny: %v", r.Requests)
	}
}

// TestGoldenPatches keeps the JSON patch of representative pods in
// testdata; `go test ./webhook/inject -update` rewrites them.
func TestGoldenPatches(t *testing.T) {
	cases := map[string]*corev1.Pod{
		"tomcat-list": basePod(),
		"spring-actuator-two-containers": basePod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{api.AnnotationURL: "http://localhost:8080/actuator/metrics/tomcat.sessions.active.current", api.DefaultContainerAnnotation: "app"}
			p.Spec.Containers = []corev1.Container{{Name: "envoy", Image: "envoy"}, {Name: "app", Image: "spring", VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/config"}}}}
			p.Spec.Volumes = []corev1.Volume{{Name: "cfg"}}
		}),
		"kept-prestop-image-mode": basePod(func(p *corev1.Pod) {
			p.Annotations[api.AnnotationKeepPreStop] = "true"
			p.Annotations[api.AnnotationDrainctl] = "image"
			p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "sleep 5"}}}}
		}),
	}
	for name, pod := range cases {
		t.Run(name, func(t *testing.T) {
			before, _ := json.Marshal(pod)
			p := pod.DeepCopy()
			if _, err := Inject(p, optedNS, cfg); err != nil {
				t.Fatal(err)
			}
			after, _ := json.Marshal(p)
			ops, err := jsonpatch.CreatePatch(before, after)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.MarshalIndent(ops, "", "  ")
			got = append(got, '\n')
			path := filepath.Join("testdata", name+".patch.json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			// Patch order from CreatePatch is not stable; compare as sets.
			var w, g []jsonpatch.Operation
			_ = json.Unmarshal(want, &w)
			_ = json.Unmarshal(got, &g)
			if diff := cmp.Diff(asSet(w), asSet(g)); diff != "" {
				t.Errorf("patch differs from %s (-want +got):\n%s", path, diff)
			}
		})
	}
}

func asSet(ops []jsonpatch.Operation) map[string]string {
	m := map[string]string{}
	for _, o := range ops {
		v, _ := json.Marshal(o.Value)
		m[o.Operation+" "+o.Path] = string(v)
	}
	return m
}

// FuzzResolve: no annotation value makes parameter resolution panic, and a
// resolved plan always has a grace period covering max-wait.
func FuzzResolve(f *testing.F) {
	f.Add("12h", "10s", "tomcat-list", "30s", "true", "inject")
	f.Add("-1s", "x", "json", "", "maybe", "image")
	// Durations whose sum overflows int64 nanoseconds.
	f.Add("720h", "10s", "tomcat-list", "2562047h", "true", "inject")
	f.Add("2562047h", "2562047h", "auto", "2562047h", "false", "inject")
	f.Fuzz(func(t *testing.T, maxWait, minWait, format, margin, keep, mode string) {
		ann := map[string]string{api.AnnotationMaxWait: maxWait, api.AnnotationMinWait: minWait, api.AnnotationFormat: format,
			api.AnnotationShutdownMargin: margin, api.AnnotationKeepPreStop: keep, api.AnnotationDrainctl: mode, api.AnnotationJSONPath: "a.0"}
		spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}
		plan, err := Resolve(spec, func(k string) (string, bool) { v, ok := ann[k]; return v, ok })
		if err != nil {
			return
		}
		if plan.Grace < 1 {
			t.Fatalf("plan with grace %d", plan.Grace)
		}
	})
}

// The drainctl image comes from one flag or from a container of the
// webhook's own pod, never neither or both; a wrong container is named.
func TestTheDrainctlImageIsToldInOnePlace(t *testing.T) {
	for _, c := range []struct {
		cfg    Config
		errHas string
	}{
		{Config{}, "the drainctl image is required: --drainctl-image=IMAGE"},
		{Config{DrainctlImage: "a", DrainctlImageFrom: "drainctl"}, "both set"},
		{Config{DrainctlImage: "a"}, ""},
		{Config{DrainctlImageFrom: "drainctl"}, ""},
	} {
		err := c.cfg.Validate()
		if (c.errHas == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.errHas)) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.errHas)
		}
	}
	own := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "stickydrain-system", Name: "stickydrain-webhook-1"}, Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "drainctl", Image: "mirror.example.com/drainctl:v1"}},
		Containers:     []corev1.Container{{Name: "webhook", Image: "mirror.example.com/stickydrain:v1"}},
	}}
	c := Config{DrainctlImageFrom: "drainctl"}
	if err := c.ResolveDrainctlImage(own); err != nil || c.DrainctlImage != "mirror.example.com/drainctl:v1" {
		t.Errorf("resolved %q, %v; want the init container's image", c.DrainctlImage, err)
	}
	c = Config{DrainctlImageFrom: "drainct"}
	if err := c.ResolveDrainctlImage(own); err == nil || !strings.Contains(err.Error(), "--drainctl-image-from-container=drainct: pod stickydrain-system/stickydrain-webhook-1 has no such container") {
		t.Errorf("a wrong container: %v", err)
	}
}

// The injected init container is pulled with the pod's own
// imagePullSecrets (the kubelet uses them for every container of the pod):
// injection keeps them as they are.
func TestInjectionKeepsThePodsImagePullSecrets(t *testing.T) {
	p := basePod(func(p *corev1.Pod) { p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "mirror-creds"}} })
	if _, err := Inject(p, optedNS, cfg); err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Image != cfg.DrainctlImage {
		t.Fatalf("no drainctl init container: %+v", p.Spec.InitContainers)
	}
	if len(p.Spec.ImagePullSecrets) != 1 || p.Spec.ImagePullSecrets[0].Name != "mirror-creds" {
		t.Errorf("imagePullSecrets after injection: %+v", p.Spec.ImagePullSecrets)
	}
}

// The skew contract with older drainctls (docs/opting-in.md, "Versions"):
// every flag the webhook writes is one argument, --name=value, so that a
// drainctl that does not know it can skip it without guessing its arity.
func TestEveryWrittenFlagIsOneArgument(t *testing.T) {
	p := basePod(func(p *corev1.Pod) {
		p.Annotations[api.AnnotationMinWait] = "5s"
		p.Annotations[api.AnnotationInterval] = "2s"
	})
	if _, err := Inject(p, optedNS, cfg); err != nil {
		t.Fatal(err)
	}
	cmd := prestop(p, 0)
	if len(cmd) < 3 || cmd[1] != "wait" {
		t.Fatalf("preStop %q", cmd)
	}
	for _, a := range cmd[2:] {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "--") || !strings.Contains(a, "=") {
			t.Errorf("preStop argument %q is not --name=value", a)
		}
	}
}

// drainctl as an image volume: the drainctl image mounted read-only where
// the init container would have copied it; no init container, no emptyDir.
// Asked per pod (the annotation) or for every pod (--drainctl-delivery),
// the annotation winning; a bad value names the annotation and the modes.
func TestDrainctlAsAnImageVolume(t *testing.T) {
	check := func(t *testing.T, p *corev1.Pod) {
		t.Helper()
		if len(p.Spec.InitContainers) != 0 {
			t.Errorf("init containers %v, want none", p.Spec.InitContainers)
		}
		var vol *corev1.Volume
		for i, v := range p.Spec.Volumes {
			if v.Name == BinVolume {
				vol = &p.Spec.Volumes[i]
			}
		}
		if vol == nil || vol.Image == nil || vol.EmptyDir != nil {
			t.Fatalf("volume %s: %+v, want an image volume", BinVolume, vol)
		}
		if vol.Image.Reference != cfg.DrainctlImage || vol.Image.PullPolicy != corev1.PullIfNotPresent {
			t.Errorf("image volume %+v, want %s IfNotPresent", vol.Image, cfg.DrainctlImage)
		}
		var mount *corev1.VolumeMount
		for i, m := range p.Spec.Containers[0].VolumeMounts {
			if m.Name == BinVolume {
				mount = &p.Spec.Containers[0].VolumeMounts[i]
			}
		}
		if mount == nil || mount.MountPath != BinDir || !mount.ReadOnly {
			t.Errorf("mount %+v, want %s read-only", mount, BinDir)
		}
		// The image holds drainctl at its root (InstallerPath): mounted at
		// BinDir, it is the preStop's command.
		if cmd := prestop(p, 0); len(cmd) < 2 || cmd[0] != BinDir+InstallerPath || cmd[1] != "wait" {
			t.Errorf("preStop %v, want %s wait …", cmd, BinDir+InstallerPath)
		}
	}
	annotated := basePod(func(p *corev1.Pod) { p.Annotations[api.AnnotationDrainctl] = api.DeliveryImageVolume })
	if res, err := Inject(annotated, optedNS, cfg); err != nil || res.Reason != ReasonInjected {
		t.Fatalf("annotated: %v %v", res, err)
	}
	check(t, annotated)

	byFlag := cfg
	byFlag.DrainctlDelivery = api.DeliveryImageVolume
	if err := byFlag.Validate(); err != nil {
		t.Fatal(err)
	}
	p := basePod()
	if res, err := Inject(p, optedNS, byFlag); err != nil || res.Reason != ReasonInjected {
		t.Fatalf("by flag: %v %v", res, err)
	}
	check(t, p)

	// The pod's annotation wins over the flag.
	p = basePod(func(p *corev1.Pod) { p.Annotations[api.AnnotationDrainctl] = api.DeliveryInject })
	if _, err := Inject(p, optedNS, byFlag); err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.InitContainers) != 1 {
		t.Errorf("annotation inject under --drainctl-delivery=image-volume: init containers %v", p.Spec.InitContainers)
	}

	// A dry run says which.
	dry := basePod(func(p *corev1.Pod) { p.Annotations[api.AnnotationDrainctl] = api.DeliveryImageVolume })
	if _, err := Inject(dry, Namespace{Labels: map[string]string{api.OptInLabel: api.LabelDryRun}}, cfg); err != nil {
		t.Fatal(err)
	}
	if got := dry.Annotations[api.AnnotationDryRun]; !strings.Contains(got, "an image volume mounts drainctl from "+cfg.DrainctlImage) {
		t.Errorf("dry-run summary %q does not say the image volume", got)
	}

	bad := basePod(func(p *corev1.Pod) { p.Annotations[api.AnnotationDrainctl] = "volume" })
	if _, err := Inject(bad, optedNS, cfg); err == nil || !strings.Contains(err.Error(), api.AnnotationDrainctl) || !strings.Contains(err.Error(), `"image-volume"`) {
		t.Errorf("stickydrain.io/drainctl=volume: %v", err)
	}
	flagBad := cfg
	flagBad.DrainctlDelivery = "volume"
	if err := flagBad.Validate(); err == nil || !strings.Contains(err.Error(), "--drainctl-delivery=volume") {
		t.Errorf("--drainctl-delivery=volume: %v", err)
	}
}

// Durations a user writes have a ceiling checked before they are added
// into the grace period: sums that would overflow int64 nanoseconds (a
// negative grace period on main) are refused naming the annotation, and
// so is a kept preStop sleep of more seconds than a Duration holds.
func TestDurationsCannotOverflowTheGracePeriod(t *testing.T) {
	for _, c := range []struct {
		name  string
		ann   map[string]string
		sleep int64
		want  string
	}{
		{"a margin near the int64 limit", map[string]string{api.AnnotationMaxWait: "720h", api.AnnotationShutdownMargin: "2562047h"}, 0, api.AnnotationShutdownMargin},
		{"a max-wait near the int64 limit", map[string]string{api.AnnotationMaxWait: "2562047h"}, 0, api.AnnotationMaxWait},
		{"a kept sleep of the most seconds an int64 holds", nil, math.MaxInt64, "preStop sleep"},
		{"a kept sleep of 300 years", nil, 300 * 365 * 24 * 3600, "preStop sleep"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctr := corev1.Container{Name: "c"}
			if c.sleep != 0 {
				ctr.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: c.sleep}}}
			}
			spec := &corev1.PodSpec{Containers: []corev1.Container{ctr}}
			plan, err := Resolve(spec, func(k string) (string, bool) { v, ok := c.ann[k]; return v, ok })
			if err == nil {
				t.Fatalf("accepted, grace %d", plan.Grace)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v; want it to name %s", err, c.want)
			}
		})
	}
	// The longest accepted drain still has a positive, exact grace period.
	ann := map[string]string{api.AnnotationMaxWait: api.MaxDuration.String(), api.AnnotationMinWait: api.MaxDuration.String(), api.AnnotationShutdownMargin: api.MaxDuration.String()}
	spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: int64(api.MaxDuration / time.Second)}}}}}}
	plan, err := Resolve(spec, func(k string) (string, bool) { v, ok := ann[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if want := 4 * int64(api.MaxDuration/time.Second); plan.Grace != want {
		t.Errorf("grace %d, want %d", plan.Grace, want)
	}
}

// The operator's ceiling on max-wait: a pod asking for more, or the
// default when the ceiling is below it, gets the ceiling (its preStop and
// its grace period) and a warning naming both; one within it is left as it
// asked, without a word; a max-wait that does not parse is refused as
// always; a ceiling out of bounds is refused at start.
func TestTheOperatorsCeilingOnMaxWait(t *testing.T) {
	ceiling := cfg
	ceiling.MaxWaitCeiling = 30 * time.Minute
	for _, tc := range []struct {
		name, maxWait string // "" leaves the annotation out
		cfg           Config
		want, warning string
	}{
		{"above the ceiling", "12h", ceiling, "--max-wait=30m0s", "stickydrain: annotation stickydrain.io/max-wait (12h0m0s) is above the operator's ceiling (30m0s, the webhook's --max-wait-ceiling): each pod drains for 30m0s at most"},
		{"the default above the ceiling", "", ceiling, "--max-wait=30m0s", "stickydrain: the default max-wait (1h0m0s) is above the operator's ceiling (30m0s, the webhook's --max-wait-ceiling): each pod drains for 30m0s at most"},
		{"within the ceiling", "10m", ceiling, "--max-wait=10m0s", ""},
		{"no ceiling", "12h", cfg, "--max-wait=12h0m0s", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod(func(p *corev1.Pod) {
				delete(p.Annotations, api.AnnotationMaxWait)
				if tc.maxWait != "" {
					p.Annotations[api.AnnotationMaxWait] = tc.maxWait
				}
			})
			res, err := Inject(p, optedNS, tc.cfg)
			if err != nil || res.Reason != ReasonInjected {
				t.Fatalf("%v, %v", res.Reason, err)
			}
			if cmd := strings.Join(prestop(p, 0), " "); !strings.Contains(cmd, tc.want) {
				t.Errorf("preStop %s, want %s", cmd, tc.want)
			}
			var max time.Duration
			for _, a := range prestop(p, 0) {
				if v, ok := strings.CutPrefix(a, "--max-wait="); ok {
					max, _ = time.ParseDuration(v)
				}
			}
			if g := time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second; g < max || g > max+time.Minute {
				t.Errorf("grace period %v for a max-wait of %v", g, max)
			}
			found := tc.warning == ""
			for _, w := range res.Warnings {
				if strings.Contains(w, "ceiling") {
					found = w == tc.warning
				}
			}
			if !found {
				t.Errorf("warnings %q, want %q", res.Warnings, tc.warning)
			}
		})
	}
	p := basePod(func(p *corev1.Pod) { p.Annotations[api.AnnotationMaxWait] = "forever" })
	if _, err := Inject(p, optedNS, ceiling); err == nil || !strings.Contains(err.Error(), api.AnnotationMaxWait) {
		t.Errorf("a max-wait that does not parse, under a ceiling: %v; want it refused, named", err)
	}
	for _, d := range []time.Duration{-time.Second, api.MaxDuration + time.Hour} {
		c := cfg
		c.MaxWaitCeiling = d
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--max-wait-ceiling") {
			t.Errorf("ceiling %v: %v; want refused, naming the flag", d, err)
		}
	}
}

// The operator can limit opt-in by pod label to the Namespaces it names:
// elsewhere a pod labelling itself in gets no drain (not a refusal: the
// tenant's pod still starts) and a warning saying why; a Namespace that
// opted in itself is not limited; without the setting, any Namespace.
func TestPodOptInByLabelLimitedToTheNamedNamespaces(t *testing.T) {
	limited := cfg
	limited.PodOptInNamespaces = []string{"shop", "cart"}
	for _, tc := range []struct {
		name   string
		label  string
		ns     Namespace
		cfg    Config
		reason Reason
	}{
		{"a named Namespace", api.LabelEnabled, Namespace{Name: "shop"}, limited, ReasonInjected},
		{"another Namespace", api.LabelEnabled, Namespace{Name: "other"}, limited, ReasonPodOptInNotAllowed},
		{"a dry run in another Namespace", api.LabelDryRun, Namespace{Name: "other"}, limited, ReasonPodOptInNotAllowed},
		{"a Namespace that opted in", api.LabelEnabled, Namespace{Name: "team", Labels: map[string]string{api.OptInLabel: api.LabelEnabled}}, limited, ReasonInjected},
		{"no limit", api.LabelEnabled, Namespace{Name: "other"}, cfg, ReasonInjected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod(func(p *corev1.Pod) { p.Labels = map[string]string{api.OptInLabel: tc.label} })
			res, err := Inject(p, tc.ns, tc.cfg)
			if err != nil || res.Reason != tc.reason {
				t.Fatalf("%v, %v; want %v", res.Reason, err, tc.reason)
			}
			if tc.reason != ReasonPodOptInNotAllowed {
				return
			}
			if prestop(p, 0) != nil || p.Annotations[api.AnnotationStatus] != "" || p.Annotations[api.AnnotationDryRun] != "" {
				t.Errorf("a pod not allowed to opt in was changed: %+v", p)
			}
			want := "stickydrain: this pod opts in by its label stickydrain.io/drain=" + tc.label + ", but the operator lets pods opt in by label only in Namespaces shop, cart: it gets no drain; label Namespace other instead, or ask the operator (the webhook's --pod-opt-in-namespaces)"
			if len(res.Warnings) != 1 || res.Warnings[0] != want {
				t.Errorf("warnings %q, want %q", res.Warnings, want)
			}
		})
	}
	var c Config
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--pod-opt-in-namespaces=shop, cart"}); err != nil || strings.Join(c.PodOptInNamespaces, "|") != "shop|cart" {
		t.Errorf("parsed %q, %v", c.PodOptInNamespaces, err)
	}
	if err := fs.Parse([]string{"--pod-opt-in-namespaces=Shop"}); err == nil || !strings.Contains(err.Error(), `"Shop" is not a Namespace name`) {
		t.Errorf("an invalid name: %v", err)
	}
}
