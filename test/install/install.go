// Package install installs stickydrain as a user does, on the real node
// (test/node): cert-manager running for real (its controllers and CA
// injector, test/tools/certmanager) issues the webhook's certificate and
// injects its CA, and manifests/default, through an overlay that replaces
// the images with the ones built here, runs the webhook and the controller
// as pods that the API server reaches through their Services. The install
// test and the end-to-end scenarios on the installed product share it.
package install

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/manifests"
	"github.com/stickydrain/stickydrain/test/node"
)

// Namespace is the install's namespace.
const Namespace = "stickydrain-system"

// Images are the images an install runs, by tools/images name.
var Images = []string{"pause", "drainctl", "stickydrain", "cert-manager"}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// CertManager applies cert-manager's CRDs (from the module the thin main is
// built from) and the ServiceMonitor and PrometheusRule CRDs manifests/default needs, then runs
// cert-manager from image as a pod with a ServiceAccount bound to
// cluster-admin (its own install ships finer roles; the tests do not test
// cert-manager's RBAC), and waits until it runs.
func CertManager(ctx context.Context, c *cluster.Cluster, image string) error {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager")
	cmd.Dir = filepath.Join(repoRoot(), "test", "tools", "certmanager")
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("locating cert-manager's module: %w", err)
	}
	crds, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return fmt.Errorf("no cert-manager CRDs in its module: %v", err)
	}
	files, err := manifests.CRDFiles(ctx)
	if err != nil {
		return err
	}
	for _, f := range files {
		if strings.Contains(f, "servicemonitors") || strings.Contains(f, "prometheusrules") {
			crds = append(crds, f)
		}
	}
	for _, f := range crds {
		if err := ApplyFile(ctx, c, f); err != nil {
			return err
		}
	}
	const ns = "cert-manager"
	labels := map[string]string{"app": "cert-manager"}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "cert-manager", Namespace: ns}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "cert-manager-test"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "cert-manager", Namespace: ns}},
		},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "cert-manager", Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						ServiceAccountName: "cert-manager",
						Containers: []corev1.Container{{
							Name: "cert-manager", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
							Args: []string{"--v=2"},
						}},
					},
				},
			},
		},
	} {
		if err := c.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("cert-manager: %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	return WaitAvailable(ctx, c, ns, "cert-manager")
}

// Refs are the references of images built here and imported into the
// node, by tools/images name.
func Refs(imgs map[string]node.Image) map[string]string {
	out := map[string]string{}
	for n, i := range imgs {
		out[n] = i.Ref
	}
	return out
}

// Stickydrain applies manifests/default through an overlay that replaces
// the stickydrain and drainctl images with refs["stickydrain"] and
// refs["drainctl"] (repository:tag, or a mirror's repository:tag@digest),
// as a user mirroring them writes one: nothing else (the webhook reads the
// drainctl image from its own init container). controllerConfig, when not
// empty, is the controller's configuration (controller.yaml): the install
// ships none, the operator creates the ConfigMap it mounts, here before
// the install.
func Stickydrain(ctx context.Context, c *cluster.Cluster, refs map[string]string, controllerConfig string) error {
	overlay, err := os.MkdirTemp("", "stickydrain-overlay-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(overlay)
	// kustomize takes a relative path to the base, as an overlay in a
	// user's repository names it.
	base, err := filepath.Rel(overlay, manifests.Dir("default"))
	if err != nil {
		return err
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%q]\nimages:\n", base)
	for _, n := range []string{"stickydrain", "drainctl"} {
		ref, digest, _ := strings.Cut(refs[n], "@")
		i := strings.LastIndex(ref, ":")
		if i < 0 || strings.Contains(ref[i:], "/") {
			return fmt.Errorf("image %s: %q has no tag", n, refs[n])
		}
		k += fmt.Sprintf("  - {name: %s/%s, newName: %s, newTag: %q", node.ImageRepo, n, ref[:i], ref[i+1:])
		if digest != "" {
			k += fmt.Sprintf(", digest: %s", digest)
		}
		k += "}\n"
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return err
	}
	objs, err := manifests.Render(overlay)
	if err != nil {
		return err
	}
	// Namespaces first, then everything else in the rendered order.
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
	for _, o := range objs {
		if err := c.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if o.GetKind() == "Namespace" && o.GetName() == Namespace && controllerConfig != "" {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "stickydrain-controller"},
				Data: map[string]string{"controller.yaml": controllerConfig}}
			if err := c.Client.Create(ctx, cm); err != nil {
				return fmt.Errorf("creating the controller's configuration: %w", err)
			}
		}
	}
	for _, d := range []string{"stickydrain-webhook", "stickydrain-controller"} {
		if err := WaitAvailable(ctx, c, Namespace, d); err != nil {
			return err
		}
	}
	return nil
}

// ApplyFile creates every object of a multi-document YAML file, naming the
// file and the object that failed.
func ApplyFile(ctx context.Context, c *cluster.Cluster, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(raw), "\n---") {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Client.Create(ctx, &u); err != nil {
			return fmt.Errorf("%s: %s %s: %w", path, u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// WaitAvailable waits until the Deployment has all its replicas updated
// and available.
func WaitAvailable(ctx context.Context, c *cluster.Cluster, ns, name string) error {
	for {
		var d appsv1.Deployment
		if c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &d) == nil {
			want := ptr.Deref(d.Spec.Replicas, 1)
			if d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == want && d.Status.AvailableReplicas == want && d.Status.Replicas == want {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for Deployment %s/%s to be available: %w", ns, name, ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}
