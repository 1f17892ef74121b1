package framework

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/stickydrain/stickydrain/certs"
	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/install"
	"github.com/stickydrain/stickydrain/test/proc"
)

// DrainctlImage is the image name the webhook injects; podhost maps it to
// the drainctl binary.
const DrainctlImage = "ghcr.io/stickydrain/drainctl:e2e"

// RepoRoot is the checkout's top directory, where manifests/ and
// test/ are.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Webhook is the webhook binary running with a certificate from certs/.
type Webhook struct {
	*proc.Proc
	Port, MetricsPort int
	CA                []byte
	CertDir           string

	bin, readyURL string
	args          []string
}

// StartWebhook runs the webhook binary bin with its real flags against
// kubeconfig, a fresh certificate for 127.0.0.1 in dir/webhook-certs and
// its log at dir/webhook.log, and waits until it is ready. extra flags
// follow the others.
func StartWebhook(ctx context.Context, bin, kubeconfig, dir, drainctlImage string, extra ...string) (*Webhook, error) {
	b, err := certs.Generate(certs.Options{DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		return nil, err
	}
	w := &Webhook{CA: b.CACert, CertDir: filepath.Join(dir, "webhook-certs")}
	if err := b.WriteDir(w.CertDir); err != nil {
		return nil, err
	}
	ports, err := proc.FreePorts(3)
	if err != nil {
		return nil, err
	}
	w.Port, w.MetricsPort = ports[0], ports[1]
	args := append([]string{"--kubeconfig", kubeconfig, "--cert-dir", w.CertDir,
		"--port", fmt.Sprint(w.Port), "--drainctl-image", drainctlImage,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", w.MetricsPort),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[2])}, extra...)
	w.bin, w.args, w.readyURL = bin, args, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[2])
	w.Proc, err = proc.Start(filepath.Join(dir, "webhook.log"), bin, args...)
	if err != nil {
		return nil, err
	}
	if err := proc.WaitHTTP(ctx, w.readyURL, 60*time.Second); err != nil {
		w.Stop()
		return nil, fmt.Errorf("webhook: %w (log %s)", err, w.Log)
	}
	return w, nil
}

// Restart starts the webhook again after Stop or Kill, as the kubelet
// starts a container again: the same flags, certificate and ports, its
// output appended to the same log; it waits until it is ready.
func (w *Webhook) Restart(ctx context.Context) error {
	if !w.Exited() {
		return fmt.Errorf("webhook: restart while it runs (pid %d)", w.Pid())
	}
	p, err := proc.Start(w.Log, w.bin, w.args...)
	if err != nil {
		return err
	}
	w.Proc = p
	if err := proc.WaitHTTP(ctx, w.readyURL, 60*time.Second); err != nil {
		return fmt.Errorf("webhook restarted: %w (log %s)", err, w.Log)
	}
	return nil
}

// InstallWebhookConfigurations applies manifests/webhook as shipped, each
// clientConfig pointed at base (https://host:port) with the CA bundle.
func InstallWebhookConfigurations(ctx context.Context, c *cluster.Cluster, base string, ca []byte) error {
	raw, err := os.ReadFile(filepath.Join(RepoRoot(), "manifests", "webhook", "webhook-configurations.yaml"))
	if err != nil {
		return err
	}
	point := func(cc *admissionv1.WebhookClientConfig) {
		url := base + ptr.Deref(cc.Service.Path, "/")
		cc.Service, cc.URL, cc.CABundle = nil, &url, ca
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return err
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			var m admissionv1.MutatingWebhookConfiguration
			if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
				return err
			}
			for i := range m.Webhooks {
				point(&m.Webhooks[i].ClientConfig)
			}
			if err := c.Client.Create(ctx, &m); err != nil {
				return err
			}
		case "ValidatingWebhookConfiguration":
			var v admissionv1.ValidatingWebhookConfiguration
			if err := yaml.UnmarshalStrict([]byte(doc), &v); err != nil {
				return err
			}
			for i := range v.Webhooks {
				point(&v.Webhooks[i].ClientConfig)
			}
			if err := c.Client.Create(ctx, &v); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected kind %q in the webhook manifests", meta.Kind)
		}
	}
	return nil
}

// ServiceAccount applies manifests/<component>/rbac.yaml as shipped (the
// webhook's or the controller's) and returns a kubeconfig for its
// ServiceAccount stickydrain-<component>, so the binary runs with exactly
// the permissions it ships with.
func ServiceAccount(ctx context.Context, c *cluster.Cluster, component string) (string, error) {
	err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "stickydrain-system"}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if err := install.ApplyFile(ctx, c, filepath.Join(RepoRoot(), "manifests", component, "rbac.yaml")); err != nil {
		return "", err
	}
	return c.AddUser("system:serviceaccount:stickydrain-system:stickydrain-"+component,
		"system:serviceaccounts", "system:serviceaccounts:stickydrain-system", "system:authenticated")
}

// ControllerServiceAccount is ServiceAccount for the controller.
func ControllerServiceAccount(ctx context.Context, c *cluster.Cluster) (string, error) {
	return ServiceAccount(ctx, c, "controller")
}

// Controller is the controller binary running with a configuration file.
type Controller struct {
	*proc.Proc
	MetricsPort int
	Kubeconfig  string // the kubeconfig it runs with
	// PprofAddr is where it serves Go's profiles, when the caller passed
	// --pprof-bind-address (and set this); "" otherwise.
	PprofAddr string
}

// StartController runs the controller binary bin against kubeconfig with
// config (YAML, written to dir/controller.yaml) and its log at
// dir/controller.log, and waits until it is ready. extra flags follow the
// others.
func StartController(ctx context.Context, bin, kubeconfig, dir, config string, extra ...string) (*Controller, error) {
	cfg := filepath.Join(dir, "controller.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return nil, err
	}
	ports, err := proc.FreePorts(2)
	if err != nil {
		return nil, err
	}
	c := &Controller{MetricsPort: ports[0], Kubeconfig: kubeconfig}
	args := append([]string{"--config", cfg, "--kubeconfig", kubeconfig,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[1])}, extra...)
	if c.Proc, err = proc.Start(filepath.Join(dir, "controller.log"), bin, args...); err != nil {
		return nil, err
	}
	if err := proc.WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]), 60*time.Second); err != nil {
		c.Stop()
		return nil, fmt.Errorf("controller: %w (log %s)", err, c.Log)
	}
	return c, nil
}
