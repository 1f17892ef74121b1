package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/framework"
	"github.com/stickydrain/stickydrain/test/install"
	"github.com/stickydrain/stickydrain/test/peers"
	"github.com/stickydrain/stickydrain/test/proc"
)

// The peer a user would pick instead of stickydrain for draining behind
// an ingress: haproxy-ingress with its drain support, built from source
// (test/peers), run with its own defaults (an update at most every 2 s,
// --rate-limit-update=0.5, after --wait-before-update=200ms).
const (
	peerName      = "haproxy-ingress"
	peerNamespace = "ingress"
	peerClass     = "haproxy-ingress"
)

// ingressPeer is a running haproxy-ingress and the HAProxy it drives.
type ingressPeer struct {
	peers.Peer
	proc        *proc.Proc
	log         string
	prefix      string // its files (haproxy-ingress's --local-filesystem-prefix)
	adminSocket string
	// backends are the HAProxy backend of each Service (by index).
	backends map[int]string
}

func (p *ingressPeer) stop() {
	if p.proc != nil {
		p.proc.Stop()
	}
	// Its HAProxy runs in a process group of its own: the files under its
	// prefix name it (its pid file).
	if raw, err := os.ReadFile(filepath.Join(filepath.Dir(p.adminSocket), "haproxy.pid")); err == nil {
		for _, f := range strings.Fields(string(raw)) {
			if pid, err := strconv.Atoi(f); err == nil {
				if pr, err := os.FindProcess(pid); err == nil {
					_ = pr.Kill()
				}
			}
		}
	}
	_ = os.RemoveAll(p.prefix)
}

// startIngressPeer runs haproxy-ingress, one replica, as its own install's
// ServiceAccount, with an Ingress (cookie affinity) for each of the n
// propagation Services, and waits until its HAProxy holds the pods of
// every one of them.
func startIngressPeer(ctx context.Context, c *cluster.Cluster, cs *kubernetes.Clientset, dir string, logf func(string, ...any), n int) (*ingressPeer, error) {
	pe, err := peers.Find(ctx, peerName, logf)
	if err != nil {
		return nil, err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: peerNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := install.ApplyFile(ctx, c, filepath.Join(framework.RepoRoot(), "test", "e2e", "testdata", "ingress", peerName+"-rbac.yaml")); err != nil {
		return nil, err
	}
	kubeconfig, err := c.AddUser("system:serviceaccount:"+peerNamespace+":"+peerName,
		"system:serviceaccounts", "system:serviceaccounts:"+peerNamespace, "system:authenticated")
	if err != nil {
		return nil, err
	}
	if _, err := cs.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: peerClass},
		Spec: networkingv1.IngressClassSpec{Controller: "haproxy-ingress.github.io/controller"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	pdir := filepath.Join(dir, peerName)
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return nil, err
	}
	hi := peers.HAProxyIngress{Peer: pe}
	ports, err := proc.FreePorts(len(hi.Ports))
	if err != nil {
		return nil, err
	}
	copy(hi.Ports[:], ports)
	if _, err := cs.CoreV1().ConfigMaps(peerNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: peerName, Namespace: peerNamespace},
		// Its HAProxy's file-descriptor limit grows with its connections
		// and its servers: 20,044 at 1,000 Services with its default
		// 2,000 connections, over this machine's hard limit of 20,000.
		Data: hi.Config(map[string]string{"max-connections": "1000"})}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	// One Ingress per Service, a host each, as app teams write them.
	if err := parallel(n, 16, func(i int) error {
		_, err := cs.NetworkingV1().Ingresses(propNS).Create(ctx, &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: svcName(i), Namespace: propNS, Annotations: map[string]string{
				"haproxy-ingress.github.io/affinity":            "cookie",
				"haproxy-ingress.github.io/session-cookie-name": "SRV",
			}},
			Spec: networkingv1.IngressSpec{IngressClassName: ptr.To(peerClass), Rules: []networkingv1.IngressRule{{
				Host: svcName(i) + ".bench.test",
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: ptr.To(networkingv1.PathTypePrefix),
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: svcName(i),
							Port: networkingv1.ServiceBackendPort{Name: "http"}}}}},
				}}}},
			},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	// Its files under a short directory of their own (its HAProxy's socket
	// paths must stay under 97 characters), removed by stop.
	if hi.Prefix, err = os.MkdirTemp("", "hi-"); err != nil {
		return nil, err
	}
	p := &ingressPeer{Peer: pe, log: filepath.Join(pdir, peerName+".log"), prefix: hi.Prefix, adminSocket: hi.AdminSocket()}
	if err := hi.Prepare(); err != nil {
		p.stop()
		return nil, err
	}
	p.proc, err = proc.StartWith(proc.Options{Dir: hi.Dir()}, p.log, pe.Bin,
		hi.Args(kubeconfig, peerNamespace+"/"+peerName, peerClass, "haproxy-ingress-bench")...)
	if err != nil {
		p.stop()
		return nil, err
	}
	if err := proc.WaitHTTP(ctx, hi.ReadyURL(), 2*time.Minute); err != nil {
		p.stop()
		return nil, fmt.Errorf("%s %s did not get ready: %w; the end of its log:\n%s", peerName, pe.Version, err, logTail(p.log, 30))
	}
	// Every Service's backend, with its ten pods.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if err := p.findBackends(n); err == nil {
			full, err := p.full(n)
			if err != nil {
				p.stop()
				return nil, err
			}
			if full {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s: after 5 minutes its HAProxy does not hold the pods of the %d Services; the end of its log:\n%s", peerName, n, logTail(p.log, 30))
		}
		time.Sleep(time.Second)
	}
}

// findBackends names the backend of each Service: haproxy-ingress calls
// it <namespace>_<service>_<port>.
func (p *ingressPeer) findBackends(n int) error {
	outs, err := runtimeCommands(p.adminSocket, []string{"show backend"})
	if err != nil {
		return err
	}
	byPrefix := map[string]string{}
	for _, line := range strings.Split(outs[0], "\n") {
		if strings.HasPrefix(line, propNS+"_") {
			name := strings.TrimSpace(line)
			byPrefix[name[:strings.LastIndex(name, "_")+1]] = name
		}
	}
	p.backends = map[int]string{}
	for i := range n {
		b, ok := byPrefix[propNS+"_"+svcName(i)+"_"]
		if !ok {
			return fmt.Errorf("no backend for %s yet", svcName(i))
		}
		p.backends[i] = b
	}
	return nil
}

// full reports whether every backend holds its Service's pods.
func (p *ingressPeer) full(n int) (bool, error) {
	for i := 0; i < n; i += 50 {
		var cmds []int
		for k := i; k < min(i+50, n); k++ {
			cmds = append(cmds, k)
		}
		states, err := p.servers(cmds)
		if err != nil {
			return false, err
		}
		for _, k := range cmds {
			if len(states[k]) < propPerSvc {
				return false, nil
			}
		}
	}
	return true, nil
}

// servers reads the backends of svcs: each server's address and whether
// it is drained (weight 0, or HAProxy's drain state).
func (p *ingressPeer) servers(svcs []int) (map[int]map[string]bool, error) {
	cmds := make([]string, len(svcs))
	for k, i := range svcs {
		cmds[k] = "show servers state " + p.backends[i]
	}
	outs, err := runtimeCommands(p.adminSocket, cmds)
	if err != nil {
		return nil, err
	}
	out := map[int]map[string]bool{}
	for k, i := range svcs {
		m := map[string]bool{}
		// Format 1: srv_addr is field 4, srv_admin_state 6, srv_uweight
		// 7; a pod's address is in 198.18.0.0/15, an empty slot's not.
		for _, line := range strings.Split(outs[k], "\n") {
			f := strings.Fields(line)
			if len(f) < 19 || strings.HasPrefix(line, "#") || !strings.HasPrefix(f[4], "198.1") {
				continue
			}
			admin, _ := strconv.ParseUint(f[6], 10, 32)
			m[f[4]] = f[7] == "0" || admin&0x18 != 0
		}
		out[i] = m
	}
	return out, nil
}

// watchDrains polls the backends of svcs every few milliseconds until ctx
// ends, and records into j the first poll that sees the first pod of each
// drained (the pod the runs delete): the peer's drain as seen from
// outside, late by at most one poll.
func (p *ingressPeer) watchDrains(ctx context.Context, j *journal, svcs []int) {
	seen := map[int]bool{}
	for ctx.Err() == nil && len(seen) < len(svcs) {
		var pending []int
		for _, i := range svcs {
			if !seen[i] {
				pending = append(pending, i)
			}
		}
		states, err := p.servers(pending)
		at := time.Now()
		if err == nil {
			var cs []change
			for _, i := range pending {
				if states[i][podIP(i*propPerSvc)] {
					seen[i] = true
					cs = append(cs, change{instance: "ingress-0", upstream: svcName(i), op: "drain", at: at})
				}
			}
			if len(cs) > 0 {
				j.mu.Lock()
				j.changes = append(j.changes, cs...)
				j.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// runtimeCommands sends cmds to the Runtime API at sock on one connection
// and returns each one's answer.
func runtimeCommands(sock string, cmds []string) ([]string, error) {
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(strings.Join(cmds, ";") + "\n")); err != nil {
		return nil, err
	}
	var outs []string
	var cur []string
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			cur = append(cur, line)
			continue
		}
		outs = append(outs, strings.Join(cur, "\n"))
		cur = nil
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(outs) < len(cmds) {
		return nil, fmt.Errorf("%s: %d answers to %d commands", sock, len(outs), len(cmds))
	}
	return outs, nil
}

// logTail is the last n lines of the file at path.
func logTail(path string, n int) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
