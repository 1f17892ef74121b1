package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/must"
)

// endpointState is what the EndpointSlice controller published for one
// address, in the order the conditions are read by load balancers.
type endpointState struct {
	Ready, Serving, Terminating bool
}

func TestEndpointSliceFollowsPodLifecycle(t *testing.T) {
	c := cluster.StartT(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := c.Client

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lifecycle"}}
	must.OK(t, k.Create(ctx, ns))
	labels := map[string]string{"app": "web"}
	must.OK(t, k.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns.Name},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{
			Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080),
		}}},
	}))
	must.OK(t, k.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns.Name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](60),
					Containers: []corev1.Container{{
						Name: "app", Image: "sessionapp",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					}},
				},
			},
		},
	}))

	// The real Deployment and ReplicaSet controllers create the pods.
	var pods corev1.PodList
	must.Eventually(t, ctx, 100*time.Millisecond, "two pods created by the ReplicaSet controller", func() bool {
		must.OK(t, k.List(ctx, &pods, client.InNamespace(ns.Name)))
		return len(pods.Items) == 2
	})
	ips := map[string]string{} // pod name → IP
	for i := range pods.Items {
		p := &pods.Items[i]
		ip := fmt.Sprintf("198.18.0.%d", 10+i)
		runAsKubelet(t, ctx, c, p, ip)
		ips[p.Name] = ip
	}

	want := map[string]endpointState{}
	for _, ip := range ips {
		want[ip] = endpointState{Ready: true, Serving: true}
	}
	waitEndpoints(t, ctx, c, ns.Name, "web", "both pods published ready", want)

	// Graceful deletion: the Pod stays (a kubelet would now run its preStop
	// hook) and its endpoint turns terminating while still serving.
	victim := pods.Items[0].Name
	must.OK(t, k.Delete(ctx, &pods.Items[0], client.GracePeriodSeconds(30)))
	var got corev1.Pod
	must.OK(t, k.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: victim}, &got))
	if got.DeletionTimestamp == nil {
		t.Fatalf("pod %s has no deletionTimestamp after graceful delete", victim)
	}
	if g := ptr.Deref(got.DeletionGracePeriodSeconds, 0); g != 30 {
		t.Errorf("pod %s deletionGracePeriodSeconds = %d, want 30", victim, g)
	}
	want[ips[victim]] = endpointState{Ready: false, Serving: true, Terminating: true}
	waitEndpoints(t, ctx, c, ns.Name, "web", "the deleted pod's endpoint terminating and serving", want)

	// The kubelet finishes the deletion: the Pod and its endpoint go.
	must.OK(t, k.Delete(ctx, &got, client.GracePeriodSeconds(0)))
	must.Eventually(t, ctx, 100*time.Millisecond, "the pod object gone", func() bool {
		err := k.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: victim}, &got)
		must.OK(t, client.IgnoreNotFound(err))
		return apierrors.IsNotFound(err)
	})
	delete(want, ips[victim])
	waitEndpoints(t, ctx, c, ns.Name, "web", "the deleted pod's endpoint gone", want)
}

// runAsKubelet binds the pod to the cluster's first Node, as the scheduler
// would, and reports it Running and Ready at ip, as a kubelet would.
func runAsKubelet(t *testing.T, ctx context.Context, c *cluster.Cluster, p *corev1.Pod, ip string) {
	t.Helper()
	must.OK(t, c.Client.SubResource("binding").Create(ctx, p, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: c.Nodes[0]},
	}))
	must.OK(t, c.Client.Get(ctx, client.ObjectKeyFromObject(p), p))
	now := metav1.Now()
	p.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "198.18.0.1",
		PodIP:     ip,
		PodIPs:    []corev1.PodIP{{IP: ip}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", Image: "sessionapp", Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	must.OK(t, c.Client.Status().Update(ctx, p))
}

func waitEndpoints(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, svc, what string, want map[string]endpointState) {
	t.Helper()
	var last map[string]endpointState
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var slices discoveryv1.EndpointSliceList
		if err := c.Client.List(ctx, &slices, client.InNamespace(ns),
			client.MatchingLabels{discoveryv1.LabelServiceName: svc}); err != nil {
			return false, err
		}
		last = map[string]endpointState{}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					last[a] = endpointState{
						Ready:       ptr.Deref(e.Conditions.Ready, false),
						Serving:     ptr.Deref(e.Conditions.Serving, false),
						Terminating: ptr.Deref(e.Conditions.Terminating, false),
					}
				}
			}
		}
		return cmp.Equal(want, last), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; endpoints (-want +got):\n%s", what, err, cmp.Diff(want, last))
	}
}

func TestStopLeavesNothing(t *testing.T) {
	cluster.SkipIfShort(t)
	c, err := cluster.Start(context.Background(), cluster.Options{Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	pids := childPids(t, c.Dir)
	if len(pids) < 3 {
		t.Fatalf("recorded %d control-plane processes, want at least 3 (etcd, kube-apiserver, kube-controller-manager)", len(pids))
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertGone(t, c.Dir, pids, 5*time.Second)
}

// TestInterruptedTestLeavesNothing starts a cluster in a child test process
// and kills that process, as Ctrl-C or a timeout would, without Stop.
func TestInterruptedTestLeavesNothing(t *testing.T) {
	cluster.SkipIfShort(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), "STICKYDRAIN_CLUSTER_HELPER=1")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			dir := ""
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "CLUSTER-DIR "); ok {
					dir = d
					break
				}
			}
			if dir == "" {
				t.Fatalf("helper process printed no cluster directory")
			}
			go func() { // keep the pipe drained
				for sc.Scan() {
				}
			}()
			pids := childPids(t, dir)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			assertGone(t, dir, pids, 20*time.Second)
		})
	}
}

// TestMain doubles as the child process of TestInterruptedTestLeavesNothing:
// with STICKYDRAIN_CLUSTER_HELPER=1 it starts a cluster, prints its run
// directory and waits to be killed.
func TestMain(m *testing.M) {
	if os.Getenv("STICKYDRAIN_CLUSTER_HELPER") == "1" {
		c, err := cluster.Start(context.Background(), cluster.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("CLUSTER-DIR %s\n", c.Dir)
		time.Sleep(5 * time.Minute) // until the parent kills us
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func childPids(t *testing.T, dir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, p)
	}
	return pids
}

func assertGone(t *testing.T, dir string, pids []int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var alive []int
		for _, p := range pids {
			// A zombie still answers kill(0); only count processes that run.
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); err == nil && !strings.Contains(string(b), ") Z ") {
				alive = append(alive, p)
			}
		}
		_, statErr := os.Stat(dir)
		if len(alive) == 0 && os.IsNotExist(statErr) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: processes still running %v, run directory stat error %v", within, alive, statErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
