// Command noop-webhook is the admission benchmark's floor: a mutating
// webhook on the same stack as stickydrain's (a controller-runtime manager
// and webhook server, the same TLS and HTTP/2 settings, metrics and health
// probes served alike) whose handler allows every pod without a patch and
// reads nothing. What stickydrain's webhook costs beyond it is its own work.
//
// It takes the webhook's flags that the benchmark passes (--kubeconfig,
// --cert-dir, --port, --metrics-bind-address, --health-probe-bind-address)
// and ignores --drainctl-image.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/stickydrain/stickydrain/internal/kubeflags"
	"github.com/stickydrain/stickydrain/internal/serving"
)

func main() {
	var (
		certDir, metricsAddr, probeAddr, image string
		port                                   int
		srv                                    serving.Flags
	)
	fs := pflag.NewFlagSet("noop-webhook", pflag.ContinueOnError)
	fs.StringVar(&certDir, "cert-dir", "", "`directory` holding tls.crt and tls.key")
	fs.IntVar(&port, "port", 9443, "webhook HTTPS `port`")
	fs.StringVar(&metricsAddr, "metrics-bind-address", "0", "`address` of the metrics endpoint; 0 disables it")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "`address` of /healthz and /readyz")
	fs.StringVar(&image, "drainctl-image", "", "ignored (stickydrain's webhook flag)")
	srv.Bind(fs)
	var zapOpts zap.Options
	fs.AddGoFlagSet(kubeflags.GoFlags(&zapOpts))
	if err := fs.Parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "noop-webhook:", err)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if err := run(ctrl.SetupSignalHandler(), certDir, port, metricsAddr, probeAddr, srv); err != nil {
		fmt.Fprintln(os.Stderr, "noop-webhook:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, certDir string, port int, metricsAddr, probeAddr string, srv serving.Flags) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                srv.Metrics(metricsAddr),
		HealthProbeBindAddress: probeAddr,
		WebhookServer:          webhook.NewServer(webhook.Options{Port: port, CertDir: certDir, TLSOpts: srv.TLSOpts()}),
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	allow := &webhook.Admission{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})}
	mgr.GetWebhookServer().Register("/mutate--v1-pod", allow)
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
