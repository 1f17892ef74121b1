package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/stickydrain/stickydrain/test/proc"
)

// DefaultControllers are the kube-controller-manager controllers a cluster
// runs unless Options.Controllers says otherwise.
var DefaultControllers = []string{
	"endpointslice-controller",
	"endpointslice-mirroring-controller",
	"deployment-controller",
	"replicaset-controller",
	"statefulset-controller",
	"daemonset-controller",
	"garbage-collector-controller",
	"disruption-controller",
	"namespace-controller",
}

// Options configure a Cluster. The zero value is usable.
type Options struct {
	// BinDir holds etcd, kube-apiserver and kube-controller-manager. Empty
	// means $STICKYDRAIN_K8S_BINS, else the directory test/tools/build.sh
	// builds into (building the binaries when they are missing).
	BinDir string
	// Nodes are registered Ready. Empty means one Node, "node-1".
	Nodes []string
	// Controllers are passed to kube-controller-manager --controllers.
	// Empty means DefaultControllers.
	Controllers []string
	// ControllerManagerArgs are extra kube-controller-manager flags, e.g.
	// --max-endpoints-per-slice=2 to make the EndpointSlice controller split.
	ControllerManagerArgs []string
	// OwnSignals leaves SIGINT and SIGTERM to the caller, who then must
	// call Stop; by default the cluster stops itself on them and lets the
	// signal end the process.
	OwnSignals bool
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
	// RealNode readies the control plane for a real kubelet (test/node)
	// instead of registering Nodes: kube-scheduler runs; the API server
	// listens on APIServerIP:443, which is also the ClusterIP of the
	// "kubernetes" Service (the first of ServiceCIDR), so that pods reach it
	// as KUBERNETES_SERVICE_HOST says with no kube-proxy; webhooks are
	// called at their Services' endpoints (--enable-aggregator-routing);
	// ServiceAccounts get tokens and kube-root-ca.crt. One such cluster
	// runs on a machine at a time (a lock; the address is fixed).
	RealNode bool
	// RealNodeLock, with RealNode, is the machine's real-node lock the
	// caller took with LockRealNode before starting its clock; Start takes
	// it over and Stop releases it. Without it Start waits for the lock.
	RealNodeLock *RealNodeLock
}

// The real node's addresses, all in the tests' own 198.18.0.0/15.
const (
	// ServiceCIDR is the Services' range when Options.RealNode is set.
	ServiceCIDR = "198.19.255.0/24"
	// RealNodePodCIDR is the real node's pods' range (test/node).
	RealNodePodCIDR = "198.19.200.0/24"
	// APIServerIP is the first address of ServiceCIDR: the "kubernetes"
	// Service's ClusterIP, held by the host on an interface of its own.
	APIServerIP = "198.19.255.1"
	// apiLink is the interface holding APIServerIP (a bridge: this kernel has no dummy links).
	apiLink = "sdapi0"
)

// Cluster is a running control plane.
type Cluster struct {
	// Config authenticates as a member of system:masters.
	Config *rest.Config
	// Client is a controller-runtime client on Config.
	Client client.Client
	// Clientset is a client-go clientset on Config.
	Clientset kubernetes.Interface
	// KubeconfigPath is a kubeconfig file for Config, for processes under test.
	KubeconfigPath string
	// Dir is the run directory; everything the cluster writes is below it.
	Dir string
	// Nodes are the names of the registered Nodes.
	Nodes []string

	// CAPath is the file of the CA that signed the API server's serving
	// certificate.
	CAPath string
	// BinDir holds the control-plane binaries (and the kubelet).
	BinDir string

	env      *envtest.Environment
	kcm      *exec.Cmd
	kcmDone  chan struct{}
	sched    *exec.Cmd
	realNode *RealNodeLock // the lock a real-node cluster holds
	watchdog *exec.Cmd
	sigCh    chan os.Signal
	stopOnce sync.Once
	// procMu guards kcm and sched: Stop may run from the signal handler
	// while Start is still starting them.
	procMu  sync.Mutex
	stopErr error
	logf    func(string, ...any)
}

// Start starts etcd, kube-apiserver and kube-controller-manager, registers
// the Nodes and waits until the controller manager is running. On error it
// leaves nothing behind.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if inShortTests() {
		return nil, ErrShort
	}
	logf := opts.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	binDir := opts.BinDir
	if binDir == "" {
		binDir, err = FindBinaries(logf)
		if err != nil {
			return nil, err
		}
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return nil, fmt.Errorf("control plane binary %s: %w (build it with `make k8s-bins`)", b, err)
		}
	}

	root := filepath.Join(os.TempDir(), "stickydrain-cluster")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("creating run root: %w", err)
	}
	reapStale(root, logf)
	dir, err := os.MkdirTemp(root, fmt.Sprintf("run-%d-", os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("creating run directory: %w", err)
	}
	c = &Cluster{Dir: dir, BinDir: binDir, kcmDone: make(chan struct{}), logf: logf}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return c, fmt.Errorf("writing owner file: %w", err)
	}
	if err := c.startWatchdog(); err != nil {
		return c, err
	}
	if !opts.OwnSignals {
		c.handleSignals()
	}

	if opts.RealNode {
		c.realNode = opts.RealNodeLock
		if c.realNode == nil {
			if c.realNode, err = LockRealNode(logf); err != nil {
				return c, err
			}
		}
		if err := ensureAPILink(); err != nil {
			return c, err
		}
	}
	for _, sub := range []string{"etcd", "apiserver", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return c, fmt.Errorf("creating %s directory: %w", sub, err)
		}
	}
	etcdLog, err := os.Create(filepath.Join(dir, "logs", "etcd.log"))
	if err != nil {
		return c, fmt.Errorf("creating etcd log: %w", err)
	}
	apiLog, err := os.Create(filepath.Join(dir, "logs", "kube-apiserver.log"))
	if err != nil {
		return c, fmt.Errorf("creating kube-apiserver log: %w", err)
	}

	env := &envtest.Environment{
		BinaryAssetsDirectory:    binDir,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(dir, "etcd"), Out: etcdLog, Err: etcdLog}
	api := env.ControlPlane.GetAPIServer()
	api.CertDir = filepath.Join(dir, "apiserver")
	api.Out, api.Err = apiLog, apiLog
	if opts.RealNode {
		api.SecureServing.Address, api.SecureServing.Port = APIServerIP, "443"
		api.Configure().Set("service-cluster-ip-range", ServiceCIDR)
		// Webhooks are called at an endpoint of their Service: no
		// kube-proxy runs, and pod IPs are routable from the host.
		api.Configure().Set("enable-aggregator-routing", "true")
		// envtest switches ServiceAccount admission off; a real node's
		// pods get their token volume from it.
		api.Configure().Set("disable-admission-plugins", "")
		api.Configure().Set("enable-admission-plugins", "ServiceAccount")
		// Logs, exec and port-forward go to the kubelet at the Node's
		// InternalIP: its hostname resolves nowhere here.
		api.Configure().Set("kubelet-preferred-address-types", "InternalIP,Hostname")
	} else {
		// Every admission plugin a real cluster runs by default, except
		// ServiceAccount: no token controller runs, and podhost's pods need
		// none.
		api.Configure().Set("disable-admission-plugins", "ServiceAccount")
	}
	c.env = env

	logf("starting etcd and kube-apiserver (%s)", binDir)
	// envtest logs through controller-runtime's process-wide logger, which
	// prints a stack trace ("log.SetLogger(...) was never called") into the
	// test's output 30 s after start unless set. Nothing in a test process
	// logs through it that a test reads: discard.
	ctrllog.SetLogger(logr.Discard())
	if _, err := env.Start(); err != nil {
		return c, fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	c.recordChildren()

	admin, err := env.AddUser(envtest.User{Name: "stickydrain-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return c, fmt.Errorf("adding admin user: %w", err)
	}
	c.Config = admin.Config()
	c.Config.QPS, c.Config.Burst = 200, 400
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return c, fmt.Errorf("writing kubeconfig: %w", err)
	}
	c.KubeconfigPath = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(c.KubeconfigPath, kubeconfig, 0o600); err != nil {
		return c, fmt.Errorf("writing kubeconfig: %w", err)
	}
	if c.Client, err = client.New(c.Config, client.Options{}); err != nil {
		return c, fmt.Errorf("creating client: %w", err)
	}
	if c.Clientset, err = kubernetes.NewForConfig(c.Config); err != nil {
		return c, fmt.Errorf("creating clientset: %w", err)
	}
	c.CAPath = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(c.CAPath, api.SecureServing.CA, 0o644); err != nil {
		return c, fmt.Errorf("writing the API server's CA: %w", err)
	}

	controllers := opts.Controllers
	if len(controllers) == 0 {
		controllers = DefaultControllers
	}
	kcmArgs := opts.ControllerManagerArgs
	if opts.RealNode {
		// Pods on a real node get a ServiceAccount token and the CA to
		// check the API server with, as on any cluster.
		controllers = append(append([]string(nil), controllers...), "serviceaccount-controller", "root-ca-certificate-publisher-controller",
			// Lifts the not-ready taint the kubelet registers the Node with.
			"node-lifecycle-controller")
		kcmArgs = append(append([]string(nil), kcmArgs...), "--root-ca-file="+c.CAPath)
	}
	if err := c.startControllerManager(ctx, binDir, controllers, kcmArgs); err != nil {
		return c, err
	}
	if opts.RealNode {
		if err := c.startScheduler(binDir); err != nil {
			return c, err
		}
		c.logf("control plane ready for a real node: kubeconfig %s", c.KubeconfigPath)
		return c, nil
	}

	nodes := opts.Nodes
	if len(nodes) == 0 {
		nodes = []string{"node-1"}
	}
	for _, n := range nodes {
		if err := c.registerNode(ctx, n); err != nil {
			return c, err
		}
	}
	c.Nodes = nodes
	logf("control plane ready: kubeconfig %s", c.KubeconfigPath)
	return c, nil
}

func (c *Cluster) startControllerManager(ctx context.Context, binDir string, controllers, extra []string) error {
	logPath := filepath.Join(c.Dir, "logs", "kube-controller-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating kube-controller-manager log: %w", err)
	}
	cmd := exec.Command(filepath.Join(binDir, "kube-controller-manager"),
		"--kubeconfig="+c.KubeconfigPath,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		// React at once, as tests expect; a real cluster batches for 0s too.
		"--endpointslice-updates-batch-period=0s",
		"--concurrent-service-endpoint-syncs=10",
		"--v=2",
	)
	cmd.Args = append(cmd.Args, extra...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group (Ctrl-C goes to our Stop, not straight to it) and
	// killed with us if we die before Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	c.logf("starting kube-controller-manager (%s)", strings.Join(controllers, ","))
	if err := proc.StartCmd(cmd); err != nil {
		logFile.Close()
		return fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	c.procMu.Lock()
	c.kcm = cmd
	c.procMu.Unlock()
	c.appendPid(cmd.Process.Pid)
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(c.kcmDone)
	}()

	// The controller manager is up once the EndpointSlice controller's
	// workers run; its log says so. Reading the log keeps this free of the
	// secure port we switched off.
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-c.kcmDone:
			return fmt.Errorf("kube-controller-manager exited early: %s", proc.Tail(logPath, 20))
		case <-ctx.Done():
			return fmt.Errorf("waiting for kube-controller-manager: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		b, _ := os.ReadFile(logPath)
		// Its workers start only after its informers have synced.
		if bytes.Contains(b, []byte("Starting service queue worker threads")) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-controller-manager did not start its controllers within 60s: %s", proc.Tail(logPath, 20))
		}
	}
}

// startScheduler runs kube-scheduler with the admin's kubeconfig.
func (c *Cluster) startScheduler(binDir string) error {
	logFile, err := os.Create(filepath.Join(c.Dir, "logs", "kube-scheduler.log"))
	if err != nil {
		return fmt.Errorf("creating kube-scheduler log: %w", err)
	}
	cmd := exec.Command(filepath.Join(binDir, "kube-scheduler"),
		"--kubeconfig="+c.KubeconfigPath, "--leader-elect=false", "--secure-port=0", "--v=2")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	c.logf("starting kube-scheduler")
	if err := proc.StartCmd(cmd); err != nil {
		logFile.Close()
		return fmt.Errorf("starting kube-scheduler: %w", err)
	}
	c.procMu.Lock()
	c.sched = cmd
	c.procMu.Unlock()
	c.appendPid(cmd.Process.Pid)
	go func() { _ = cmd.Wait(); logFile.Close() }()
	return nil
}

// RealNodeLock is the machine-wide lock of real-node clusters: their API
// server address and port are fixed, so one runs at a time.
type RealNodeLock struct{ f *os.File }

// LockRealNode waits until no other real-node cluster runs on the machine
// and takes the lock, saying through logf when it has to wait. Tests that
// run concurrently with others take it before their time budget starts
// and pass it in Options.RealNodeLock.
func LockRealNode(logf func(string, ...any)) (*RealNodeLock, error) {
	root := filepath.Join(os.TempDir(), "stickydrain-cluster")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("creating run root: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(root, "real-node.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the real-node lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		return &RealNodeLock{f: f}, nil
	}
	if logf != nil {
		logf("cluster: another test's real node is running; waiting for it to stop")
	}
	start := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("taking the real-node lock: %w", err)
	}
	if logf != nil {
		logf("cluster: real node free after %v", time.Since(start).Round(time.Second))
	}
	return &RealNodeLock{f: f}, nil
}

// Release gives the lock back (Stop does for a cluster that took it over).
func (l *RealNodeLock) Release() {
	if l != nil && l.f != nil {
		_ = l.f.Close()
	}
}

// ensureAPILink gives the host APIServerIP on an interface of its own, a
// bridge without ports (Stop deletes it; one left by a killed test is
// reused).
func ensureAPILink() error {
	if out, err := exec.Command("ip", "-o", "addr", "show", "dev", apiLink).CombinedOutput(); err == nil && strings.Contains(string(out), APIServerIP+"/32") {
		return nil
	}
	for _, argv := range [][]string{
		{"ip", "link", "add", apiLink, "type", "bridge"},
		{"ip", "addr", "add", APIServerIP + "/32", "dev", apiLink},
		{"ip", "link", "set", apiLink, "up"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil && !strings.Contains(string(out), "exists") {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, out)
		}
	}
	return nil
}

func (c *Cluster) registerNode(ctx context.Context, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux"},
	}}
	if err := c.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering node %s: %w", name, err)
	}
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "stickydrain test node", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}},
		Capacity: corev1.ResourceList{
			corev1.ResourcePods: resourceQuantity("1000"), corev1.ResourceCPU: resourceQuantity("64"),
			corev1.ResourceMemory: resourceQuantity("256Gi"),
		},
	}
	node.Status.Allocatable = node.Status.Capacity
	if err := c.Client.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("setting node %s Ready: %w", name, err)
	}
	return nil
}

// Stop kills the controller manager, stops kube-apiserver and etcd, and
// removes the run directory. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		c.procMu.Lock()
		sched, kcm := c.sched, c.kcm
		c.procMu.Unlock()
		if sched != nil && sched.Process != nil {
			_ = syscall.Kill(-sched.Process.Pid, syscall.SIGKILL)
		}
		if kcm != nil && kcm.Process != nil {
			_ = syscall.Kill(-kcm.Process.Pid, syscall.SIGTERM)
			select {
			case <-c.kcmDone:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-kcm.Process.Pid, syscall.SIGKILL)
				<-c.kcmDone
			}
		}
		if c.env != nil {
			if err := c.env.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("stopping etcd and kube-apiserver: %w", err))
			}
		}
		// Whatever envtest did not stop (it gives up after its timeout) is
		// killed here, so that nothing outlives the cluster.
		for _, pid := range c.pids() {
			if alive(pid) {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if c.sigCh != nil {
			signal.Stop(c.sigCh)
			close(c.sigCh)
		}
		if c.Dir != "" {
			if err := os.RemoveAll(c.Dir); err != nil {
				errs = append(errs, fmt.Errorf("removing run directory: %w", err))
			}
			_ = os.Remove(filepath.Dir(c.Dir)) // the shared root, once empty
		}
		if c.watchdog != nil && c.watchdog.Process != nil {
			_ = c.watchdog.Process.Kill()
			_ = c.watchdog.Wait()
		}
		if c.realNode != nil {
			// The API server's address goes with it, while the lock is
			// still held.
			if out, err := exec.Command("ip", "link", "delete", apiLink).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
				errs = append(errs, fmt.Errorf("deleting %s: %w: %s", apiLink, err, out))
			}
			c.realNode.Release() // and the lock with it
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// AddUser authenticates a new user with the given groups and returns the
// path of a kubeconfig for it, to run a component with the RBAC it ships.
func (c *Cluster) AddUser(name string, groups ...string) (string, error) {
	u, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", name, err)
	}
	b, err := u.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig for %s: %w", name, err)
	}
	f, err := os.CreateTemp(c.Dir, "kubeconfig-*")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return "", err
	}
	return f.Name(), nil
}

// Logs returns the last n lines of each control-plane log, for failing tests.
func (c *Cluster) Logs(n int) string {
	var b strings.Builder
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(c.Dir, "logs", name+".log")); err != nil {
			continue
		}
		fmt.Fprintf(&b, "--- %s (last %d lines)\n%s\n", name, n, proc.Tail(filepath.Join(c.Dir, "logs", name+".log"), n))
	}
	return b.String()
}

// handleSignals stops the cluster on SIGINT or SIGTERM, then lets the
// signal take its default course, so an interrupted test leaves nothing.
func (c *Cluster) handleSignals() {
	c.sigCh = make(chan os.Signal, 1)
	signal.Notify(c.sigCh, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig, ok := <-c.sigCh
		if !ok {
			return
		}
		_ = c.Stop()
		signal.Reset(sig)
		_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
	}()
}

// startWatchdog starts a process that outlives us only to clean up: when our
// pid is gone, it kills every process group listed in the run directory's
// pids file and removes the directory.
func (c *Cluster) startWatchdog() error {
	script := `owner="$1"; dir="$2"
while kill -0 "$owner" 2>/dev/null; do sleep 1; done
if [ -f "$dir/pids" ]; then
  for p in $(cat "$dir/pids"); do kill -KILL -- "-$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
fi
rm -rf "$dir"`
	cmd := exec.Command("/bin/sh", "-c", script, "stickydrain-cluster-watchdog", strconv.Itoa(os.Getpid()), c.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting cluster watchdog: %w", err)
	}
	c.watchdog = cmd
	return nil
}

// recordChildren writes the pids of this cluster's etcd and kube-apiserver
// (direct children that envtest starts in their own process groups) to the
// pids file for the watchdog, for Stop and for RestartControlPlane. Only
// those whose command line names this cluster's run directory: a test
// process may run several clusters at once (concurrent scenarios), and
// another's processes are not this one's to kill or restart.
func (c *Cluster) recordChildren() {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	watchdog := 0
	if c.watchdog != nil && c.watchdog.Process != nil {
		watchdog = c.watchdog.Process.Pid
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == watchdog {
			continue
		}
		if ppid(pid) != self {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(raw), c.Dir+"/") {
			c.appendPid(pid)
		}
	}
}

func (c *Cluster) appendPid(pid int) {
	f, err := os.OpenFile(filepath.Join(c.Dir, "pids"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, pid)
}

func (c *Cluster) pids() []int {
	b, err := os.ReadFile(filepath.Join(c.Dir, "pids"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// reapStale removes the run directories of test processes that died without
// cleaning up and whose watchdog did not either (the machine rebooted, or
// the watchdog was killed too).
func reapStale(root string, logf func(string, ...any)) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || alive(owner) {
			continue
		}
		stale := &Cluster{Dir: dir}
		for _, pid := range stale.pids() {
			if alive(pid) {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
		logf("removing stale run directory %s", dir)
		_ = os.RemoveAll(dir)
	}
}

// alive reports whether pid runs: a zombie (exited, not yet reaped by
// its parent) does not.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name is in parentheses and may hold spaces: skip past it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return -1
	}
	p, _ := strconv.Atoi(fields[1])
	return p
}

// FindBinaries returns the directory holding the control-plane binaries:
// $STICKYDRAIN_K8S_BINS when set, else what test/tools/build.sh prints,
// which builds them first when they are missing.
func FindBinaries(logf func(string, ...any)) (string, error) {
	if d := os.Getenv("STICKYDRAIN_K8S_BINS"); d != "" {
		return d, nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("locating test/tools: no caller information")
	}
	script := filepath.Join(filepath.Dir(file), "..", "tools", "build.sh")
	logf("locating control-plane binaries with %s (builds them when missing: ~17 minutes cold)", script)
	dir, err := proc.BuildScript(script)
	if err != nil {
		return "", fmt.Errorf("building control-plane binaries: %w", err)
	}
	return dir, nil
}

// RestartControlPlane stops kube-apiserver and etcd (SIGTERM, as a
// restart would), keeps them down for down, and starts them again with
// the same command lines — the same data directory, certificates and
// ports — then waits until the API server is ready. Clients reconnect and
// relist, as after a control-plane upgrade or a crash.
func (c *Cluster) RestartControlPlane(ctx context.Context, down time.Duration) error {
	type proc struct {
		pid  int
		argv []string
	}
	found := map[string]proc{}
	for _, pid := range c.pids() {
		if !alive(pid) {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if name := filepath.Base(argv[0]); name == "etcd" || name == "kube-apiserver" {
			found[name] = proc{pid, argv}
		}
	}
	if len(found) != 2 {
		return fmt.Errorf("restarting the control plane: found %d of etcd and kube-apiserver", len(found))
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		p := found[name]
		// kube-apiserver stops listening at once on SIGTERM, but its exit
		// can hang: measured here, 30 s on a quota evaluator's worker after
		// everything else had shut down — an outage 30 s longer than asked
		// for. What is left after 5 s is killed, as the kubelet kills a
		// static pod past its grace period.
		began := time.Now()
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
		deadline := time.Now().Add(5 * time.Second)
		for alive(p.pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		how := "exited"
		if alive(p.pid) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			for alive(p.pid) {
				time.Sleep(20 * time.Millisecond)
			}
			how = "killed"
		}
		c.logf("%s %s %v after SIGTERM", name, how, time.Since(began).Round(10*time.Millisecond))
	}
	c.logf("control plane down for %v", down)
	time.Sleep(down)
	restarted := time.Now()
	for _, name := range []string{"etcd", "kube-apiserver"} {
		p := found[name]
		logName := map[string]string{"etcd": "etcd.log", "kube-apiserver": "kube-apiserver.log"}[name]
		out, err := os.OpenFile(filepath.Join(c.Dir, "logs", logName), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		cmd := exec.Command(p.argv[0], p.argv[1:]...)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			out.Close()
			return fmt.Errorf("starting %s again: %w", name, err)
		}
		c.appendPid(cmd.Process.Pid)
		go func() { _ = cmd.Wait(); out.Close() }()
	}
	for {
		body, err := c.Clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			c.logf("control plane back, ready %v after it started again", time.Since(restarted).Round(10*time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready again: %w (log %s)", ctx.Err(), filepath.Join(c.Dir, "logs", "kube-apiserver.log"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
