package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/node"
)

// A pod from an image built here runs on the real kubelet and containerd:
// scheduled by kube-scheduler, given an address on the node's bridge that
// the host reaches, Ready from its probe, given a ServiceAccount token with
// which it could reach the API server at the "kubernetes" Service; and
// nothing stays mounted or running once the node stops.
func TestPodRunsOnTheRealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and a node")
	}
	if os.Geteuid() != 0 {
		t.Skip("the node needs root")
	}
	lock := cluster.LockRealNodeT(t) // before the clock starts
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	imgs, err := node.BuildImages(ctx, t.TempDir(), t.Logf, "pause", "sessionapp")
	if err != nil {
		t.Fatal(err)
	}
	c := cluster.StartT(t, cluster.Options{RealNode: true, RealNodeLock: lock})
	n, err := node.Start(ctx, node.Options{Cluster: c, Log: t.Logf,
		Images: []string{imgs["pause"].Tarball, imgs["sessionapp"].Tarball}, SandboxImage: imgs["pause"].Ref})
	if err != nil {
		t.Fatal(err)
	}
	dir := n.Dir
	defer func() {
		if t.Failed() {
			t.Log(n.Logs(40))
		}
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the node's directory %s is still there after Stop", dir)
		}
		mounts, _ := os.ReadFile("/proc/self/mounts")
		if strings.Contains(string(mounts), dir) {
			t.Errorf("mounts below %s left after Stop", dir)
		}
	}()

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: imgs["sessionapp"].Ref, ImagePullPolicy: corev1.PullNever,
			Args:  []string{"--listen=:8080", "--pod=app"},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
		}}},
	}
	if _, err := c.Clientset.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	for {
		got, err = c.Clientset.CoreV1().Pods("default").Get(ctx, "app", metav1.GetOptions{})
		if err == nil && isReady(got) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod never Ready: %+v", got.Status)
		case <-time.After(300 * time.Millisecond):
		}
	}
	if got.Spec.NodeName != node.Name {
		t.Errorf("pod bound to %q, want %q", got.Spec.NodeName, node.Name)
	}
	if !strings.HasPrefix(got.Status.PodIP, "198.19.200.") {
		t.Errorf("pod IP %s is not in %s", got.Status.PodIP, node.PodCIDR)
	}
	resp, err := http.Get(fmt.Sprintf("http://%s:8080/manager/text/list", got.Status.PodIP))
	if err != nil {
		t.Fatalf("the host cannot reach the pod: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "/app:running:0:") {
		t.Errorf("the pod answered %q", body)
	}
	var token bool
	for _, v := range got.Spec.Volumes {
		if v.Projected != nil && strings.HasPrefix(v.Name, "kube-api-access-") {
			token = true
		}
	}
	if !token {
		t.Error("the pod got no ServiceAccount token volume")
	}
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
