// Command controller keeps load-balancer upstreams in step with the
// EndpointSlices of annotated Services, draining the servers of
// terminating pods on every load-balancer instance.
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
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/reconcile"
)

func main() {
	var (
		configPath  string
		metricsAddr string
		probeAddr   string
		leaderElect bool
		leaderNS    string
	)
	flag.StringVar(&configPath, "config", "/etc/stickydrain/controller.yaml", "configuration `file`: the load balancers and their instances")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "`address` of the metrics endpoint; 0 disables it")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "`address` of /healthz and /readyz")
	flag.BoolVar(&leaderElect, "leader-elect", false, "elect a leader, so that of several replicas one acts at a time")
	flag.StringVar(&leaderNS, "leader-election-namespace", "", "`namespace` of the leader-election Lease (default: the pod's own)")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("controller")

	cfg, err := config.Load(configPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(2)
	}
	for i, lb := range cfg.LoadBalancers {
		if lb.Type != config.TypeHAProxy {
			fmt.Fprintf(os.Stderr, "controller: %s: loadBalancers[%d].type %s is not supported by this build yet\n", configPath, i, lb.Type)
			os.Exit(2)
		}
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
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "stickydrain-controller",
		LeaderElectionNamespace: leaderNS,
		// A new leader takes over without waiting for the old lease to expire.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		log.Error(err, "creating manager")
		os.Exit(1)
	}
	m, err := reconcile.NewMetrics(metrics.Registry)
	if err != nil {
		log.Error(err, "registering metrics")
		os.Exit(1)
	}
	r := &reconcile.Reconciler{
		Client:   mgr.GetClient(),
		Config:   cfg,
		Factory:  reconcile.DefaultFactory,
		Recorder: mgr.GetEventRecorder("stickydrain-controller"),
		Metrics:  m,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		log.Error(err, "setting up the controller")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "adding healthz")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "adding readyz")
		os.Exit(1)
	}
	log.Info("starting", "config", configPath, "loadBalancers", len(cfg.LoadBalancers), "resync", cfg.Resync.Duration.String())
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "controller stopped")
		os.Exit(1)
	}
}
