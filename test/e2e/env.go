// Package e2e runs stickydrain whole on the local control plane: the real
// webhook and controller binaries with their real flags, certificates
// from certs/, two real HAProxy processes, test/podhost running the pods
// and test/sessionapp as the application. The end-to-end scenarios and
// the demo (`make demo`) share it; what the integration suites and the
// benchmarks share with it is test/framework.
package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/framework"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/install"
	"github.com/stickydrain/stickydrain/test/nginxplus"
	"github.com/stickydrain/stickydrain/test/node"
	"github.com/stickydrain/stickydrain/test/podhost"
	"github.com/stickydrain/stickydrain/test/proc"
	"github.com/stickydrain/stickydrain/test/registry"
	"github.com/stickydrain/stickydrain/test/tcpfront"
	"github.com/stickydrain/stickydrain/test/testbin"
)

// Env is everything running.
type Env struct {
	Cluster *cluster.Cluster
	// Host runs the pods, unless Options.Node asked for the real node.
	Host *podhost.Host
	// Node is the real kubelet on containerd running the pods from the
	// images built here, when Options.Node asks for it.
	Node    *node.Node
	HAProxy []*haproxytest.HAProxy
	// Front stands before the HAProxy instances as a cloud load balancer
	// or a Service would: users connect to it, and it sends each new
	// connection to an instance whose readiness check passes.
	Front *tcpfront.Front
	// NGINXPlus are NGINX Plus API emulators (not NGINX Plus), when
	// Options.NGINXPlus asks for them: the Service is then mapped onto both
	// load balancers, the users' traffic goes through HAProxy and the tests
	// read the emulators' API state.
	NGINXPlus []*nginxplus.Emulator
	Dir       string
	// Controllers are the controller replicas, in start order.
	Controllers []*framework.Controller

	controllerDirs       []string
	controllerKubeconfig string
	ctlMu                sync.Mutex // guards Controllers, controllerDirs and procs for the supervisor
	stopSupervising      func()
	controllersDown      bool // StopControllers: the supervisor leaves them down; guarded by ctlMu

	log      func(string, ...any)
	plusURLs []string
	built    map[string]string
	faultsMu sync.Mutex
	kills    []killWindow // when a process in users' paths was killed, until the front knew
	// leaderless are the spans from a leader's kill until a replica
	// acquired the Lease, guarded by faultsMu.
	leaderless []killWindow
	lbMu       sync.Mutex // guards HAProxy, which scaling changes while others read it
	bins       *testbin.Builder
	flavour    haproxytest.Flavour // the HAProxy instances' version and mode
	// ingresses are the running replicas of the ingress users go through
	// (Options.Ingress), guarded by lbMu; the first is the one whose view
	// the observer reads. ingressKind is set for the whole run.
	ingresses   []*ingressProxy
	ingressKind Ingress
	ingressPeer peer
	ingressN    int // replicas started so far, for their names
	// ingressKubeconfig is the ingress controller's ServiceAccount's.
	ingressKubeconfig string
	procs             []*proc.Proc
	webhook           *framework.Webhook // the webhook started on the host, if any
	cleanup           []func()
	// appImage and drainctlImage are the images pods name: podhost's
	// names for its binaries, or the images built and imported on the
	// real node.
	appImage, drainctlImage string
	// tomcat: the app is Tomcat (Options.Tomcat).
	tomcat    bool
	installed bool // Options.Install
	// installRefs are the stickydrain and drainctl images as pushed to the
	// registry (Options.Install), host/stickydrain/NAME:TAG@sha256:….
	installRefs      map[string]string
	registryHost     string   // Options.Install: the registry's host:port
	drainctlDelivery string   // Options.DrainctlDelivery
	probesOnly       bool     // Options.FrontProbesOnly
	alsoAllowed      []string // Options.AlsoAllowed
	alsoListed       []string // Options.AlsoListed
	readiness        haproxytest.Readiness
	controllerPprof  bool // Options.ControllerPprof
}

// Options configure Start.
type Options struct {
	Log        func(format string, args ...any)
	OwnSignals bool
	// NGINXPlus adds two NGINX Plus API emulators as a second load balancer.
	NGINXPlus bool
	// ControllerReplicas runs that many controllers with leader election
	// (default 1).
	ControllerReplicas int
	// HAProxy is the version and mode of the HAProxy instances; default:
	// the haproxy on PATH (Debian's 2.6), slots.
	HAProxy haproxytest.Flavour
	// Ingress, when set, runs that ingress controller (built from source)
	// instead of the HAProxy instances and the stickydrain controller:
	// the webhook alone, as a webhook-only install.
	Ingress Ingress
	// Node runs the pods on a real node (test/node: kubelet, containerd,
	// runc) from images built by tools/images, the injected init container
	// copying drainctl from the drainctl image; podhost otherwise.
	Node bool
	// Install (with Node) installs stickydrain as a user does instead of
	// running the webhook and the controller on the host: cert-manager
	// issues the certificate, manifests/default runs both as pods from the
	// stickydrain image, the controller's configuration is the operator's
	// (the instances' Runtime API on TCP at the host's address, which pods
	// reach).
	Install bool
	// Tomcat (with Node) runs the app on Debian's Tomcat 10.1 (tools/images'
	// tomcat image: the session app as a JSP, test/e2e/testdata/tomcat)
	// instead of the session app: drainctl reads the manager's session
	// list with credentials from a Secret, as manifests/samples/tomcat
	// does.
	Tomcat bool
	// DrainctlDelivery, when set, is the scenario Namespace's
	// stickydrain.io/drainctl: "image-volume" mounts the drainctl image
	// into the pods (the real node's containerd 2.x supports it; podhost
	// does not).
	DrainctlDelivery string
	// FrontProbesOnly makes the front check its targets every second and
	// learn of a killed HAProxy from those checks alone, as a Service or a
	// cloud load balancer does; otherwise it checks every 100 ms and is
	// told at the kill (as the kubelet turns a pod NotReady when its
	// container exits).
	FrontProbesOnly bool
	// Bins builds the binaries the environment runs; one Builder shared
	// by a test process's environments links each binary once (5–16 s a
	// binary here). Default: the environment's own.
	Bins *testbin.Builder
	// ControllerPprof serves each controller replica's Go profiles
	// (--pprof-bind-address, Controller.PprofAddr), for the soak's memory
	// figures.
	ControllerPprof bool
	// Readiness is the HAProxy instances' readiness rule: ReadyConfirmed
	// (the zero value: an instance no controller confirmed for 2 s leaves
	// rotation, which the partition and soak scenarios assert) or
	// ReadyFilled, the sample's.
	Readiness haproxytest.Readiness
	// AlsoAllowed are namespaces the operator allows onto the load
	// balancers beside the scenario's own (a second tenant).
	AlsoAllowed []string
	// AlsoListed are upstreams the operator lists as the controller's
	// beside the scenario's own (shop): only listed ones may be mapped.
	AlsoListed []string
	// RealNodeLock (with Node) is the machine's real-node lock, taken by
	// the caller before its clock started (cluster.LockRealNode); Start
	// waits for it otherwise.
	RealNodeLock *cluster.RealNodeLock
	// Installer (with Install) installs stickydrain in place of
	// manifests/default's kustomize install, once cert-manager runs: Helm's
	// chart from the registry, in tools/helm, whose module holds Helm's
	// SDK. It must return once the webhook and the controller are
	// available.
	Installer func(ctx context.Context, in Installation) error
}

// Installation is what an Options.Installer installs with.
type Installation struct {
	Cluster *cluster.Cluster
	// RegistryHost is the registry's host:port (plain HTTP, loopback).
	RegistryHost string
	// Refs are the stickydrain and drainctl images as pushed to it,
	// host/stickydrain/NAME:TAG@sha256:….
	Refs map[string]string
	// ControllerConfig is the operator's controller.yaml: both HAProxy
	// instances' Runtime API on TCP at the host's address, which pods
	// reach, and the scenario's namespace allowed onto edge/shop.
	ControllerConfig string
}

// Start builds what it needs and starts everything. Stop undoes it, also
// after an error.
func Start(ctx context.Context, opts Options) (env *Env, err error) {
	logf := opts.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	dir, err := os.MkdirTemp("", "stickydrain-e2e-")
	if err != nil {
		return nil, err
	}
	env = &Env{Dir: dir, log: logf, bins: opts.Bins, flavour: opts.HAProxy, appImage: "sessionapp", drainctlImage: framework.DrainctlImage}
	defer func() {
		if err != nil {
			env.Stop()
			env = nil
		}
	}()
	if env.bins == nil {
		env.bins = testbin.New()
		env.cleanup = append(env.cleanup, func() { _ = env.bins.Close() })
	}
	if opts.Install && (!opts.Node || opts.Ingress != "") {
		return env, fmt.Errorf("e2e: Options.Install needs Node and no Ingress")
	}
	if opts.Installer != nil && !opts.Install {
		return env, fmt.Errorf("e2e: Options.Installer needs Install")
	}
	// What runs on the host: the app and drainctl only for podhost (the
	// real node runs their images), the webhook and the controller unless
	// installed as pods.
	pkgs := []string{"controller/cmd/stickydrain-haproxy"}
	if !opts.Node {
		pkgs = append(pkgs, "drainctl", "test/sessionapp/cmd/sessionapp")
	}
	if !opts.Install {
		pkgs = append(pkgs, "webhook", "controller")
	}
	built := map[string]string{}
	for _, pkg := range pkgs {
		logf("building %s …", pkg)
		p, err := env.bins.Build("github.com/stickydrain/stickydrain/" + pkg)
		if err != nil {
			return env, err
		}
		built[pkg] = p
	}
	env.built = built
	var imgs map[string]node.Image
	env.installed = opts.Install
	env.drainctlDelivery = opts.DrainctlDelivery
	env.probesOnly = opts.FrontProbesOnly
	env.alsoAllowed = opts.AlsoAllowed
	env.alsoListed = opts.AlsoListed
	env.readiness = opts.Readiness
	env.controllerPprof = opts.ControllerPprof
	if opts.Node {
		app := "sessionapp"
		if opts.Tomcat {
			app = "tomcat"
		}
		names := []string{"pause", app, "drainctl"}
		if opts.Install {
			names = append(names, "stickydrain", "cert-manager")
		}
		logf("building the images (%s) …", strings.Join(names, ", "))
		if imgs, err = node.BuildImages(ctx, filepath.Join(dir, "images"), logf, names...); err != nil {
			return env, err
		}
		env.appImage, env.drainctlImage = imgs[app].Ref, imgs["drainctl"].Ref
		env.tomcat = opts.Tomcat
	}
	logf("starting the control plane (etcd, kube-apiserver, kube-controller-manager; the first run builds them, ~17 min) …")
	env.Cluster, err = cluster.Start(ctx, cluster.Options{Log: logf, OwnSignals: opts.OwnSignals, RealNode: opts.Node, RealNodeLock: opts.RealNodeLock})
	if err != nil {
		return env, err
	}
	if opts.Node {
		// Installed, stickydrain's two images come from a registry, as
		// from a user's mirror: pushed there by digest, pulled by
		// containerd; the others are imported.
		var registries []string
		if opts.Install {
			logf("pushing the stickydrain and drainctl images to a Distribution registry …")
			reg, err := registry.Start(ctx, filepath.Join(dir, "registry"))
			if err != nil {
				return env, err
			}
			env.cleanup = append(env.cleanup, reg.Stop)
			env.registryHost = reg.Host
			if env.installRefs, err = reg.Push(ctx, filepath.Dir(imgs["stickydrain"].Tarball), "stickydrain", "drainctl"); err != nil {
				return env, err
			}
			registries = []string{reg.Host}
			// kustomize's images: names it repository:tag@digest.
			env.drainctlImage = env.installRefs["drainctl"]
		}
		logf("starting the node (containerd, runc, kubelet; pods on a bridge in %s) …", node.PodCIDR)
		var tars []string
		for name, i := range imgs {
			if env.installRefs[name] == "" {
				tars = append(tars, i.Tarball)
			}
		}
		env.Node, err = node.Start(ctx, node.Options{Cluster: env.Cluster, Log: logf, SandboxImage: imgs["pause"].Ref, Images: tars, Registries: registries})
		if err != nil {
			return env, err
		}
	} else {
		logf("starting the pod host (network namespaces on a bridge in 198.18.0.0/15) …")
		env.Host, err = podhost.Start(ctx, podhost.Options{Clientset: env.Cluster.Clientset, Nodes: env.Cluster.Nodes,
			Images: map[string]string{"sessionapp": built["test/sessionapp/cmd/sessionapp"], framework.DrainctlImage: built["drainctl"]}})
		if err != nil {
			return env, err
		}
	}
	if opts.Ingress != "" {
		logf("starting the webhook …")
		if err := env.startWebhook(ctx, built["webhook"]); err != nil {
			return env, err
		}
		logf("starting %s (no stickydrain controller) …", opts.Ingress)
		return env, env.startIngress(ctx, opts.Ingress)
	}
	logf("starting two HAProxy instances …")
	for i := 0; i < 2; i++ {
		d := filepath.Join(dir, fmt.Sprintf("haproxy-%d", i+1))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return env, err
		}
		h, err := env.runHAProxy(d)
		if err != nil {
			return env, err
		}
		env.HAProxy = append(env.HAProxy, h)
		if err := linkControllerSocket(h); err != nil {
			return env, err
		}
	}
	every := 100 * time.Millisecond
	if opts.FrontProbesOnly {
		every = time.Second
	}
	env.Front, err = tcpfront.Start(env.frontTargets(), every)
	if err != nil {
		return env, err
	}
	env.cleanup = append(env.cleanup, env.Front.Close)
	if opts.NGINXPlus {
		logf("starting two NGINX Plus API emulators (not NGINX Plus) …")
		for i := 0; i < 2; i++ {
			// With a state file, as the sample nginx.conf requires.
			em := nginxplus.New(nginxplus.Options{Upstreams: []nginxplus.Upstream{{Name: "shop", Zone: "shop", State: true}}})
			srv := httptest.NewServer(em.Handler())
			env.cleanup = append(env.cleanup, srv.Close)
			env.NGINXPlus = append(env.NGINXPlus, em)
			env.plusURLs = append(env.plusURLs, srv.URL+"/api")
		}
	}
	if opts.Install {
		logf("installing cert-manager (its controllers and CA injector, as a pod) …")
		if err := install.CertManager(ctx, env.Cluster, imgs["cert-manager"].Ref); err != nil {
			return env, err
		}
		if opts.Installer != nil {
			logf("installing stickydrain (the images from the registry, the operator's configuration) …")
			return env, opts.Installer(ctx, Installation{Cluster: env.Cluster, RegistryHost: env.registryHost,
				Refs: env.installRefs, ControllerConfig: env.controllerConfig()})
		}
		logf("installing stickydrain (manifests/default, the images from the registry, the operator's configuration) …")
		if err := install.Stickydrain(ctx, env.Cluster, env.installRefs, env.controllerConfig()); err != nil {
			return env, err
		}
		return env, nil
	}
	logf("starting the webhook …")
	if err := env.startWebhook(ctx, built["webhook"]); err != nil {
		return env, err
	}
	logf("starting the controller …")
	if err := env.startController(ctx, opts.ControllerReplicas); err != nil {
		return env, err
	}
	superCtx, stopSupervising := context.WithCancel(context.Background())
	env.stopSupervising = stopSupervising
	go env.supervise(superCtx)
	return env, nil
}

// Stop stops every process and removes what Start made.
func (e *Env) Stop() {
	if e.stopSupervising != nil {
		e.stopSupervising()
	}
	e.ctlMu.Lock()
	procs := append([]*proc.Proc(nil), e.procs...)
	e.ctlMu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop()
	}
	if e.webhook != nil {
		e.webhook.Stop() // a restarted webhook is not in procs
	}
	for _, h := range e.HAProxy {
		h.Stop()
	}
	if e.Host != nil {
		_ = e.Host.Stop()
	}
	if e.Node != nil {
		if err := e.Node.Stop(); err != nil {
			e.log("stopping the node: %v", err)
		}
	}
	if e.Cluster != nil {
		_ = e.Cluster.Stop()
	}
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		e.cleanup[i]()
	}
	_ = os.RemoveAll(e.Dir)
}

// KeepLogsIfFailed copies every log of the environment (controllers,
// webhook, HAProxy instances) to a directory that outlives it when t has
// failed, and says where: what a rare failure is read from afterwards.
func (e *Env) KeepLogsIfFailed(t testing.TB) {
	if !t.Failed() {
		return
	}
	dst, err := os.MkdirTemp("", "stickydrain-failed-"+strings.ReplaceAll(t.Name(), "/", "-")+"-")
	if err != nil {
		t.Logf("keeping the logs: %v", err)
		return
	}
	n := 0
	err = filepath.WalkDir(e.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return nil //nolint:nilerr // a log that vanished is not kept
		}
		rel, _ := filepath.Rel(e.Dir, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil //nolint:nilerr // idem
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		n++
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Logf("keeping the logs: %v", err)
	}
	t.Logf("%d logs kept in %s", n, dst)
}

// StopStickydrain stops every controller replica (for good: no
// supervisor restarts them) and the webhook, as deleting the install's
// Deployments does; the load balancers and the pods run on.
func (e *Env) StopStickydrain() {
	if e.stopSupervising != nil {
		e.stopSupervising()
	}
	for _, c := range e.controllers() {
		c.Stop()
	}
	if e.webhook != nil {
		e.webhook.Stop()
	}
}

func (e *Env) startWebhook(ctx context.Context, bin string) error {
	kubeconfig, err := framework.ServiceAccount(ctx, e.Cluster, "webhook")
	if err != nil {
		return err
	}
	w, err := framework.StartWebhook(ctx, bin, kubeconfig, e.Dir, e.drainctlImage)
	if err != nil {
		return err
	}
	e.procs = append(e.procs, w.Proc)
	e.webhook = w
	return framework.InstallWebhookConfigurations(ctx, e.Cluster, fmt.Sprintf("https://127.0.0.1:%d", w.Port), w.CA)
}

func (e *Env) startController(ctx context.Context, replicas int) error {
	kubeconfig, err := framework.ControllerServiceAccount(ctx, e.Cluster)
	if err != nil {
		return err
	}
	e.controllerKubeconfig = kubeconfig
	for i := 0; i < max(1, replicas); i++ {
		dir := e.Dir
		if i > 0 {
			dir = filepath.Join(e.Dir, fmt.Sprintf("controller-%d", i+1))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		c, err := e.runController(ctx, dir)
		if err != nil {
			return err
		}
		e.procs = append(e.procs, c.Proc)
		e.Controllers = append(e.Controllers, c)
		e.controllerDirs = append(e.controllerDirs, dir)
	}
	return nil
}

// runController starts one controller replica in dir with the shipped
// leader election (and Go's profiles on a port of its own when
// Options.ControllerPprof asks).
func (e *Env) runController(ctx context.Context, dir string) (*framework.Controller, error) {
	args := []string{"--leader-elect", "--leader-election-namespace", "stickydrain-system"}
	pprof := ""
	if e.controllerPprof {
		port, err := proc.FreePort()
		if err != nil {
			return nil, err
		}
		pprof = fmt.Sprintf("127.0.0.1:%d", port)
		args = append(args, "--pprof-bind-address", pprof)
	}
	c, err := framework.StartController(ctx, e.built["controller"], e.controllerKubeconfig, dir, e.controllerConfig(), args...)
	if err != nil {
		return nil, err
	}
	c.PprofAddr = pprof
	return c, nil
}

// controllerConfig is the controller's configuration for the instances
// running now.
func (e *Env) controllerConfig() string {
	var addrs []string
	for _, h := range e.haproxies() {
		if e.installed {
			// The controller runs in a pod: the Runtime API on TCP.
			addrs = append(addrs, fmt.Sprintf("%q", "tcp://"+h.RuntimeTCP))
			continue
		}
		addrs = append(addrs, fmt.Sprintf("%q", "unix://"+controllerSocket(h)))
	}
	// Only the app's namespace may map, only onto the listed upstreams,
	// only onto its own pods, only in the pod network: as an operator
	// sharing the cluster would write it.
	tenancy := fmt.Sprintf("    allowedNamespaces: {names: [%s]}\n    upstreams: [%s]\n    allowedCIDRs: [198.18.0.0/15]\n",
		strings.Join(append([]string{Namespace}, e.alsoAllowed...), ", "), listed(append([]string{"shop"}, e.alsoListed...)))
	mode := config.HAProxySlots
	if e.flavour.Dynamic {
		mode = config.HAProxyDynamic
	}
	yml := fmt.Sprintf("loadBalancers:\n  - name: edge\n    type: haproxy\n    haproxy: {readyMap: %q, mode: %s}\n    instances:\n      static: [%s]\n", e.readyMap(), mode, strings.Join(addrs, ", ")) + tenancy
	if len(e.plusURLs) > 0 {
		var q []string
		for _, u := range e.plusURLs {
			q = append(q, fmt.Sprintf("%q", u))
		}
		yml += fmt.Sprintf("  - name: plus\n    type: nginx-plus\n    instances:\n      static: [%s]\n", strings.Join(q, ", ")) + tenancy
	}
	return yml + "resync: 5s\n"
}

// listed writes upstreams as the configuration lists them by name.
func listed(upstreams []string) string {
	out := make([]string, len(upstreams))
	for i, u := range upstreams {
		out[i] = "{name: " + u + "}"
	}
	return strings.Join(out, ", ")
}

// writeControllerConfig rewrites every replica's configuration file for
// the instances running now; the controllers reload it (they read it
// every 5 s).
func (e *Env) writeControllerConfig() error {
	e.ctlMu.Lock()
	dirs := append([]string(nil), e.controllerDirs...)
	e.ctlMu.Unlock()
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, "controller.yaml"), []byte(e.controllerConfig()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// PreStop waits for pod's app container's preStop hook to end and returns
// when it began and ended and whether it ended well (exit 0 within the
// grace period): podhost's record, or on the real node the kubelet's own
// (its log).
func (e *Env) PreStop(ctx context.Context, pod string) (start, end time.Time, ok bool, err error) {
	if e.Node != nil {
		h, err := e.Node.PreStop(ctx, Namespace, pod, "app")
		if err != nil {
			return time.Time{}, time.Time{}, false, err
		}
		e.log("%s: the kubelet ran preStop for %v, then SIGTERM with %d s of grace left", pod, h.Ended.Sub(h.Started).Round(time.Millisecond), h.GracePeriod)
		return h.Started, h.Ended, h.Completed && !h.Failed, nil
	}
	s, err := e.Host.WaitFor(ctx, Namespace, pod, "app", podhost.StepPreStopStarted)
	if err != nil {
		return time.Time{}, time.Time{}, false, err
	}
	f, err := e.Host.WaitFor(ctx, Namespace, pod, "app", podhost.StepPreStopFinished)
	if err != nil {
		return time.Time{}, time.Time{}, false, err
	}
	return s.Time, f.Time, f.ExitCode == 0, nil
}
