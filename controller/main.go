// Command controller keeps load-balancer upstreams in step with the
// EndpointSlices of annotated Services, draining the servers of
// terminating pods on every load-balancer instance.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/drivers"
	"github.com/stickydrain/stickydrain/controller/reconcile"
	"github.com/stickydrain/stickydrain/internal/cmdline"
	"github.com/stickydrain/stickydrain/internal/kubeflags"
	"github.com/stickydrain/stickydrain/internal/serving"
	"github.com/stickydrain/stickydrain/internal/version"
)

const synopsis = `controller [flags]

Keeps load-balancer upstreams in step with the EndpointSlices of the
Services annotated stickydrain.io/upstreams: ready endpoints active,
terminating ones draining, gone ones removed, on every instance of every
load balancer of --config.`

// options are the controller's command-line settings.
type options struct {
	configPath  string
	metricsAddr string
	probeAddr   string
	pprofAddr   string
	concurrency int
	leaderElect bool
	leaderNS    string
	serving     serving.Flags
	zap         zap.Options
}

// flagSet binds every flag of the controller to o.
func flagSet(o *options) *pflag.FlagSet {
	fs := cmdline.New("controller")
	fs.StringVar(&o.configPath, "config", "/etc/stickydrain/controller.yaml", "configuration `file`: the load balancers and their instances")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "`address` of the metrics endpoint; 0 disables it")
	o.serving.Bind(fs)
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "`address` of /healthz and /readyz")
	fs.IntVar(&o.concurrency, "concurrent-reconciles", 8, "how many Services are brought in step at once (a burst of drains across Services waits for no other)")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "`address` of Go's /debug/pprof profiles, for diagnosis; empty (the default) disables them")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader, so that of several replicas one acts at a time")
	fs.StringVar(&o.leaderNS, "leader-election-namespace", "", "`namespace` of the leader-election Lease (default: the pod's own)")
	fs.AddGoFlagSet(kubeflags.GoFlags(&o.zap))
	return fs
}

func main() {
	var o options
	if status, ok := cmdline.Parse(flagSet(&o), synopsis, os.Args[1:], os.Stdout, os.Stderr); !ok {
		os.Exit(status)
	}
	configPath, metricsAddr, probeAddr, pprofAddr := o.configPath, o.metricsAddr, o.probeAddr, o.pprofAddr
	concurrency, leaderElect, leaderNS, serving, zapOpts := o.concurrency, o.leaderElect, o.leaderNS, o.serving, o.zap
	if concurrency < 1 {
		fmt.Fprintf(os.Stderr, "controller: --concurrent-reconciles=%d: want 1 or more\n", concurrency)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("controller")

	raw, err := os.ReadFile(configPath)
	missing := errors.Is(err, fs.ErrNotExist)
	switch {
	case missing:
		// The install does not ship the configuration (re-applying it
		// must never overwrite the operator's): until the operator
		// creates it, nothing is mapped.
		raw = nil
	case err != nil:
		fmt.Fprintln(os.Stderr, "controller: reading configuration:", err)
		os.Exit(2)
	}
	lbTypes := drivers.New()
	cfg, err := config.Parse(raw, lbTypes)
	if err != nil {
		fmt.Fprintf(os.Stderr, "controller: %s: %v\n", configPath, err)
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
	for _, w := range cfg.Warnings() {
		log.Info("warning: "+w, "config", configPath)
	}
	if missing {
		log.Info("no configuration file yet: no load balancer is configured, nothing is mapped until the operator writes it (docs/install.md, \"Configure the load balancers\"); it is read again every 5s", "config", configPath)
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   reconcile.CacheOptions(),
		Metrics:                 serving.Metrics(metricsAddr),
		HealthProbeBindAddress:  probeAddr,
		PprofBindAddress:        pprofAddr,
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
	if err := metrics.Registry.Register(version.BuildInfo("controller")); err != nil {
		log.Error(err, "registering build_info")
		os.Exit(1)
	}
	m, err := reconcile.NewMetrics(metrics.Registry)
	if err != nil {
		log.Error(err, "registering metrics")
		os.Exit(1)
	}
	r := &reconcile.Reconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Config:      cfg,
		Drivers:     lbTypes,
		InstanceLog: log.WithName("instances"),
		Recorder:    mgr.GetEventRecorder("stickydrain-controller"),
		Metrics:     m,

		Concurrency: concurrency,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		log.Error(err, "setting up the controller")
		os.Exit(1)
	}
	// A changed configuration file is validated; a bad one is refused and
	// the running configuration kept.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		refusal := "" // what the last refused change would have taken
		config.Watch(ctx, configPath, raw, 5*time.Second, lbTypes, func(c *config.Config) bool {
			// A change that would take servers out of live upstreams is
			// refused: they leave when their pods go or their Service is
			// unmapped, not because a line of the configuration went.
			revs, err := r.Revoked(ctx, c)
			if err != nil {
				m.ConfigChange("error")
				log.Error(err, "checking the configuration change; trying again", "config", configPath)
				return false
			}
			if len(revs) > 0 {
				// Checked again every 5s: once the Services are unmapped
				// (or their pods gone) the change applies. Said once per
				// list of what it would take.
				what := make([]string, len(revs))
				for i, v := range revs {
					what[i] = v.String()
				}
				if said := strings.Join(what, "; "); said != refusal {
					refusal = said
					m.ConfigChange("revoking")
					log.Error(errors.New(said), "refusing configuration change: it would take servers out of live upstreams; keeping the running configuration, and applying the change once nothing it would take is live (unmap the Services first to take their servers out on purpose)", "config", configPath)
					r.RefuseRevocations(ctx, revs)
				}
				return false
			}
			refusal = ""
			if err := r.SetConfig(ctx, c); err != nil {
				m.ConfigChange("error")
				log.Error(err, "applying the configuration change; trying again", "config", configPath)
				return false
			}
			m.ConfigChange("applied")
			log.Info("configuration reloaded", "config", configPath, "loadBalancers", len(c.LoadBalancers))
			for _, w := range c.Warnings() {
				log.Info("warning: "+w, "config", configPath)
			}
			return true
		}, func(err error) {
			m.ConfigChange("invalid")
			log.Error(err, "refusing configuration change; keeping the running configuration", "config", configPath)
		})
		return nil
	})); err != nil {
		log.Error(err, "adding the configuration watcher")
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
