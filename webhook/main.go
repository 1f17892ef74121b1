// Command webhook is stickydrain's admission webhook: it injects the drain
// into opted-in pods and refuses workloads whose drain parameters are bad.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/stickydrain/stickydrain/internal/serving"
	"github.com/stickydrain/stickydrain/webhook/admit"
	"github.com/stickydrain/stickydrain/webhook/dryrun"
	"github.com/stickydrain/stickydrain/webhook/inject"
)

func main() {
	var (
		cfg         inject.Config
		certDir     string
		port        int
		metricsAddr string
		probeAddr   string
		pprofAddr   string
		serving     serving.Flags
		leaderElect bool
		leaderNS    string
	)
	cfg.BindFlags(flag.CommandLine)
	flag.StringVar(&certDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "`directory` holding tls.crt and tls.key; reloaded when they change (cert-manager rotation)")
	flag.IntVar(&port, "port", 9443, "webhook HTTPS `port`")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "`address` of the metrics endpoint; 0 disables it")
	serving.Bind(flag.CommandLine)
	flag.BoolVar(&leaderElect, "leader-elect", false, "elect a leader among the replicas for the dry-run reporter (every replica answers admissions)")
	flag.StringVar(&leaderNS, "leader-election-namespace", "", "`namespace` of the leader-election Lease (default: the pod's own)")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "`address` of /healthz and /readyz")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "", "`address` of Go's /debug/pprof profiles, for diagnosis; empty (the default) disables them")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse() // --kubeconfig is registered by controller-runtime
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
	log.Info("starting", "port", port, "certDir", certDir, "drainctlImage", cfg.DrainctlImage)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "webhook stopped")
		os.Exit(1)
	}
}
