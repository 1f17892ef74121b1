package podhost_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"os"
	osexec "os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/must"
	"github.com/stickydrain/stickydrain/test/podhost"
	"github.com/stickydrain/stickydrain/test/sessionapp"
	"github.com/stickydrain/stickydrain/test/testbin"
)

var bins = testbin.New()

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Close()
	os.Exit(code)
}

type env struct {
	c    *cluster.Cluster
	host *podhost.Host
	ns   string
}

func setup(t *testing.T, ns string) *env {
	t.Helper()
	images := map[string]string{"shell": "/bin/sh"}
	for image, pkg := range map[string]string{
		"sessionapp": "github.com/stickydrain/stickydrain/test/sessionapp/cmd/sessionapp",
		"drainctl":   "github.com/stickydrain/stickydrain/drainctl",
	} {
		p, err := bins.Build(pkg)
		if err != nil {
			t.Fatal(err)
		}
		images[image] = p
	}
	c := cluster.StartT(t, cluster.Options{})
	h, err := podhost.Start(context.Background(), podhost.Options{
		Clientset: c.Clientset, Nodes: c.Nodes, Images: images, Log: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Stop(); err != nil {
			t.Errorf("podhost Stop: %v", err)
		}
	})
	if err := c.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return &env{c: c, host: h, ns: ns}
}

// sessionPod is the pod template the webhook will produce by hand: drainctl
// installed by an init container into an emptyDir, the pod's annotations in
// a downward-API volume, and a preStop that waits for sessions to end.
func sessionPod(grace int64) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(grace),
			Volumes: []corev1.Volume{
				{Name: "drainctl", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
					Items: []corev1.DownwardAPIVolumeFile{{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}}},
				}}},
			},
			InitContainers: []corev1.Container{{
				Name: "install-drainctl", Image: "drainctl",
				Command:      []string{"/drainctl", "install", "/stickydrain/bin"},
				VolumeMounts: []corev1.VolumeMount{{Name: "drainctl", MountPath: "/stickydrain/bin"}},
			}},
			Containers: []corev1.Container{{
				Name: "app", Image: "sessionapp",
				Args: []string{"--listen=:8080", "--pod=$(POD_NAME)", "--version=v1"},
				Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "drainctl", MountPath: "/stickydrain/bin", ReadOnly: true},
					{Name: "podinfo", MountPath: "/etc/stickydrain/podinfo", ReadOnly: true},
				},
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{
					"/stickydrain/bin/drainctl", "wait", "--url=http://localhost:8080/sessions",
					"--interval=200ms", "--min-wait=1s", "--max-wait=60s",
					"--podinfo=/etc/stickydrain/podinfo/annotations",
				}}}},
			}},
		},
	}
}

type endpoint struct{ Ready, Serving, Terminating bool }

func (e *env) endpoints(t *testing.T, ctx context.Context) map[string]endpoint {
	t.Helper()
	var slices discoveryv1.EndpointSliceList
	if err := e.c.Client.List(ctx, &slices, client.InNamespace(e.ns), client.MatchingLabels{discoveryv1.LabelServiceName: "web"}); err != nil {
		t.Fatal(err)
	}
	out := map[string]endpoint{}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				out[a] = endpoint{ptr.Deref(ep.Conditions.Ready, false), ptr.Deref(ep.Conditions.Serving, false), ptr.Deref(ep.Conditions.Terminating, false)}
			}
		}
	}
	return out
}

func newClient(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 5 * time.Second}
}

func call(t *testing.T, c *http.Client, method, url string) sessionapp.Reply {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r sessionapp.Reply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("%s %s: %d %+v", method, url, resp.StatusCode, r)
	}
	return r
}

func (e *env) step(t *testing.T, pod, container string, s podhost.Step) podhost.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ev, err := e.host.WaitFor(ctx, e.ns, pod, container, s)
	if err != nil {
		t.Fatalf("%v\ntimeline:\n%s", err, timeline(e.host.Timeline(e.ns, pod)))
	}
	return ev
}

func timeline(evs []podhost.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintln(&b, e)
	}
	return b.String()
}

func TestDeploymentPodsDrainThroughPreStop(t *testing.T) {
	e := setup(t, "drain")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := e.c.Client
	must.OK(t, k.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: e.ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}))
	must.OK(t, k.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: e.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: sessionPod(30),
		},
	}))

	// The ReplicaSet controller creates the pods, podhost binds and runs
	// them, and the EndpointSlice controller publishes them ready.
	var pods corev1.PodList
	must.Eventually(t, ctx, 100*time.Millisecond, "two running, ready pods published ready", func() bool {
		if err := k.List(ctx, &pods, client.InNamespace(e.ns)); err != nil || len(pods.Items) != 2 {
			return false
		}
		eps := e.endpoints(t, ctx)
		for _, p := range pods.Items {
			if p.Status.PodIP == "" || !eps[p.Status.PodIP].Ready {
				return false
			}
		}
		return len(eps) == 2
	})
	for _, p := range pods.Items {
		if p.Spec.NodeName != e.c.Nodes[0] {
			t.Errorf("pod %s on node %q, want %q", p.Name, p.Spec.NodeName, e.c.Nodes[0])
		}
		if ev := e.step(t, p.Name, "install-drainctl", podhost.StepInitExited); ev.ExitCode != 0 {
			t.Errorf("init container of %s exited %d", p.Name, ev.ExitCode)
		}
	}
	a, b := pods.Items[0], pods.Items[1]

	// A client logs in to pod a at its IP and keeps its session.
	alice := newClient(t)
	urlA := "http://" + a.Status.PodIP + ":8080"
	if r := call(t, alice, "POST", urlA+"/login?user=alice"); r.Pod != a.Name {
		t.Fatalf("login served by %q, want %q (the downward-API env)", r.Pod, a.Name)
	}
	call(t, alice, "GET", urlA+"/app/")

	// Graceful deletion runs the preStop: drainctl, installed by the init
	// container, polls the app over the pod's localhost and waits.
	must.OK(t, k.Delete(ctx, &a, client.GracePeriodSeconds(30)))
	e.step(t, a.Name, "app", podhost.StepPreStopStarted)
	must.Eventually(t, ctx, 100*time.Millisecond, "pod a's endpoint terminating and still serving", func() bool {
		return e.endpoints(t, ctx)[a.Status.PodIP] == endpoint{Ready: false, Serving: true, Terminating: true}
	})
	// drainctl logs to the container's main stdout (its PID 1), as in a
	// real container, so `kubectl logs` would show it.
	must.Eventually(t, ctx, 100*time.Millisecond, "drainctl's progress in the app container's log", func() bool {
		return strings.Contains(e.host.Logs(e.ns, a.Name, "app"), "draining: 1 sessions left")
	})
	time.Sleep(1500 * time.Millisecond) // past min-wait: only the session holds it now
	for _, ev := range e.host.Timeline(e.ns, a.Name) {
		if ev.Step == podhost.StepPreStopFinished || ev.Step == podhost.StepSIGTERM {
			t.Fatalf("preStop ended while a session remained:\n%s", timeline(e.host.Timeline(e.ns, a.Name)))
		}
	}
	call(t, alice, "GET", urlA+"/app/") // still served by the terminating pod
	loggedOut := time.Now()
	call(t, alice, "POST", urlA+"/logout")

	finished := e.step(t, a.Name, "app", podhost.StepPreStopFinished)
	if finished.ExitCode != 0 {
		t.Errorf("preStop exit %d, want 0 (drained)", finished.ExitCode)
	}
	if d := finished.Time.Sub(loggedOut); d > 3*time.Second {
		t.Errorf("preStop returned %v after the last session ended; drainctl polls every 200ms", d)
	}
	term := e.step(t, a.Name, "app", podhost.StepSIGTERM)
	exited := e.step(t, a.Name, "app", podhost.StepExited)
	deleted := e.step(t, a.Name, "", podhost.StepDeleted)
	if exited.ExitCode != 0 {
		t.Errorf("app exited %d after SIGTERM, want 0", exited.ExitCode)
	}
	if !(finished.Time.Before(term.Time) && term.Time.Before(exited.Time) && !deleted.Time.Before(exited.Time)) {
		t.Errorf("steps out of order:\n%s", timeline(e.host.Timeline(e.ns, a.Name)))
	}
	must.Eventually(t, ctx, 100*time.Millisecond, "pod a and its endpoint gone", func() bool {
		err := k.Get(ctx, client.ObjectKeyFromObject(&a), &corev1.Pod{})
		_, listed := e.endpoints(t, ctx)[a.Status.PodIP]
		return apierrors.IsNotFound(err) && !listed
	})

	// Pod b: an operator ends the drain early through the annotation that
	// the downward-API volume carries into the pod.
	bob := newClient(t)
	call(t, bob, "POST", "http://"+b.Status.PodIP+":8080/login?user=bob")
	must.OK(t, k.Delete(ctx, &b, client.GracePeriodSeconds(30)))
	e.step(t, b.Name, "app", podhost.StepPreStopStarted)
	must.OK(t, k.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Namespace: e.ns}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"stickydrain.io/release":"true"}}}`))))
	if ev := e.step(t, b.Name, "app", podhost.StepPreStopFinished); ev.ExitCode != 5 {
		t.Errorf("released preStop exit %d, want 5 (released)\n%s", ev.ExitCode, e.host.Logs(e.ns, b.Name, "app"))
	}
	e.step(t, b.Name, "", podhost.StepDeleted)
}

func TestGracePeriodKillsAnOverrunningHook(t *testing.T) {
	e := setup(t, "overrun")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stubborn", Namespace: e.ns},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](3),
			Containers: []corev1.Container{{
				Name: "main", Image: "shell",
				// PID 1 ignoring SIGTERM: only SIGKILL at the deadline stops it.
				Command: []string{"/bin/sh", "-c", "trap '' TERM; echo started; while true; do sleep 1; done"},
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
					Command: []string{"/bin/sh", "-c", "sleep 60"}}}},
			}},
		},
	}
	must.OK(t, e.c.Client.Create(ctx, pod))
	e.step(t, pod.Name, "main", podhost.StepReady)
	must.OK(t, e.c.Client.Delete(ctx, pod))

	seen := e.step(t, pod.Name, "", podhost.StepDeletionSeen)
	timedOut := e.step(t, pod.Name, "main", podhost.StepPreStopTimedOut)
	term := e.step(t, pod.Name, "main", podhost.StepSIGTERM)
	kill := e.step(t, pod.Name, "main", podhost.StepSIGKILL)
	exited := e.step(t, pod.Name, "main", podhost.StepExited)
	e.step(t, pod.Name, "", podhost.StepDeleted)
	tl := timeline(e.host.Timeline(e.ns, pod.Name))

	// The hook is cut at the 3s grace period, then the kubelet's 2s
	// minimum passes between SIGTERM and SIGKILL.
	if d := timedOut.Time.Sub(seen.Time); d < 3*time.Second || d > 6*time.Second {
		t.Errorf("hook cut %v after deletion, want about the 3s grace period\n%s", d, tl)
	}
	if d := kill.Time.Sub(term.Time); d < 2*time.Second || d > 4*time.Second {
		t.Errorf("SIGKILL %v after SIGTERM, want the 2s minimum\n%s", d, tl)
	}
	if exited.ExitCode != 137 {
		t.Errorf("exit %d, want 137 (SIGKILL)\n%s", exited.ExitCode, tl)
	}
	if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod still there after the kubelet's final delete: %v", err)
	}
}

func TestProbesRestartsAndStatus(t *testing.T) {
	e := setup(t, "probes")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mixed", Namespace: e.ns, Labels: map[string]string{"tier": "x"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []corev1.Container{
				{
					Name: "web", Image: "sessionapp", Args: []string{"--listen=:9090", "--pod=$(POD)"},
					Env:   []corev1.EnvVar{{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['tier']"}}}},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9090}},
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
						TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}},
				},
				{
					Name: "checker", Image: "shell", Command: []string{"/bin/sh", "-c", "while true; do sleep 1; done"},
					// exec probes run inside the pod: localhost is the pod.
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
						Command: []string{e.drainctl(t), "count", "--url", "http://127.0.0.1:9090/sessions"}}}},
				},
				{Name: "crasher", Image: "shell", Command: []string{"/bin/sh", "-c", "echo crashing; exit 3"}},
			},
		},
	}
	must.OK(t, e.c.Client.Create(ctx, pod))
	e.step(t, pod.Name, "web", podhost.StepReady)
	e.step(t, pod.Name, "checker", podhost.StepReady)
	e.step(t, pod.Name, "crasher", podhost.StepRestarting)

	var got corev1.Pod
	// Caught between restarts (the back-off grows: 1s, 2s, 4s…): the
	// crasher is terminated, restarted at least once before, and not ready.
	must.Eventually(t, ctx, 100*time.Millisecond, "status with a crasher terminated after a restart", func() bool {
		if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			return false
		}
		for _, cs := range got.Status.ContainerStatuses {
			if cs.Name == "crasher" && cs.RestartCount >= 1 && cs.State.Terminated != nil && cs.LastTerminationState.Terminated != nil {
				return cs.State.Terminated.ExitCode == 3 && cs.LastTerminationState.Terminated.ExitCode == 3
			}
		}
		return false
	})
	if got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" || !strings.HasPrefix(got.Status.PodIP, "198.1") {
		t.Errorf("phase %s, pod IP %q", got.Status.Phase, got.Status.PodIP)
	}
	ready := map[string]bool{}
	for _, cs := range got.Status.ContainerStatuses {
		ready[cs.Name] = cs.Ready
	}
	if !ready["web"] || !ready["checker"] || ready["crasher"] {
		t.Errorf("container readiness %v, want web and checker ready, crasher not", ready)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionFalse {
			t.Errorf("pod Ready = %s with a crashing container, want False", c.Status)
		}
	}
	resp, err := http.Get("http://" + got.Status.PodIP + ":9090/ready")
	if err != nil {
		t.Fatalf("host cannot reach the pod at its IP: %v", err)
	}
	resp.Body.Close()
	if !strings.Contains(e.host.Logs(e.ns, pod.Name, "web"), "sessionapp x ") {
		t.Errorf("downward-API label env not seen by the app: %q", e.host.Logs(e.ns, pod.Name, "web"))
	}
}

func (e *env) drainctl(t *testing.T) string {
	p, err := bins.Build("github.com/stickydrain/stickydrain/drainctl")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStopLeavesNothing(t *testing.T) {
	e := setup(t, "cleanup")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tpl := sessionPod(30)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "leftover", Namespace: e.ns}, Spec: tpl.Spec}
	must.OK(t, e.c.Client.Create(ctx, pod))
	e.step(t, pod.Name, "app", podhost.StepReady)
	if _, err := os.Stat("/stickydrain/bin/drainctl"); err == nil {
		t.Error("the emptyDir's content is visible on the host at the mount path; it belongs to the container's mount namespace")
	}
	bridge := e.host.Bridge()
	id := strings.TrimPrefix(bridge, "sdbr")
	if err := e.host.Stop(); err != nil {
		t.Fatal(err)
	}
	links, _ := exec("ip", "-br", "link")
	netns, _ := exec("ip", "netns", "list")
	if strings.Contains(links, bridge) || strings.Contains(links, "sdv"+id) {
		t.Errorf("devices left behind:\n%s", links)
	}
	if strings.Contains(netns, "sd"+id+"p") {
		t.Errorf("network namespaces left behind:\n%s", netns)
	}
	// The mount points are the last host's to remove (another package's
	// tests may be running pod hosts on this machine meanwhile).
	if last, err := lastHost(); err != nil {
		t.Fatal(err)
	} else if last {
		for _, p := range []string{"/stickydrain", "/etc/stickydrain"} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("mount point %s left behind", p)
			}
		}
	} else {
		t.Log("another pod host runs on this machine: the mount points stay for it")
	}
	ps, _ := exec("ps", "-eo", "args")
	if strings.Contains(ps, "--pod=leftover") || strings.Contains(ps, "sessionapp --listen=:8080 --pod=leftover") {
		t.Errorf("container process left running:\n%s", ps)
	}
}

// lastHost reports whether no pod host runs on this machine.
func lastHost() (bool, error) {
	f, err := os.OpenFile(podhost.MountsLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return false, err
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil, nil
}

func exec(argv ...string) (string, error) {
	var out bytes.Buffer
	cmd := osexec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestHTTPGetPreStop(t *testing.T) {
	e := setup(t, "httpget")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: e.ns},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](10),
			Containers: []corev1.Container{{
				Name: "app", Image: "sessionapp", Args: []string{"--listen=:8080"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				// Ready once it serves: without a probe a container is ready
				// when it starts, and a deletion right after could run the
				// hook before the app listens (a loaded run saw "connection
				// refused" 65 ms after the start).
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
				// The kubelet sends httpGet hooks from the node to the pod's IP.
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/drain", Port: intstr.FromString("http")}}},
			}},
		},
	}
	must.OK(t, e.c.Client.Create(ctx, pod))
	e.step(t, pod.Name, "app", podhost.StepReady)
	must.OK(t, e.c.Client.Delete(ctx, pod))
	ev := e.step(t, pod.Name, "app", podhost.StepPreStopFinished)
	if ev.ExitCode != 0 || !strings.Contains(ev.Detail, "200") {
		t.Errorf("httpGet preStop: exit %d, %q; want 0 and the 200 status", ev.ExitCode, ev.Detail)
	}
	e.step(t, pod.Name, "", podhost.StepDeleted)
}

// Two pod hosts on one machine share the root filesystem, so the mount
// points their pods' volumes need (/etc/stickydrain/podinfo, say). One host
// stopping must not take them from the other's running containers: removing
// a mount point on the host detaches the mounts on it in every other mount
// namespace, which once took drainctl's binary and annotations away in the
// middle of another scenario's drain.
func TestStoppingOneHostLeavesAnothersVolumes(t *testing.T) {
	c := cluster.StartT(t, cluster.Options{Nodes: []string{"node-a", "node-b"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	must.OK(t, c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}))
	hosts := map[string]*podhost.Host{}
	for _, node := range []string{"node-a", "node-b"} {
		h, err := podhost.Start(ctx, podhost.Options{
			Clientset: c.Clientset, Nodes: []string{node}, Images: map[string]string{"shell": "/bin/sh"}, Log: t.Logf,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := h.Stop(); err != nil {
				t.Errorf("podhost Stop: %v", err)
			}
		})
		hosts[node] = h
		// Each pod reads its downward-API file every 100 ms and says
		// whether it could.
		must.OK(t, c.Client.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "reader-" + node, Namespace: "shared", Annotations: map[string]string{"x": "y"}},
			Spec: corev1.PodSpec{
				NodeName: node,
				Volumes: []corev1.Volume{{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
					Items: []corev1.DownwardAPIVolumeFile{{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}}},
				}}}},
				Containers: []corev1.Container{{
					Name: "main", Image: "shell",
					Command:      []string{"/bin/sh", "-c", `while true; do if [ -r /etc/stickydrain/podinfo/annotations ]; then echo ok; else echo LOST; fi; sleep 0.1; done`},
					VolumeMounts: []corev1.VolumeMount{{Name: "podinfo", MountPath: "/etc/stickydrain/podinfo", ReadOnly: true}},
				}},
			},
		}))
		if _, err := h.WaitFor(ctx, "shared", "reader-"+node, "main", podhost.StepReady); err != nil {
			t.Fatal(err)
		}
	}
	b := hosts["node-b"]
	must.Eventually(t, ctx, 100*time.Millisecond, "both readers reading", func() bool {
		return strings.Contains(hosts["node-a"].Logs("shared", "reader-node-a", "main"), "ok") &&
			strings.Contains(b.Logs("shared", "reader-node-b", "main"), "ok")
	})
	if err := hosts["node-a"].Stop(); err != nil {
		t.Fatal(err)
	}
	reads := func() int { return strings.Count(b.Logs("shared", "reader-node-b", "main"), "\n") }
	before := reads()
	must.Eventually(t, ctx, 100*time.Millisecond, "node-b's reader reading on", func() bool { return reads() >= before+10 })
	if logs := b.Logs("shared", "reader-node-b", "main"); strings.Contains(logs, "LOST") {
		t.Errorf("node-b's pod lost its volume when node-a's host stopped (%d reads failed)", strings.Count(logs, "LOST"))
	}
}
