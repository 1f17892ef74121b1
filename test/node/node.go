// Package node runs a real Kubernetes node for tests: containerd (built from
// its module, test/tools/containerd.sh) with Debian's runc and CNI plugins,
// and the kubelet (built with the control plane, test/tools/build.sh),
// registered with a cluster started with cluster.Options.RealNode. Pods run
// from images built here (tools/images) and imported into containerd: no
// registry is reachable.
//
// Everything lives under one run directory: containerd's root, state and
// socket, the kubelet's root directory and pod logs, the CNI configuration
// and address store. Stop deletes every pod, stops the kubelet and
// containerd, unmounts what they mounted, removes the pods' bridge and the
// directory; a watchdog does the same when the test process dies first.
package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/proc"
)

const (
	// Name is the Node's name.
	Name = "stickydrain-node"
	// PodCIDR is the pods' range: a /24 of 198.18.0.0/15 that test/podhost
	// never hands out.
	PodCIDR    = cluster.RealNodePodCIDR
	podGateway = "198.19.200.1"
	bridge     = "sdnode0"
	// runDirRoot holds the run directories; short, because containerd's
	// and the shims' unix sockets live below it.
	runDirRoot = "/tmp/sdnode"
)

// Options configure Start.
type Options struct {
	// Cluster is started with RealNode.
	Cluster *cluster.Cluster
	// ContainerdDir holds containerd, containerd-shim-runc-v2 and ctr;
	// empty means what test/tools/containerd.sh prints (building them when
	// missing).
	ContainerdDir string
	// Images are image tarballs (tools/images' NAME-OS-ARCH.tar) to import.
	Images []string
	// SandboxImage is the pause image's reference; it must be among Images.
	SandboxImage string
	// Registries are host:port of plain-HTTP registries on loopback
	// (test/registry) that containerd pulls from, besides the imported
	// Images.
	Registries []string
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
}

// Node is a running kubelet on containerd.
type Node struct {
	Name string
	// Dir is the run directory.
	Dir string
	// Socket is containerd's CRI and API socket.
	Socket string

	opts     Options
	ctrDir   string
	logf     func(string, ...any)
	mu       sync.Mutex
	procs    []*exec.Cmd
	watchdog *exec.Cmd
	stopOnce sync.Once
	stopErr  error
}

// Start starts containerd, imports the images, starts the kubelet and waits
// until the Node is Ready. On error it leaves nothing behind.
func Start(ctx context.Context, opts Options) (n *Node, err error) {
	logf := opts.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if opts.Cluster == nil {
		return nil, errors.New("node: no cluster")
	}
	ctrDir := opts.ContainerdDir
	if ctrDir == "" {
		if ctrDir, err = FindContainerd(logf); err != nil {
			return nil, err
		}
	}
	for _, p := range []string{"/usr/sbin/runc", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("node: %s: %w (test/deps.sh installs runc and containernetworking-plugins)", p, err)
		}
	}
	if err := os.MkdirAll(runDirRoot, 0o755); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	reapStale(logf)
	dir, err := os.MkdirTemp(runDirRoot, "n")
	if err != nil {
		return nil, fmt.Errorf("node: creating run directory: %w", err)
	}
	n = &Node{Name: Name, Dir: dir, Socket: filepath.Join(dir, "c.sock"), opts: opts, ctrDir: ctrDir, logf: logf}
	defer func() {
		if err != nil {
			if t := n.Logs(30); t != "" {
				err = fmt.Errorf("%w\n%s", err, t)
			}
			_ = n.Stop()
			n = nil
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return n, err
	}
	if err := n.writeFiles(); err != nil {
		return n, err
	}
	if err := n.startWatchdog(); err != nil {
		return n, err
	}
	logf("starting containerd (%s)", ctrDir)
	if err := n.startContainerd(ctx); err != nil {
		return n, err
	}
	for _, img := range opts.Images {
		if err := n.Import(ctx, img); err != nil {
			return n, err
		}
	}
	logf("starting the kubelet")
	if err := n.startKubelet(ctx); err != nil {
		return n, err
	}
	return n, nil
}

// FindContainerd returns what test/tools/containerd.sh prints, building
// containerd when it is missing.
func FindContainerd(logf func(string, ...any)) (string, error) {
	if d := os.Getenv("STICKYDRAIN_CONTAINERD"); d != "" {
		return d, nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("locating test/tools: no caller information")
	}
	script := filepath.Join(filepath.Dir(file), "..", "tools", "containerd.sh")
	logf("locating containerd with %s (builds it when missing: ~3 minutes cold)", script)
	dir, err := proc.BuildScript(script)
	if err != nil {
		return "", fmt.Errorf("building containerd: %w", err)
	}
	return dir, nil
}

func (n *Node) path(p ...string) string { return filepath.Join(append([]string{n.Dir}, p...)...) }

// writeFiles writes containerd's, the CNI's and the kubelet's configuration
// and the cleanup script Stop and the watchdog run.
func (n *Node) writeFiles() error {
	for _, d := range []string{"root", "state", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "logs"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	// Version 3 is containerd 2.x's configuration. restrict_oom_score_adj:
	// this VM's root lacks CAP_SYS_RESOURCE, so the sandbox's -998 cannot be
	// set and every pod would fail without it.
	containerd := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[5]q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[7]q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  # Pods' network namespaces below the state directory, where Stop finds
  # them, not in /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/usr/lib/cni']
    conf_dir = %[6]q
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '/usr/sbin/runc'
        SystemdCgroup = false

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
`, n.path("root"), n.path("state"), n.Socket, n.Socket+".ttrpc", n.opts.SandboxImage, n.path("cni", "net.d"), n.path("certs.d"))
	// The pods' addresses: a bridge on the host with the gateway, so the
	// host (HAProxy, the API server calling webhooks, the tests) reaches
	// every pod directly and pods reach the API server on the host.
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "stickydrain-node",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": %q, "gateway": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dataDir": %q
    }
  }]
}
`, bridge, PodCIDR, podGateway, n.path("cni", "ipam"))
	ports, err := proc.FreePorts(2)
	if err != nil {
		return err
	}
	// cgroup v1 (this machine's): failCgroupV1 false, or the kubelet 1.35+
	// refuses to start. Anonymous requests are allowed: the API server
	// (envtest's, with no kubelet client certificate) reads logs through it,
	// and it listens on the tests' own address only.
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%[1]s
imageServiceEndpoint: unix://%[1]s
address: %[2]s
port: %[3]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[4]d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
podLogsDirectory: %[5]q
staticPodPath: ""
evictionHard: {memory.available: "1%%", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
failSwapOn: false
serializeImagePulls: false
syncFrequency: 10s
nodeStatusUpdateFrequency: 4s
`, n.Socket, cluster.APIServerIP, ports[0], ports[1], n.path("pod-logs"))
	files := map[string]string{
		"containerd.toml":                   containerd,
		"certs.d/README":                    "containerd's registry hosts (config_path): one directory per registry\n",
		"cni/net.d/10-stickydrain.conflist": cni,
		"kubelet.yaml":                      kubelet,
		"healthz-port":                      strconv.Itoa(ports[1]),
		"cleanup.sh":                        cleanupScript,
	}
	// Each registry over plain HTTP, as containerd's hosts.toml says it.
	for _, r := range n.opts.Registries {
		files["certs.d/"+r+"/hosts.toml"] = fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+r, "http://"+r)
	}
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(n.path(name)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(n.path(name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cleanupScript undoes everything a node made, given its run directory: it
// kills the kubelet, containerd and every shim and container of this
// containerd (their command lines or cgroups name the directory), unmounts
// what is mounted below the directory, and removes the bridge and the
// directory. Stop runs it after stopping things gracefully; the watchdog
// runs it when the test process is gone.
const cleanupScript = `dir="$1"
for p in $(cat "$dir/pids" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
# The shims and the containers they run: found by the run directory in
# their command lines (the shims) or their mount namespace's root.
for p in $(pgrep -f "$dir" 2>/dev/null); do
  [ "$p" = "$$" ] || kill -KILL "$p" 2>/dev/null
done
for cg in /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/memory/kubepods; do
  [ -d "$cg" ] || continue
  find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r p; do kill -KILL "$p" 2>/dev/null; done
done
sleep 0.2
grep " $dir" /proc/self/mounts | awk '{print $2}' | sort -r | while read -r m; do
  umount -l "$(printf '%b' "$m")" 2>/dev/null
done
ip link delete ` + bridge + ` 2>/dev/null
for ctl in /sys/fs/cgroup/*/; do
  [ -d "${ctl}kubepods" ] && find "${ctl}kubepods" -depth -type d -exec rmdir {} + 2>/dev/null
done
rm -rf "$dir"
`

// startWatchdog starts a process that, once this test process is gone,
// runs the cleanup script.
func (n *Node) startWatchdog() error {
	script := `owner="$1"; dir="$2"
while kill -0 "$owner" 2>/dev/null; do sleep 1; done
sh "$dir/cleanup.sh" "$dir"`
	cmd := exec.Command("/bin/sh", "-c", script, "stickydrain-node-watchdog", strconv.Itoa(os.Getpid()), n.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting node watchdog: %w", err)
	}
	n.watchdog = cmd
	// reapStale stops a dead owner's watchdog (and the clean-up it runs,
	// in its process group) before cleaning up itself, so that a late
	// clean-up never kills the next node's pods.
	return os.WriteFile(n.path("watchdog"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
}

// reapStale cleans up after test processes that died without cleaning up
// and whose watchdog did not either.
func reapStale(logf func(string, ...any)) {
	entries, err := os.ReadDir(runDirRoot)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(runDirRoot, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || syscall.Kill(owner, 0) == nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, "watchdog")); err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			// Only if that pid is still the watchdog, not a process that
			// took its number since.
			if err == nil && pid > 0 && bytes.Contains(cmdline, []byte("stickydrain-node-watchdog")) {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
		logf("cleaning up the stale node %s", dir)
		_ = exec.Command("sh", filepath.Join(dir, "cleanup.sh"), dir).Run()
	}
}

func (n *Node) start(name string, env []string, argv ...string) (*exec.Cmd, error) {
	logFile, err := os.Create(n.path("logs", name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := proc.StartCmd(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); logFile.Close() }()
	n.mu.Lock()
	n.procs = append(n.procs, cmd)
	n.mu.Unlock()
	f, err := os.OpenFile(n.path("pids"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintln(f, cmd.Process.Pid)
		f.Close()
	}
	return cmd, nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	// The shim is found on PATH.
	env := []string{"PATH=" + n.ctrDir + ":" + os.Getenv("PATH")}
	cmd, err := n.start("containerd", env, filepath.Join(n.ctrDir, "containerd"), "--config", n.path("containerd.toml"))
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := n.ctr(ctx, "version"); err == nil {
			return nil
		}
		if cmd.ProcessState != nil || syscall.Kill(cmd.Process.Pid, 0) != nil {
			return fmt.Errorf("containerd exited: %s", proc.Tail(n.path("logs", "containerd.log"), 20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd not answering within 60s: %s", proc.Tail(n.path("logs", "containerd.log"), 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ctr runs ctr against this node's containerd in the CRI's namespace.
func (n *Node) ctr(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(n.ctrDir, "ctr"), append([]string{"--address", n.Socket, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Import imports an image tarball into the node's containerd, where the
// kubelet finds it (pods then need imagePullPolicy IfNotPresent or Never).
func (n *Node) Import(ctx context.Context, tarball string) error {
	n.logf("importing %s", filepath.Base(tarball))
	return n.ctr(ctx, "images", "import", "--local", tarball)
}

func (n *Node) startKubelet(ctx context.Context) error {
	cmd, err := n.start("kubelet", nil, filepath.Join(n.opts.Cluster.BinDir, "kubelet"),
		"--config="+n.path("kubelet.yaml"),
		"--kubeconfig="+n.opts.Cluster.KubeconfigPath,
		"--root-dir="+n.path("kubelet"),
		"--hostname-override="+n.Name,
		"--node-ip="+cluster.APIServerIP,
		// 3 logs each preStop hook's start and end: the record PreStop reads.
		"--v=3",
	)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		var node corev1.Node
		err := n.opts.Cluster.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &node)
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					n.logf("node %s Ready", n.Name)
					return nil
				}
			}
		}
		if cmd.ProcessState != nil || syscall.Kill(cmd.Process.Pid, 0) != nil {
			return fmt.Errorf("kubelet exited: %s", proc.Tail(n.path("logs", "kubelet.log"), 30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not Ready within 120s: %s", n.Name, proc.Tail(n.path("logs", "kubelet.log"), 30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Logs returns the last n lines of containerd's and the kubelet's logs.
func (n *Node) Logs(lines int) string {
	var b strings.Builder
	for _, name := range []string{"containerd", "kubelet"} {
		p := n.path("logs", name+".log")
		if _, err := os.Stat(p); err != nil {
			continue
		}
		fmt.Fprintf(&b, "--- %s (last %d lines)\n%s\n", name, lines, proc.Tail(p, lines))
	}
	return b.String()
}

// Stop deletes every pod bound to the node and waits (up to 60 s) for the
// kubelet to stop them, then stops the kubelet and containerd and cleans up.
// Safe to call more than once.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() {
		var errs []error
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if c := n.opts.Cluster; c != nil && c.Clientset != nil {
			pods, err := c.Clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
			if err == nil {
				for _, p := range pods.Items {
					_ = c.Clientset.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
				}
			}
		}
		n.mu.Lock()
		procs := append([]*exec.Cmd(nil), n.procs...)
		n.mu.Unlock()
		for i := len(procs) - 1; i >= 0; i-- {
			p := procs[i]
			_ = p.Process.Signal(syscall.SIGTERM)
			deadline := time.Now().Add(10 * time.Second)
			for syscall.Kill(p.Process.Pid, 0) == nil && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if out, err := exec.Command("sh", n.path("cleanup.sh"), n.Dir).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("node cleanup: %w: %s", err, out))
		}
		if n.watchdog != nil && n.watchdog.Process != nil {
			_ = n.watchdog.Process.Kill()
			_ = n.watchdog.Wait()
		}
		if mounts, _ := os.ReadFile("/proc/self/mounts"); bytes.Contains(mounts, []byte(" "+n.Dir)) {
			errs = append(errs, fmt.Errorf("node cleanup left mounts below %s", n.Dir))
		}
		n.stopErr = errors.Join(errs...)
	})
	return n.stopErr
}
