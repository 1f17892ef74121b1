// Command webhook is stickydrain's admission webhook: it injects the drain
// into opted-in pods and refuses workloads whose drain parameters are bad.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/stickydrain/stickydrain/internal/bootstrap"
	"github.com/stickydrain/stickydrain/internal/cmdline"
	"github.com/stickydrain/stickydrain/internal/kubeflags"
	"github.com/stickydrain/stickydrain/internal/serving"
	"github.com/stickydrain/stickydrain/webhook/admit"
	"github.com/stickydrain/stickydrain/webhook/dryrun"
	"github.com/stickydrain/stickydrain/webhook/inject"
)

const synopsis = `webhook [flags]

stickydrain's admission webhooks: injects the drain (a preStop running
drainctl wait, a long enough grace period) into opted-in pods, and warns
about or refuses workloads whose drain parameters are bad.`

// Options are the webhook's command-line settings.
type Options struct {
	cfg         inject.Config
	certDir     string
	port        int
	maxInFlight int
	clientCA    string
	metricsAddr string
	probeAddr   string
	pprofAddr   string
	serving     serving.Flags
	leaderElect bool
	leaderNS    string
	zap         zap.Options
}

// flagSet binds every flag of the webhook to o.
func flagSet(o *Options) *pflag.FlagSet {
	fs := cmdline.New("webhook")
	o.cfg.BindFlags(fs)
	fs.StringVar(&o.clientCA, "client-ca-file", "", "`file` of the CA bundle that signs the API server's client certificate: when set, the webhook answers only clients presenting a certificate it signs (the API server configured to present one to admission webhooks); read again when it changes")
	fs.StringVar(&o.certDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "`directory` holding tls.crt and tls.key; reloaded when they change (cert-manager rotation)")
	fs.IntVar(&o.port, "port", 9443, "webhook HTTPS `port`")
	fs.IntVar(&o.maxInFlight, "max-concurrent-admissions", admit.DefaultMaxInFlight, "how many admissions are decided at once (a `count`); more wait their turn, which bounds the replica's memory under a burst")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "`address` of the metrics endpoint; 0 disables it")
	o.serving.Bind(fs)
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader among the replicas for the dry-run reporter (every replica answers admissions)")
	fs.StringVar(&o.leaderNS, "leader-election-namespace", "", "`namespace` of the leader-election Lease (default: the pod's own)")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "`address` of /healthz and /readyz")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "`address` of Go's /debug/pprof profiles, for diagnosis; empty (the default) disables them")
	fs.AddGoFlagSet(kubeflags.GoFlags(&o.zap))
	return fs
}

func main() {
	var o Options
	if status, ok := cmdline.Parse(flagSet(&o), synopsis, os.Args[1:], os.Stdout, os.Stderr); !ok {
		os.Exit(status)
	}
	os.Exit(bootstrap.Exit("webhook", Run(ctrl.SetupSignalHandler(), o), os.Stderr))
}

// Run serves the admission webhooks until ctx ends. A mistake in the
// settings is a bootstrap.UsageError.
func Run(ctx context.Context, o Options) error {
	cfg := o.cfg
	if err := cfg.Validate(); err != nil {
		return bootstrap.Usage(err)
	}
	if o.maxInFlight < 1 {
		return bootstrap.Usage(fmt.Errorf("--max-concurrent-admissions=%d: want 1 or more", o.maxInFlight))
	}
	tlsOpts := o.serving.TLSOpts()
	if o.clientCA != "" {
		if err := serving.CheckClientCA(o.clientCA); err != nil {
			return bootstrap.Usage(err)
		}
		tlsOpts = append(tlsOpts, serving.ClientCA(o.clientCA))
	}
	var server *admit.LimitedServer
	mgr, log, err := bootstrap.Manager(bootstrap.Options{
		Component: "webhook", Zap: o.zap,
		MetricsAddr: o.metricsAddr, ProbeAddr: o.probeAddr, PprofAddr: o.pprofAddr, Serving: o.serving,
		// Admissions are answered by every replica; only the dry-run
		// reporter waits for the Lease.
		LeaderElect: o.leaderElect, LeaderElectionNamespace: o.leaderNS,
		Tune: func(mo *ctrl.Options) {
			server = admit.NewLimitedServer(webhook.NewServer(webhook.Options{Port: o.port, CertDir: o.certDir, TLSOpts: tlsOpts}), o.maxInFlight)
			mo.WebhookServer = server
			// The dry-run reporter's pods, and only those.
			mo.Cache.ByObject = dryrun.CacheByObject()
		},
	})
	if err != nil {
		return err
	}
	if cfg.DrainctlImageFrom != "" {
		// The manager's uncached reader: the cache is not started yet.
		if err := resolveDrainctlImage(ctx, &cfg, mgr.GetAPIReader()); err != nil {
			return bootstrap.Usage(err)
		}
	}
	m, err := admit.NewMetrics(metrics.Registry)
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	server.SetMetrics(m)
	if err := admit.Register(mgr, cfg, m); err != nil {
		return fmt.Errorf("registering the webhooks: %w", err)
	}
	if err := (&dryrun.Reporter{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("stickydrain-webhook")}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the dry-run reporter: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("adding /readyz: %w", err)
	}
	log.Info("starting", "port", o.port, "certDir", o.certDir, "drainctlImage", cfg.DrainctlImage, "drainctlImageFrom", cfg.DrainctlImageFrom)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("stopped: %w", err)
	}
	return nil
}

// resolveDrainctlImage reads the webhook's own pod (POD_NAMESPACE and
// POD_NAME, from the downward API) for the drainctl image's container.
func resolveDrainctlImage(ctx context.Context, cfg *inject.Config, r client.Reader) error {
	ns, name := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	if ns == "" || name == "" {
		return fmt.Errorf("--drainctl-image-from-container=%s needs POD_NAMESPACE and POD_NAME (the downward API's metadata.namespace and metadata.name)", cfg.DrainctlImageFrom)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var own corev1.Pod
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &own); err != nil {
		return fmt.Errorf("--drainctl-image-from-container: reading the webhook's own pod %s/%s: %w", ns, name, err)
	}
	return cfg.ResolveDrainctlImage(&own)
}
