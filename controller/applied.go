package main

import (
	"bytes"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// appliedKey is the ConfigMap's key holding the configuration file as the
// controller last applied it.
const appliedKey = "controller.yaml"

// appliedStore keeps the configuration a controller last applied in a
// ConfigMap of its own namespace, where a restarted controller (another
// replica, a new pod of a rollout) finds it: it starts on that one and
// checks the file against it as a running controller checks a change, so a
// change that would take servers out of live upstreams is held across a
// restart too, not applied by it.
type appliedStore struct {
	reader client.Reader // the API server directly: usable before the manager starts
	writer client.Client
	key    client.ObjectKey
}

// load returns the configuration last applied, or nil when none was kept
// yet (a first start, or an upgrade from a controller that kept none).
func (s *appliedStore) load(ctx context.Context) ([]byte, error) {
	var cm corev1.ConfigMap
	err := s.reader.Get(ctx, s.key, &cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the last applied configuration, ConfigMap %s: %w", s.key, err)
	}
	b, ok := cm.Data[appliedKey]
	if !ok {
		return nil, nil
	}
	return []byte(b), nil
}

// save keeps raw as the configuration last applied.
func (s *appliedStore) save(ctx context.Context, raw []byte) error {
	var cm corev1.ConfigMap
	err := s.reader.Get(ctx, s.key, &cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.key.Namespace, Name: s.key.Name, Labels: map[string]string{
				"app.kubernetes.io/name": "stickydrain", "app.kubernetes.io/component": "controller",
			}},
			Data: map[string]string{appliedKey: string(raw)},
		}
		err = s.writer.Create(ctx, &cm)
	case err != nil:
	case bytes.Equal([]byte(cm.Data[appliedKey]), raw):
		return nil
	default:
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[appliedKey] = string(raw)
		err = s.writer.Update(ctx, &cm)
	}
	if err != nil {
		return fmt.Errorf("keeping the applied configuration in ConfigMap %s: %w", s.key, err)
	}
	return nil
}
