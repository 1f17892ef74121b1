package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickydrain/stickydrain/api"
)

// Release ends the drain of each pod at once: drainctl reads
// stickydrain.io/release through the downward API (the kubelet refreshes
// it within its sync period, about a minute) and exits. It returns one
// line per pod for the operator.
func (c *Client) Release(ctx context.Context, namespace string, pods []string) ([]string, error) {
	return c.annotate(ctx, namespace, pods, api.AnnotationRelease, "true",
		"drainctl ends the drain when the kubelet refreshes the pod's annotations (within about a minute)")
}

// Shorten lowers the max-wait of each pod's drain to d; drainctl ignores
// a value longer than the one it runs with.
func (c *Client) Shorten(ctx context.Context, namespace string, pods []string, d time.Duration) ([]string, error) {
	if d <= 0 {
		return nil, fmt.Errorf("--max-wait %s: want a positive duration such as 30m", d)
	}
	return c.annotate(ctx, namespace, pods, api.AnnotationMaxWait, d.String(),
		"drainctl gives up after "+d.String()+" in all, from when the kubelet refreshes the pod's annotations (within about a minute); a longer value than its own is ignored")
}

func (c *Client) annotate(ctx context.Context, namespace string, pods []string, key, value, what string) ([]string, error) {
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
		state := "running: the setting waits for its drain"
		if p.DeletionTimestamp != nil {
			state = "draining"
		}
		out = append(out, fmt.Sprintf("pod/%s annotated %s=%s (%s): %s", name, key, value, state, what))
	}
	return out, nil
}
