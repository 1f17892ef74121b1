package helm

import (
	"context"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/manifests"
)

// helmConfig is what the helm command sets up from a kubeconfig: a kube
// client and release storage in Secrets of the release's namespace.
func helmConfig(t *testing.T, c *cluster.Cluster) *action.Configuration {
	t.Helper()
	cfg, err := newHelmConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// newHelmConfig is helmConfig returning its error.
func newHelmConfig(c *cluster.Cluster) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &c.KubeconfigPath
	ns := namespace
	flags.Namespace = &ns
	cfg := action.NewConfiguration()
	if err := cfg.Init(flags, namespace, "secret"); err != nil {
		return nil, err
	}
	// The API server built from Go modules reports v0.0.0-master (no
	// version stamped at build): Helm is told the version of the modules
	// it was built from, with the APIs it discovers as it would.
	dc, err := flags.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	apis, err := action.GetVersionSet(dc)
	if err != nil {
		return nil, err
	}
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, err
	}
	cfg.Capabilities = &common.Capabilities{APIVersions: apis, KubeVersion: *kv, HelmVersion: common.DefaultCapabilities.HelmVersion}
	return cfg, nil
}

// `helm install`, `helm upgrade` and `helm uninstall`, through Helm's SDK,
// against a real API server with cert-manager's and the Prometheus
// Operator's CRDs: the API server takes every object as rendered (strict
// field validation: a misspelt field fails), "auto" finds the
// ServiceMonitor API, an upgrade that sets the controller's configuration
// creates its ConfigMap and one that unsets it removes it, a bad value
// fails before anything is created, and uninstall leaves nothing of the
// release behind, cluster-scoped objects included.
func TestHelmInstallUpgradeUninstallOnARealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane (-short)")
	}
	c := cluster.StartT(t, cluster.Options{Log: t.Logf})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := manifests.InstallCRDs(ctx, c.Config); err != nil {
		t.Fatal(err)
	}
	// The API server refuses unknown fields: Helm's server-side apply
	// then fails on a template typo.
	ch, err := loader.Load(chartDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t, c)

	// A bad value: nothing is created, not even the namespace.
	bad := action.NewInstall(cfg)
	bad.ReleaseName, bad.Namespace, bad.CreateNamespace = release, namespace, true
	if _, err := bad.RunWithContext(ctx, ch, map[string]any{"webhook": map[string]any{"replicas": "two"}}); err == nil || !strings.Contains(err.Error(), "/webhook/replicas") {
		t.Fatalf("install with webhook.replicas=two: %v", err)
	}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: namespace}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused install created the namespace: %v", err)
	}

	// The README's commands: the namespace with its Pod Security label,
	// then helm install.
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}); err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = release, namespace
	inst.ServerSideApply = true
	inst.WaitStrategy = kube.HookOnlyStrategy
	if _, err := inst.RunWithContext(ctx, ch, map[string]any{}); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	rendered := mustRender(t, map[string]any{}, serviceMonitorAPI)
	exists := func(o *unstructured.Unstructured) bool {
		t.Helper()
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(o.GroupVersionKind())
		err := c.Client.Get(ctx, client.ObjectKeyFromObject(o), u)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		return err == nil
	}
	for _, o := range rendered {
		if !exists(o) {
			t.Errorf("after helm install: no %s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		}
	}
	if manifests.Find(rendered, "ServiceMonitor", "stickydrain-controller") == nil {
		t.Errorf("the cluster serves ServiceMonitors and monitoring.serviceMonitors=auto rendered none")
	}
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	cm.SetNamespace(namespace)
	cm.SetName("stickydrain-controller")
	if exists(cm) {
		t.Errorf("the default install created the controller's ConfigMap")
	}

	// helm upgrade with the controller's configuration from a values file.
	upgrade := func(vals map[string]any) {
		t.Helper()
		up := action.NewUpgrade(cfg)
		up.Namespace = namespace
		up.ServerSideApply = "true"
		up.WaitStrategy = kube.HookOnlyStrategy
		if _, err := up.RunWithContext(ctx, release, ch, vals); err != nil {
			t.Fatalf("helm upgrade: %v", err)
		}
	}
	upgrade(valuesFile(t, "controller-config.yaml"))
	if !exists(cm) {
		t.Errorf("helm upgrade with controller.config: no ConfigMap stickydrain-controller")
	}
	// The operator's next values file leaves controller.config out (helm
	// upgrade with no values at all would reuse the last ones): Helm keeps
	// the ConfigMap (helm.sh/resource-policy: keep), so that the controller
	// does not start with no configuration.
	upgrade(map[string]any{"webhook": map[string]any{"replicas": 2}})
	if !exists(cm) {
		t.Errorf("helm upgrade without controller.config deleted the chart's ConfigMap: the controller would start with no configuration")
	}
	list := action.NewList(cfg)
	if rels, err := list.Run(); err != nil || len(rels) != 1 {
		t.Errorf("helm list: %d releases, %v", len(rels), err)
	}

	// helm uninstall: nothing of the release is left.
	un := action.NewUninstall(cfg)
	un.WaitStrategy = kube.HookOnlyStrategy
	if _, err := un.Run(release); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, o := range rendered {
		for exists(o) && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if exists(o) {
			t.Errorf("after helm uninstall: %s %s/%s is left", o.GetKind(), o.GetNamespace(), o.GetName())
		}
	}
	// The kept ConfigMap is the one thing left, as docs/install.md says.
	if !exists(cm) {
		t.Errorf("after helm uninstall: the kept ConfigMap stickydrain-controller is gone")
	}
}
