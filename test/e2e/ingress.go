package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/framework"
	"github.com/stickydrain/stickydrain/test/install"
	"github.com/stickydrain/stickydrain/test/peers"
	"github.com/stickydrain/stickydrain/test/proc"
	"github.com/stickydrain/stickydrain/test/tcpfront"
)

// Ingress names an ingress controller that users go through instead of
// stickydrain's controller and its HAProxy pair: the webhook alone
// injects the drain, and the ingress keeps cookie-bound requests on
// terminating pods by itself.
type Ingress string

// The ingress controllers the tests build from source (test/peers).
const (
	HAProxyIngress Ingress = "haproxy-ingress"
	Traefik        Ingress = "traefik"
)

// peer is one built ingress controller.
type peer struct {
	kind Ingress
	peers.Peer
}

func findPeer(ctx context.Context, kind Ingress, logf func(string, ...any)) (peer, error) {
	p, err := peers.Find(ctx, string(kind), logf)
	return peer{kind, p}, err
}

// ingressProxy is a running ingress controller.
type ingressProxy struct {
	peer
	proc     *proc.Proc
	dir      string // its files; every process it started names it
	httpPort int
	// adminSocket (haproxy-ingress) or apiURL (Traefik) is where its view
	// of the app's servers is read.
	adminSocket, apiURL string
	readyURL            string
	// api relays its connections to kube-apiserver (Cut partitions it).
	api *tcpfront.Relay
}

// ingressNamespace holds the ingress controllers' ConfigMap.
const ingressNamespace = "ingress"

// The IngressClass each controller serves.
var ingressClasses = map[Ingress]string{
	HAProxyIngress: "haproxy-ingress.github.io/controller",
	Traefik:        "traefik.io/ingress-controller",
}

func (e *Env) startIngress(ctx context.Context, kind Ingress) error {
	p, err := findPeer(ctx, kind, e.log)
	if err != nil {
		return err
	}
	k := e.Cluster.Client
	if err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ingressNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if e.ingressKubeconfig, err = e.ingressServiceAccount(ctx, kind); err != nil {
		return err
	}
	if err := k.Create(ctx, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: string(kind)},
		Spec: networkingv1.IngressClassSpec{Controller: ingressClasses[kind]}}); err != nil {
		return err
	}
	e.ingressKind, e.ingressPeer = kind, p
	ip, err := e.runIngress(ctx)
	if err != nil {
		return err
	}
	e.lbMu.Lock()
	e.ingresses = []*ingressProxy{ip}
	e.lbMu.Unlock()
	e.Front, err = tcpfront.Start(e.ingressTargets(), 100*time.Millisecond)
	if err != nil {
		return err
	}
	e.cleanup = append(e.cleanup, e.Front.Close)
	return nil
}

// ingressReplicas are the replicas in the front's rotation.
func (e *Env) ingressReplicas() []*ingressProxy {
	e.lbMu.Lock()
	defer e.lbMu.Unlock()
	return append([]*ingressProxy(nil), e.ingresses...)
}

// ingress is the first replica running.
func (e *Env) ingress() *ingressProxy {
	e.lbMu.Lock()
	defer e.lbMu.Unlock()
	if len(e.ingresses) == 0 {
		return nil
	}
	return e.ingresses[0]
}

func (e *Env) ingressTargets() []tcpfront.Target {
	e.lbMu.Lock()
	defer e.lbMu.Unlock()
	var ts []tcpfront.Target
	for _, ip := range e.ingresses {
		ts = append(ts, tcpfront.Target{Addr: ip.frontAddr(), Ready: ip.readyURL})
	}
	return ts
}

// AddIngressReplica starts one more replica of the ingress controller,
// with its own ports (and, for haproxy-ingress, its own ConfigMap naming
// them), as a second pod of its Deployment would run. Users do not go
// through it unless a test sends them there (URL) or ScaleIngress does.
func (e *Env) AddIngressReplica(ctx context.Context) (*ingressProxy, error) {
	return e.runIngress(ctx)
}

// ScaleIngress puts a second replica beside the first, and the front
// balances new connections over both (each user's requests may reach
// either: the cookie must hold across replicas).
func (e *Env) ScaleIngress(ctx context.Context) error { return e.joinIngress(ctx) }

// joinIngress starts a replica and adds it to the front once it routes
// the app.
func (e *Env) joinIngress(ctx context.Context) error {
	ip, err := e.runIngress(ctx)
	if err != nil {
		return err
	}
	if err := e.waitRouted(ctx, ip); err != nil {
		return err
	}
	e.lbMu.Lock()
	e.ingresses = append(e.ingresses, ip)
	e.lbMu.Unlock()
	e.Front.SetTargets(e.ingressTargets())
	return nil
}

// CrashIngress kills the first replica with SIGKILL (its HAProxy too), as
// a crash or an OOM kill of its pod, and starts a new one in its place (a
// new pod, new ports); the front takes it once it is ready. Requests in
// flight through the killed one count as in flight at a kill.
func (e *Env) CrashIngress(ctx context.Context) error {
	e.lbMu.Lock()
	dead := e.ingresses[0]
	e.ingresses = append([]*ingressProxy(nil), e.ingresses[1:]...)
	e.lbMu.Unlock()
	done := e.noteKill()
	dead.kill()
	e.Front.MarkDown(dead.frontAddr())
	done()
	e.Front.SetTargets(e.ingressTargets())
	return e.joinIngress(ctx)
}

// waitRouted waits until the replica routes the app (a request answered
// by a pod, not the proxy's 404 or 503) before it joins the front.
// Traefik's /ping answers some 0.1 s before its routes are loaded (a
// readiness probe on it alone lets a new replica 404 for that long);
// haproxy-ingress's health frontend answers once its configuration, routes
// included, is loaded. The gap is logged.
func (e *Env) waitRouted(ctx context.Context, ip *ingressProxy) error {
	start := time.Now()
	c := http.Client{Timeout: time.Second}
	for {
		if resp, err := c.Get(ip.URL() + "/app/cart"); err == nil {
			pod := resp.Header.Get("X-Pod")
			resp.Body.Close()
			if pod != "" {
				e.log("%s replica on :%d routes the app %v after its readiness endpoint answered", ip.kind, ip.httpPort, time.Since(start).Round(time.Millisecond))
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s replica on :%d never routed the app: %w", ip.kind, ip.httpPort, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill ends the replica and, for haproxy-ingress, the HAProxy it started
// in a process group of its own.
func (ip *ingressProxy) kill() {
	ip.proc.KillGroup()
	proc.KillMatching(ip.dir + "/")
}

// frontAddr is where the front sends users to this replica.
func (ip *ingressProxy) frontAddr() string { return frontAddr(ip.httpPort) }

// URL is the replica's HTTP entry point.
func (ip *ingressProxy) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", ip.httpPort) }

// runIngress starts the next replica of the ingress controller and waits
// until it serves.
func (e *Env) runIngress(ctx context.Context) (*ingressProxy, error) {
	p, kind := e.ingressPeer, e.ingressKind
	e.lbMu.Lock()
	e.ingressN++
	n := e.ingressN
	e.lbMu.Unlock()
	ports, err := proc.FreePorts(6)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(e.Dir, fmt.Sprintf("%s-%d", kind, n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ip := &ingressProxy{peer: p, httpPort: ports[0], dir: dir}
	// Its path to the API server goes through a relay of its own, which a
	// test cuts to partition this replica from the control plane.
	kubeconfig, err := ip.throughRelay(e.ingressKubeconfig)
	if err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, ip.api.Close)
	log := filepath.Join(dir, string(kind)+".log")
	switch kind {
	case HAProxyIngress:
		// Its global configuration: drain support on, its ports free ones
		// on loopback; the dynamic cookie key is its default, the same on
		// every replica.
		hi := peers.HAProxyIngress{Peer: p.Peer, Prefix: filepath.Join(dir, "fs")}
		copy(hi.Ports[:], ports)
		cm := fmt.Sprintf("haproxy-ingress-%d", n)
		if err := e.Cluster.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Namespace: ingressNamespace},
			Data: hi.Config(nil)}); err != nil {
			return nil, err
		}
		if err := hi.Prepare(); err != nil {
			return nil, err
		}
		ip.adminSocket = hi.AdminSocket()
		// HAProxy's own health frontend: up once the first configuration
		// loaded.
		ip.readyURL = hi.ReadyURL()
		ip.proc, err = proc.StartWith(proc.Options{Dir: hi.Dir()}, log, p.Bin,
			hi.Args(kubeconfig, ingressNamespace+"/"+cm, string(kind), "haproxy-ingress-e2e",
				"--wait-before-update=100ms", "--reload-interval=0s")...)
	case Traefik:
		ip.apiURL = fmt.Sprintf("http://127.0.0.1:%d/api", ports[1])
		ip.readyURL = fmt.Sprintf("http://127.0.0.1:%d/ping", ports[1])
		ip.proc, err = proc.StartWith(proc.Options{Dir: dir, Env: []string{"KUBECONFIG=" + kubeconfig}}, log, p.Bin,
			"--entrypoints.web.address="+fmt.Sprintf("127.0.0.1:%d", ports[0]),
			"--entrypoints.traefik.address="+fmt.Sprintf("127.0.0.1:%d", ports[1]),
			"--api=true", "--api.insecure=true", "--api.dashboard=false", "--ping=true",
			"--providers.kubernetesingress=true", "--providers.kubernetesingress.ingressclass="+string(kind),
			"--log.level=INFO")
	default:
		return nil, fmt.Errorf("unknown ingress %q", kind)
	}
	if err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, ip.kill)
	if err := proc.WaitHTTP(ctx, ip.readyURL, 60*time.Second); err != nil {
		return nil, fmt.Errorf("%s %s did not get ready: %w; the end of its log:\n%s", kind, p.Version, err, tail(log, 40))
	}
	e.log("%s %s replica %d serves on 127.0.0.1:%d", kind, p.Version, n, ip.httpPort)
	return ip, nil
}

// ingressServiceAccount applies the ingress controller's RBAC (testdata,
// what its own install gives it) and returns a kubeconfig for its
// ServiceAccount.
func (e *Env) ingressServiceAccount(ctx context.Context, kind Ingress) (string, error) {
	if err := install.ApplyFile(ctx, e.Cluster, filepath.Join(framework.RepoRoot(), "test", "e2e", "testdata", "ingress", string(kind)+"-rbac.yaml")); err != nil {
		return "", err
	}
	return e.Cluster.AddUser("system:serviceaccount:"+ingressNamespace+":"+string(kind),
		"system:serviceaccounts", "system:serviceaccounts:"+ingressNamespace, "system:authenticated")
}

// ingressObjects are what an app team writes to be served by the ingress
// with cookie affinity: the Ingress, and the annotations each controller
// reads (haproxy-ingress on the Ingress, Traefik on the Service).
func (e *Env) ingressObjects(svc *corev1.Service) *networkingv1.Ingress {
	kind := e.ingressKind
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: Namespace},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptr.To(string(kind)),
			Rules: []networkingv1.IngressRule{{IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: ptr.To(networkingv1.PathTypePrefix),
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: svc.Name,
						Port: networkingv1.ServiceBackendPort{Name: "http"}}}}},
			}}}},
		},
	}
	switch kind {
	case HAProxyIngress:
		ing.Annotations = map[string]string{
			"haproxy-ingress.github.io/affinity":            "cookie",
			"haproxy-ingress.github.io/session-cookie-name": "SRV",
		}
	case Traefik:
		svc.Annotations["traefik.ingress.kubernetes.io/service.sticky.cookie"] = "true"
		svc.Annotations["traefik.ingress.kubernetes.io/service.sticky.cookie.name"] = "SRV"
	}
	return ing
}

// ingressView is the first replica's view of the app's servers.
func (e *Env) ingressView(ctx context.Context) (map[netip.AddrPort]plan.State, error) {
	ip := e.ingress()
	if ip == nil {
		return nil, errors.New("no ingress replica runs")
	}
	return ip.view(ctx)
}

// view is the replica's view of the app's servers: active, draining
// (haproxy-ingress: `drain`, weight 0; Traefik: fenced), or absent.
func (ip *ingressProxy) view(ctx context.Context) (map[netip.AddrPort]plan.State, error) {
	switch ip.kind {
	case HAProxyIngress:
		inst, err := haproxy.New("unix://"+ip.adminSocket, time.Second)
		if err != nil {
			return nil, err
		}
		be, err := backendNamed(ip.adminSocket, Namespace+"_web_")
		if err != nil {
			return nil, err
		}
		states, err := backend.Read(ctx, inst, be)
		if err != nil {
			return nil, err
		}
		// A server of weight 0 takes no new session and keeps its cookies:
		// draining, whether haproxy-ingress set the drain state or wrote
		// weight 0 (most likely what a replica that starts while a pod
		// terminates does: the first observer reading every replica saw a
		// terminating pod "active" on the replacement of a killed replica,
		// while users saw nothing wrong).
		zero, err := zeroWeight(ip.adminSocket, be)
		if err != nil {
			return nil, err
		}
		for ap, st := range states {
			if st == plan.Active && zero[ap] {
				states[ap] = plan.Draining
			}
		}
		return states, nil
	case Traefik:
		c := http.Client{Timeout: time.Second}
		resp, err := c.Get(ip.apiURL + "/http/services")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var services []struct {
			Name         string `json:"name"`
			LoadBalancer *struct {
				Servers []struct {
					URL    string `json:"url"`
					Fenced bool   `json:"fenced"`
				} `json:"servers"`
			} `json:"loadBalancer"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&services); err != nil {
			return nil, fmt.Errorf("traefik API: %w", err)
		}
		out := map[netip.AddrPort]plan.State{}
		for _, s := range services {
			if !strings.HasPrefix(s.Name, Namespace+"-web-") || s.LoadBalancer == nil {
				continue
			}
			for _, srv := range s.LoadBalancer.Servers {
				u, err := url.Parse(srv.URL)
				if err != nil {
					continue
				}
				ap, err := netip.ParseAddrPort(u.Host)
				if err != nil {
					continue
				}
				out[ap] = plan.Active
				if srv.Fenced {
					out[ap] = plan.Draining
				}
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no ingress")
}

// zeroWeight lists the servers of backend whose weight is 0, from `show
// servers state` (format 1: srv_addr is field 4, srv_uweight 7, srv_port
// 18).
func zeroWeight(sock, backend string) (map[netip.AddrPort]bool, error) {
	out, err := runtimeAPI(sock, "show servers state "+backend)
	if err != nil {
		return nil, err
	}
	zero := map[netip.AddrPort]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 19 || strings.HasPrefix(line, "#") {
			continue
		}
		ap, err := netip.ParseAddrPort(f[4] + ":" + f[18])
		if err == nil && f[7] == "0" {
			zero[ap] = true
		}
	}
	return zero, nil
}

// runtimeAPI sends one command to the Runtime API at sock and returns the
// answer.
func runtimeAPI(sock, cmd string) (string, error) {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(cmd + "\n")); err != nil {
		return "", err
	}
	out, err := io.ReadAll(c)
	return string(out), err
}

// backendNamed is the first backend of the Runtime API at sock whose name
// starts with prefix (haproxy-ingress names one <namespace>_<service>_<port>).
func backendNamed(sock, prefix string) (string, error) {
	out, err := runtimeAPI(sock, "show backend")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line), nil
		}
	}
	return "", fmt.Errorf("no backend %s* yet", prefix)
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	raw, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
