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
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/stickydrain/stickydrain/internal/cmdline"
	"github.com/stickydrain/stickydrain/internal/kubeflags"
	"github.com/stickydrain/stickydrain/internal/serving"
	"github.com/stickydrain/stickydrain/internal/version"
	"github.com/stickydrain/stickydrain/webhook/admit"
	"github.com/stickydrain/stickydrain/webhook/dryrun"
	"github.com/stickydrain/stickydrain/webhook/inject"
)

const synopsis = `webhook [flags]

stickydrain's admission webhooks: injects the drain (a preStop running
drainctl wait, a long enough grace period) into opted-in pods, and warns
about or refuses workloads whose drain parameters are bad.`

// options are the webhook's command-line settings.
type options struct {
	cfg         inject.Config
	certDir     string
	port        int
	metricsAddr string
	probeAddr   string
	pprofAddr   string
	serving     serving.Flags
	leaderElect bool
	leaderNS    string
	zap         zap.Options
}

// flagSet binds every flag of the webhook to o.
func flagSet(o *options) *pflag.FlagSet {
	fs := cmdline.New("webhook")
	o.cfg.BindFlags(fs)
	fs.StringVar(&o.certDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "`directory` holding tls.crt and tls.key; reloaded when they change (cert-manager rotation)")
	fs.IntVar(&o.port, "port", 9443, "webhook HTTPS `port`")
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
	var o options
	if status, ok := cmdline.Parse(flagSet(&o), synopsis, os.Args[1:], os.Stdout, os.Stderr); !ok {
		os.Exit(status)
	}
	cfg, certDir, port, metricsAddr, probeAddr, pprofAddr := o.cfg, o.certDir, o.port, o.metricsAddr, o.probeAddr, o.pprofAddr
	serving, leaderElect, leaderNS, zapOpts := o.serving, o.leaderElect, o.leaderNS, o.zap
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("webhook")

	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "webhook:", err)
		os.Exit(2)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		log.Error(err, "building scheme")
		os.Exit(1)
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "loading kubeconfig")
		os.Exit(1)
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                serving.Metrics(metricsAddr),
		HealthProbeBindAddress: probeAddr,
		PprofBindAddress:       pprofAddr,
		WebhookServer:          webhook.NewServer(webhook.Options{Port: port, CertDir: certDir, TLSOpts: serving.TLSOpts()}),
		// Admissions are answered by every replica; only the dry-run
		// reporter waits for the Lease.
		LeaderElection:                leaderElect,
		LeaderElectionID:              "stickydrain-webhook",
		LeaderElectionNamespace:       leaderNS,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		log.Error(err, "creating manager")
		os.Exit(1)
	}
	if cfg.DrainctlImageFrom != "" {
		// The manager's uncached reader: the cache is not started yet.
		if err := resolveDrainctlImage(&cfg, mgr.GetAPIReader()); err != nil {
			fmt.Fprintln(os.Stderr, "webhook:", err)
			os.Exit(2)
		}
	}
	if err := metrics.Registry.Register(version.BuildInfo("webhook")); err != nil {
		log.Error(err, "registering build_info")
		os.Exit(1)
	}
	m, err := admit.NewMetrics(metrics.Registry)
	if err != nil {
		log.Error(err, "registering metrics")
		os.Exit(1)
	}
	if err := admit.Register(mgr, cfg, m); err != nil {
		log.Error(err, "registering webhooks")
		os.Exit(1)
	}
	if err := (&dryrun.Reporter{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("stickydrain-webhook")}).SetupWithManager(mgr); err != nil {
		log.Error(err, "setting up the dry-run reporter")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "adding healthz")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		log.Error(err, "adding readyz")
		os.Exit(1)
	}
	log.Info("starting", "port", port, "certDir", certDir, "drainctlImage", cfg.DrainctlImage, "drainctlImageFrom", cfg.DrainctlImageFrom)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "webhook stopped")
		os.Exit(1)
	}
}

// resolveDrainctlImage reads the webhook's own pod (POD_NAMESPACE and
// POD_NAME, from the downward API) for the drainctl image's container.
func resolveDrainctlImage(cfg *inject.Config, r client.Reader) error {
	ns, name := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	if ns == "" || name == "" {
		return fmt.Errorf("--drainctl-image-from-container=%s needs POD_NAMESPACE and POD_NAME (the downward API's metadata.namespace and metadata.name)", cfg.DrainctlImageFrom)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var own corev1.Pod
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &own); err != nil {
		return fmt.Errorf("--drainctl-image-from-container: reading the webhook's own pod %s/%s: %w", ns, name, err)
	}
	return cfg.ResolveDrainctlImage(&own)
}
