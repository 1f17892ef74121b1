package main

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// appliedKey is the ConfigMap's key holding the configuration file as the
// controller last applied it.
const appliedKey = "controller.yaml"

// formatKey says how the kept file reads: appliedFormat when the defaults
// it was applied under are today's; absent when kept by a controller from
// before listedUpstreamsOnly defaulted to true, or kept while a controller
// still ran such a configuration (config.WithLegacyDefaults).
const (
	formatKey     = "format"
	appliedFormat = "2"
)

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
// yet (a first start, or an upgrade from a controller that kept none), and
// whether it reads with the legacy defaults (formatKey).
func (s *appliedStore) load(ctx context.Context) (_ []byte, legacy bool, _ error) {
	var cm corev1.ConfigMap
	err := s.reader.Get(ctx, s.key, &cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("reading the last applied configuration, ConfigMap %s: %w", s.key, err)
	}
	b, ok := cm.Data[appliedKey]
	if !ok {
		return nil, false, nil
	}
	return []byte(b), cm.Data[formatKey] != appliedFormat, nil
}

// save keeps raw as the configuration last applied, read with the legacy
// defaults or not.
func (s *appliedStore) save(ctx context.Context, raw []byte, legacy bool) error {
	data := map[string]string{appliedKey: string(raw), formatKey: appliedFormat}
	if legacy {
		delete(data, formatKey)
	}
	var cm corev1.ConfigMap
	err := s.reader.Get(ctx, s.key, &cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.key.Namespace, Name: s.key.Name, Labels: map[string]string{
				"app.kubernetes.io/name": "stickydrain", "app.kubernetes.io/component": "controller",
			}},
			Data: data,
		}
		err = s.writer.Create(ctx, &cm)
	case err != nil:
	case maps.Equal(cm.Data, data):
		return nil
	default:
		cm.Data = data
		err = s.writer.Update(ctx, &cm)
	}
	if err != nil {
		return fmt.Errorf("keeping the applied configuration in ConfigMap %s: %w", s.key, err)
	}
	return nil
}
