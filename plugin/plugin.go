// Package plugin is `kubectl stickydrain` (plugin/cmd/kubectl-stickydrain):
// what an operator asks during a rollout of a session-bound app — which
// pods are draining, how many sessions each still holds, since when and
// until when at most, on which load-balancer instances it is drained,
// and whether anything is stuck (Status); ending or shortening a drain
// (Release, Shorten); and what is wrong before a rollout loses sessions
// (Check).
//
// It reads only what the cluster already holds: the pods, the
// controller's Events (api.ServerNote), drainctl's progress lines in the
// container's log, and the webhook's configuration. It needs get/list on
// pods, pods/log, events, services, namespaces, deployments, statefulsets
// and mutatingwebhookconfigurations; patch on pods for release and
// shorten; create on pods/exec for check's session-URL and probe checks.
package plugin

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/stickydrain/stickydrain/api"
)

// Client is what the plugin reads and writes the cluster through.
type Client struct {
	Kube kubernetes.Interface
	// Logs returns the tail of a container's log; nil: the API server's
	// (what kubectl logs reads).
	Logs func(ctx context.Context, namespace, pod, container string) (string, error)
	// Exec runs a command in a container and returns its stdout and
	// stderr; nil: Check skips the session-URL probe.
	Exec func(ctx context.Context, namespace, pod, container string, cmd []string) (stdout, stderr string, err error)
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// HealthCheckPaths are the paths the load balancer's HTTP health check
	// requests on the drained container: Check asks whether each creates
	// sessions, as it asks of the container's probes.
	HealthCheckPaths []string
}

// NewClient is a Client on the API server of cfg: logs and exec as
// kubectl reads and runs them.
func NewClient(cfg *rest.Config) (*Client, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	c := &Client{Kube: kube}
	c.Exec = func(ctx context.Context, namespace, pod, container string, cmd []string) (string, string, error) {
		req := kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
		ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
		if err != nil {
			return "", "", fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
		}
		spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
		if err != nil {
			return "", "", fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
		}
		// SPDY only where the WebSocket upgrade itself fails (an older API
		// server or a proxy), as kubectl exec does: a command that ran and
		// failed is not run again.
		exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
		if err != nil {
			return "", "", fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
		}
		var out, errOut bytes.Buffer
		err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
		return out.String(), errOut.String(), err
	}
	return c, nil
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// logTail is how many lines of a container's log Status reads: drainctl
// writes a line at each change of the count and a heartbeat a minute, so
// its latest is among them unless the app logs a lot in between.
const logTail = 500

func (c *Client) logs(ctx context.Context, namespace, pod, container string) (string, error) {
	if c.Logs != nil {
		return c.Logs(ctx, namespace, pod, container)
	}
	tail := int64(logTail)
	b, err := c.Kube.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, TailLines: &tail}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of %s/%s container %s: %w", namespace, pod, container, err)
	}
	return string(b), nil
}

// drainContainer is the container whose preStop hook is the injected
// `drainctl wait`, and that hook's command; "" when the pod has none.
func drainContainer(p *corev1.Pod) (string, []string) {
	for _, c := range p.Spec.Containers {
		h := c.Lifecycle
		if h == nil || h.PreStop == nil || h.PreStop.Exec == nil {
			continue
		}
		cmd := h.PreStop.Exec.Command
		if len(cmd) >= 2 && path.Base(cmd[0]) == "drainctl" && cmd[1] == "wait" {
			return c.Name, cmd
		}
	}
	return "", nil
}

// injected reports whether the webhook mutated the pod.
func injected(p *corev1.Pod) bool {
	name, _ := drainContainer(p)
	return p.Annotations[api.AnnotationStatus] == api.StatusInjected || name != ""
}
