package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/test/tcpfront"
)

// throughRelay starts the replica's relay to the API server named in
// kubeconfig and writes a copy of kubeconfig, in the replica's directory,
// that goes through it. TLS still names the API server: the relay only
// carries bytes.
func (ip *ingressProxy) throughRelay(kubeconfig string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return "", err
	}
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			return "", fmt.Errorf("kubeconfig %s: server %q: %w", kubeconfig, c.Server, err)
		}
		if ip.api == nil {
			if ip.api, err = tcpfront.StartRelay(u.Host); err != nil {
				return "", err
			}
		}
		u.Host = ip.api.Addr()
		c.Server = u.String()
	}
	if ip.api == nil {
		return "", fmt.Errorf("kubeconfig %s names no cluster", kubeconfig)
	}
	out := filepath.Join(ip.dir, "kubeconfig")
	return out, clientcmd.WriteToFile(*cfg, out)
}

// PartitionIngress cuts replica i (in the front's order) off the API
// server — its watches stall, its requests wait — while it keeps serving
// users; heal joins them again.
func (e *Env) PartitionIngress(i int) (heal func()) {
	ip := e.ingressReplicas()[i]
	ip.api.Cut()
	e.log("%s replica on :%d cut off the API server", ip.kind, ip.httpPort)
	return func() {
		ip.api.Heal()
		e.log("%s replica on :%d joined to the API server again", ip.kind, ip.httpPort)
	}
}

// StopWebhook stops the webhook (SIGTERM), as an outage of its every
// replica: pods of an opted-in workload are refused until it is back
// (failurePolicy Fail, as shipped).
func (e *Env) StopWebhook() { e.webhook.Stop() }

// RestartWebhook starts the stopped webhook again and waits until it is
// ready.
func (e *Env) RestartWebhook(ctx context.Context) error { return e.webhook.Restart(ctx) }

// refusedCreates counts the FailedCreate Events of the scenario's
// ReplicaSets: pods the webhook's outage kept from being created.
func (e *Env) refusedCreates(ctx context.Context) int {
	var evs corev1.EventList
	if err := e.Cluster.Client.List(ctx, &evs, client.InNamespace(Namespace)); err != nil {
		return 0
	}
	n := 0
	for _, ev := range evs.Items {
		if ev.Reason == "FailedCreate" && ev.InvolvedObject.Kind == "ReplicaSet" {
			n += int(max(ev.Count, 1))
		}
	}
	return n
}

// uninjected lists the Deployment's pods of version (every version when
// "") that the webhook did not inject (its status annotation says how it
// treated each).
func (e *Env) uninjected(ctx context.Context, version string) []string {
	var out []string
	var pods corev1.PodList
	if err := e.Cluster.Client.List(ctx, &pods, client.InNamespace(Namespace), client.MatchingLabels{"app": "web"}); err != nil {
		return []string{err.Error()}
	}
	for _, p := range pods.Items {
		if version != "" && !strings.Contains(strings.Join(p.Spec.Containers[0].Args, " "), "--version="+version) {
			continue
		}
		if p.Annotations[api.AnnotationStatus] != api.StatusInjected {
			out = append(out, fmt.Sprintf("%s (%s=%q)", p.Name, api.AnnotationStatus, p.Annotations[api.AnnotationStatus]))
		}
	}
	return out
}

// ReloadIngress makes every replica rebuild its configuration under
// traffic, as another team's new Ingress does: an Ingress name for a
// Service of that name selecting the same pods, on its own path. haproxy-ingress cannot add
// a backend without reloading HAProxy (a new worker process, checked by
// its pid); Traefik builds a new configuration and swaps it in (checked
// by the new router in its API). It returns once every replica has.
func (e *Env) ReloadIngress(ctx context.Context, name string) error {
	before := map[*ingressProxy]string{}
	for _, ip := range e.ingressReplicas() {
		if ip.kind == HAProxyIngress {
			pid, err := ip.workerPid()
			if err != nil {
				return err
			}
			before[ip] = pid
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptr.To(string(e.ingressKind)),
			Rules: []networkingv1.IngressRule{{IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{{Path: "/" + name, PathType: ptr.To(networkingv1.PathTypePrefix),
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: svc.Name,
						Port: networkingv1.ServiceBackendPort{Name: "http"}}}}},
			}}}},
		},
	}
	if err := e.Cluster.Client.Create(ctx, svc); err != nil {
		return err
	}
	if err := e.Cluster.Client.Create(ctx, ing); err != nil {
		return err
	}
	start := time.Now()
	for _, ip := range e.ingressReplicas() {
		for {
			done, err := ip.reloadedSince(before[ip], name)
			if err == nil && done {
				break
			}
			if ctx.Err() != nil || time.Since(start) > time.Minute {
				return fmt.Errorf("%s replica on :%d never reloaded for the new Ingress %s (last: %v)", ip.kind, ip.httpPort, name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		e.log("%s replica on :%d reloaded %v after the new Ingress %s", ip.kind, ip.httpPort, time.Since(start).Round(time.Millisecond), name)
	}
	return nil
}

// reloadedSince reports whether the replica runs a configuration with
// the Ingress name: for haproxy-ingress, an HAProxy worker other than the
// one whose pid was before.
func (ip *ingressProxy) reloadedSince(before, name string) (bool, error) {
	switch ip.kind {
	case HAProxyIngress:
		pid, err := ip.workerPid()
		if err != nil {
			return false, err
		}
		if pid == before {
			return false, nil
		}
		_, err = backendNamed(ip.adminSocket, Namespace+"_"+name+"_")
		return err == nil, err
	case Traefik:
		c := http.Client{Timeout: time.Second}
		resp, err := c.Get(ip.apiURL + "/http/routers")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var routers []struct {
			Name string `json:"name"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&routers); err != nil {
			return false, fmt.Errorf("traefik API: %w", err)
		}
		for _, r := range routers {
			if strings.HasPrefix(r.Name, Namespace+"-"+name+"-") {
				return true, nil
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("no ingress")
}

// workerPid is the pid of the HAProxy worker answering haproxy-ingress's
// admin socket.
func (ip *ingressProxy) workerPid() (string, error) {
	out, err := runtimeAPI(ip.adminSocket, "show info")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Pid: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no Pid in show info: %q", out)
}
