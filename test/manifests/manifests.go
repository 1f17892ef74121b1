// Package manifests renders the kustomizations under manifests/ with
// kustomize's own Go API, as `kubectl apply -k` does, for the tests that
// check and apply them.
package manifests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Dir is the path of manifests/<sub> in this checkout.
func Dir(sub string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "manifests", sub)
}

// Render builds the kustomization in dir (a path on disk).
func Render(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		var u unstructured.Unstructured
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, &u)
	}
	return out, nil
}

// Find returns the object of that kind and name, or nil.
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// Modules holding the CRDs of what the install builds on, at the versions
// the tests apply: cert-manager's Issuer and Certificate, the Prometheus
// Operator's ServiceMonitor.
const (
	CertManagerModule        = "github.com/cert-manager/cert-manager@v1.19.1"
	PrometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
)

// CRDFiles returns the CRD files the install needs, from the Go module
// cache (downloading the two modules through the module proxy when they
// are missing; about 8 MB).
func CRDFiles(ctx context.Context) ([]string, error) {
	cm, err := moduleDir(ctx, CertManagerModule)
	if err != nil {
		return nil, err
	}
	po, err := moduleDir(ctx, PrometheusOperatorModule)
	if err != nil {
		return nil, err
	}
	return []string{
		filepath.Join(cm, "deploy", "crds", "cert-manager.io_issuers.yaml"),
		filepath.Join(cm, "deploy", "crds", "cert-manager.io_clusterissuers.yaml"),
		filepath.Join(cm, "deploy", "crds", "cert-manager.io_certificates.yaml"),
		filepath.Join(po, "example", "prometheus-operator-crd", "monitoring.coreos.com_servicemonitors.yaml"),
		filepath.Join(po, "example", "prometheus-operator-crd", "monitoring.coreos.com_prometheusrules.yaml"),
	}, nil
}

// InstallCRDs installs the CRDs of CRDFiles into the API server cfg reaches
// and waits until they are served.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	crds, err := CRDFiles(ctx)
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("installing the CRDs of the install's dependencies: %w", err)
	}
	return nil
}

func moduleDir(ctx context.Context, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	cmd.Dir = os.TempDir() // outside any module: no go.mod is changed
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil && err == nil {
		err = jerr
	}
	if info.Error != "" {
		return "", fmt.Errorf("go mod download %s: %s", mod, info.Error)
	}
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", mod, err)
	}
	return info.Dir, nil
}
