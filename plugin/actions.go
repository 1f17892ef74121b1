package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickydrain/stickydrain/api"
)

// Release ends the drain of each pod. A draining pod's drainctl is told
// at once, through `drainctl release` run in its container (kubectl
// exec): the kubelet does not refresh a terminating pod's downward-API
// annotations. The pod is also annotated stickydrain.io/release=true, which
// a pod that has not begun to drain reads when it does. It returns one
// line per pod for the operator.
func (c *Client) Release(ctx context.Context, namespace string, pods []string) ([]string, error) {
	return c.annotate(ctx, namespace, pods, api.AnnotationRelease, "true", []string{"release"})
}

// Shorten lowers the max-wait of each pod's drain to d (counted from the
// drain's start), as Release: drainctl shorten in a draining pod, the
// stickydrain.io/max-wait annotation for the drain to come. drainctl
// refuses a value not shorter than the one it runs with.
func (c *Client) Shorten(ctx context.Context, namespace string, pods []string, d time.Duration) ([]string, error) {
	if d <= 0 {
		return nil, fmt.Errorf("--max-wait %s: want a positive duration such as 30m", d)
	}
	return c.annotate(ctx, namespace, pods, api.AnnotationMaxWait, d.String(), []string{"shorten", "--max-wait=" + d.String()})
}

func (c *Client) annotate(ctx context.Context, namespace string, pods []string, key, value string, control []string) ([]string, error) {
	if len(pods) == 0 {
		return nil, fmt.Errorf("name at least one pod")
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	var out []string
	for _, name := range pods {
		p, err := c.Kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return out, fmt.Errorf("pod %s/%s not found", namespace, name)
		}
		if err != nil {
			return out, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
		}
		if !injected(p) {
			return out, fmt.Errorf("pod %s/%s has no stickydrain drain (no %s=%s, no drainctl preStop hook): nothing reads %s", namespace, name, api.AnnotationStatus, api.StatusInjected, key)
		}
		if _, err := c.Kube.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return out, fmt.Errorf("annotating pod %s/%s: %w", namespace, name, err)
		}
		if p.DeletionTimestamp == nil {
			out = append(out, fmt.Sprintf("pod/%s annotated %s=%s: its drain reads it when the pod stops", name, key, value))
			continue
		}
		container, cmd := drainContainer(p)
		if container == "" || c.Exec == nil {
			return out, fmt.Errorf("pod %s/%s is draining, and its drainctl cannot be reached (no drainctl hook, or no exec): annotated %s=%s only, which the kubelet does not deliver to a terminating pod", namespace, name, key, value)
		}
		stdout, stderr, err := c.Exec(ctx, namespace, name, container, append([]string{cmd[0]}, control...))
		if err != nil {
			return out, fmt.Errorf("pod %s/%s: %s in container %s: %w: %s", namespace, name, strings.Join(append([]string{cmd[0]}, control...), " "), container, err, strings.TrimSpace(stderr))
		}
		out = append(out, fmt.Sprintf("pod/%s annotated %s=%s; its drain answered: %s", name, key, value, strings.TrimSpace(stdout)))
	}
	return out, nil
}
