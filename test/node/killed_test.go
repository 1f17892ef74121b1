package node_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/node"
)

// A test process killed outright (SIGKILL: a test timeout's panic, an
// OOM kill) with a pod running on its node leaves nothing: its watchdog
// stops the kubelet, containerd, the shim and the pod's processes,
// unmounts everything below the node's directory, deletes the bridge and
// the directory.
func TestKilledTestLeavesNothingOfItsNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and a node")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "STICKYDRAIN_NODE_HELPER=1")
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
		if d, ok := strings.CutPrefix(sc.Text(), "NODE-DIR "); ok {
			dir = d
			break
		}
	}
	if dir == "" {
		t.Fatal("the helper process printed no node directory")
	}
	go func() { // keep the pipe drained
		for sc.Scan() {
		}
	}()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mounts, _ := os.ReadFile("/proc/self/mounts")
		_, statErr := os.Stat(dir)
		procs, _ := exec.Command("pgrep", "-f", dir).Output()
		bridge := exec.Command("ip", "link", "show", "sdnode0").Run() == nil
		if !strings.Contains(string(mounts), dir) && os.IsNotExist(statErr) && len(procs) == 0 && !bridge {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the kill: mounts left %v, directory left %v, processes %q, bridge left %v",
				strings.Contains(string(mounts), dir), statErr == nil, procs, bridge)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestMain doubles as the helper of TestKilledTestLeavesNothingOfItsNode:
// with STICKYDRAIN_NODE_HELPER=1 it starts a control plane and a node, runs
// a pod, prints the node's directory and waits to be killed.
func TestMain(m *testing.M) {
	if os.Getenv("STICKYDRAIN_NODE_HELPER") == "1" {
		if err := helper(); err != nil {
			fmt.Fprintln(os.Stderr, "node helper:", err)
			os.Exit(1)
		}
		time.Sleep(5 * time.Minute) // until the parent kills us
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func helper() error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "node-helper-")
	if err != nil {
		return err
	}
	imgs, err := node.BuildImages(ctx, dir, func(string, ...any) {}, "pause", "sessionapp")
	if err != nil {
		return err
	}
	c, err := cluster.Start(ctx, cluster.Options{RealNode: true})
	if err != nil {
		return err
	}
	n, err := node.Start(ctx, node.Options{Cluster: c, Images: []string{imgs["pause"].Tarball, imgs["sessionapp"].Tarball}, SandboxImage: imgs["pause"].Ref})
	if err != nil {
		return err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: imgs["sessionapp"].Ref, ImagePullPolicy: corev1.PullNever, Args: []string{"--listen=:8080"},
		}}},
	}
	if _, err := c.Clientset.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	for {
		p, err := c.Clientset.CoreV1().Pods("default").Get(ctx, "app", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the pod never ran: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Printf("NODE-DIR %s\n", n.Dir)
	return nil
}
