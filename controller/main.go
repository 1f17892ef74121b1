// Command controller keeps load-balancer upstreams in step with the
// EndpointSlices of annotated Services, draining the servers of
// terminating pods on every load-balancer instance.
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/drivers"
	"github.com/stickydrain/stickydrain/controller/envoygateway"
	"github.com/stickydrain/stickydrain/controller/reconcile"
	"github.com/stickydrain/stickydrain/internal/bootstrap"
	"github.com/stickydrain/stickydrain/internal/cmdline"
	"github.com/stickydrain/stickydrain/internal/kubeflags"
	"github.com/stickydrain/stickydrain/internal/serving"
)

const synopsis = `controller [flags]

Keeps load-balancer upstreams in step with the EndpointSlices of the
Services annotated stickydrain.io/upstreams: ready endpoints active,
terminating ones draining, gone ones removed, on every instance of every
load balancer of --config.`

// Options are the controller's command-line settings.
type Options struct {
	configPath  string
	metricsAddr string
	probeAddr   string
	pprofAddr   string
	concurrency int
	leaderElect bool
	leaderNS    string
	appliedCM   string
	serving     serving.Flags
	zap         zap.Options
}

// flagSet binds every flag of the controller to o.
func flagSet(o *Options) *pflag.FlagSet {
	fs := cmdline.New("controller")
	fs.StringVar(&o.configPath, "config", "/etc/stickydrain/controller.yaml", "configuration `file`: the load balancers and their instances")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "`address` of the metrics endpoint; 0 disables it")
	o.serving.Bind(fs)
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "`address` of /healthz and /readyz")
	fs.IntVar(&o.concurrency, "concurrent-reconciles", 8, "how many Services are brought in step at once (a burst of drains across Services waits for no other); also the most passes, so Runtime API connections, open at once on one load-balancer instance: keep it under HAProxy's stats socket maxconn (10 by default) less two")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "`address` of Go's /debug/pprof profiles, for diagnosis; empty (the default) disables them")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader, so that of several replicas one acts at a time")
	fs.StringVar(&o.leaderNS, "leader-election-namespace", "", "`namespace` of the leader-election Lease (default: the pod's own)")
	fs.StringVar(&o.appliedCM, "applied-configmap", "stickydrain-controller-applied", "`name` of the ConfigMap, in the leader-election namespace (default: the pod's own), where the controller keeps the configuration it last applied: a restarted controller starts on it and holds a changed file that would take servers out of live upstreams, as a running one does; empty: start on the file as it is")
	fs.AddGoFlagSet(kubeflags.GoFlags(&o.zap))
	return fs
}

func main() {
	var o Options
	if status, ok := cmdline.Parse(flagSet(&o), synopsis, os.Args[1:], os.Stdout, os.Stderr); !ok {
		os.Exit(status)
	}
	os.Exit(bootstrap.Exit("controller", Run(ctrl.SetupSignalHandler(), o), os.Stderr))
}

// Run keeps the upstreams in step until ctx ends. A mistake in the
// settings or the configuration file is a bootstrap.UsageError.
func Run(ctx context.Context, o Options) error {
	if o.concurrency < 1 {
		return bootstrap.Usage(fmt.Errorf("--concurrent-reconciles=%d: want 1 or more", o.concurrency))
	}
	if errs := validation.IsDNS1123Subdomain(o.appliedCM); o.appliedCM != "" && len(errs) > 0 {
		return bootstrap.Usage(fmt.Errorf("--applied-configmap=%q: %s; want a ConfigMap's name, or empty to keep none", o.appliedCM, strings.Join(errs, "; ")))
	}
	raw, err := os.ReadFile(o.configPath)
	missing := errors.Is(err, fs.ErrNotExist)
	switch {
	case missing:
		// The install does not ship the configuration (re-applying it
		// must never overwrite the operator's): until the operator
		// creates it, nothing is mapped.
		raw = nil
	case err != nil:
		return bootstrap.Usage(fmt.Errorf("reading configuration: %w", err))
	}
	lbTypes := drivers.New()
	cfg, err := config.Parse(raw, lbTypes)
	if err != nil {
		return bootstrap.Usage(fmt.Errorf("%s: %w", o.configPath, err))
	}
	mgr, log, err := bootstrap.Manager(bootstrap.Options{
		Component: "controller", Zap: o.zap,
		MetricsAddr: o.metricsAddr, ProbeAddr: o.probeAddr, PprofAddr: o.pprofAddr, Serving: o.serving,
		LeaderElect: o.leaderElect, LeaderElectionNamespace: o.leaderNS,
		Tune: func(mo *ctrl.Options) { mo.Cache = reconcile.CacheOptions() },
	})
	if err != nil {
		return err
	}
	store := newAppliedStore(o, mgr)
	if store == nil {
		log.Info("no namespace to keep the applied configuration in (--leader-election-namespace, POD_NAMESPACE): a restart applies the configuration file as it is")
	}
	running := raw  // what the controller starts on
	legacy := false // and whether it reads with the legacy defaults
	watched := raw  // what the file is checked against
	if store != nil {
		kept, keptLegacy, err := store.load(ctx)
		switch {
		case err != nil:
			log.Error(err, "starting on the configuration file as it is")
		case kept != nil && (keptLegacy || !bytes.Equal(kept, raw)):
			c, err := config.Parse(kept, lbTypes)
			if err != nil {
				log.Error(err, "the last applied configuration no longer parses; starting on the configuration file as it is", "configMap", store.key.String())
				break
			}
			cfg, running, watched = c, kept, kept
			if keptLegacy {
				// Kept by a controller from before listedUpstreamsOnly
				// defaulted to true: it ran every backend as the
				// controller's. Start on that, and check the file, read
				// as today, as a change (even the same text): a Service
				// in an upstream it does not list keeps its servers, held.
				cfg, legacy, watched = c.WithLegacyDefaults(), true, nil
			}
			log.Info("starting on the configuration last applied; the file is checked as a change: applied if it takes no server out of a live upstream, held otherwise", "configMap", store.key.String(), "config", o.configPath, "legacyDefaults", legacy)
		}
	}
	for _, w := range cfg.Warnings() {
		log.Info("warning: "+w, "config", o.configPath)
	}
	if missing {
		log.Info("no configuration file yet: no load balancer is configured, nothing is mapped until the operator writes it (docs/install.md, \"Configure the load balancers\"); it is read again every 5s", "config", o.configPath)
	}
	m, err := reconcile.NewMetrics(metrics.Registry)
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	r := &reconcile.Reconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Config:      cfg,
		Drivers:     lbTypes,
		InstanceLog: log.WithName("instances"),
		Recorder:    mgr.GetEventRecorder("stickydrain-controller"),
		Metrics:     m,

		Concurrency: o.concurrency,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the controller: %w", err)
	}
	var eg *envoygateway.Reconciler
	if envoygateway.Enabled(cfg) {
		em, err := envoygateway.NewMetrics(metrics.Registry)
		if err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
		eg = &envoygateway.Reconciler{Client: mgr.GetClient(), Config: cfg, Recorder: mgr.GetEventRecorder("stickydrain-controller"), Metrics: em}
		if err := eg.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the Envoy Gateway integration: %w", err)
		}
	}
	// A changed configuration file is validated; a bad one is refused and
	// the running configuration kept.
	w := &configWatcher{path: o.configPath, loaded: running, watched: watched, legacy: legacy, types: lbTypes, r: r, eg: eg, m: m, log: log, store: store, elected: mgr.Elected()}
	if err := mgr.Add(w); err != nil {
		return fmt.Errorf("adding the configuration watcher: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding /readyz: %w", err)
	}
	log.Info("starting", "config", o.configPath, "loadBalancers", len(cfg.LoadBalancers), "resync", cfg.Resync.Duration.String())
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("stopped: %w", err)
	}
	return nil
}

// configWatcher applies changes of the configuration file.
type configWatcher struct {
	path   string
	loaded []byte
	// watched is what the file is checked against at first: loaded, or
	// nil to check it whatever it holds.
	watched []byte
	types   config.TypeChecker
	r       *reconcile.Reconciler
	// eg is the Envoy Gateway integration, nil when the configuration at
	// start had none.
	eg  *envoygateway.Reconciler
	m   *reconcile.Metrics
	log logr.Logger
	// store keeps what is applied for the next start; nil: nowhere.
	store *appliedStore
	// elected is closed once this replica leads.
	elected <-chan struct{}
	// refusal is what the last refused change would have taken; evented,
	// the last one reported in Events (by the leader).
	refusal, evented string

	mu      sync.Mutex // serializes keep
	applied []byte     // the content running
	legacy  bool       // read with the legacy defaults (config.WithLegacyDefaults)
}

// NeedLeaderElection is false: every replica follows the file, so that a
// standby takes the lead on the configuration the leader ran, not the one
// it started on. Only the leader keeps what it applies and reports refused
// changes in Events.
func (w *configWatcher) NeedLeaderElection() bool { return false }

func (w *configWatcher) leading() bool {
	select {
	case <-w.elected:
		return true
	default:
		return false
	}
}

// newAppliedStore is where o says the applied configuration is kept, nil
// when nowhere.
func newAppliedStore(o Options, mgr manager.Manager) *appliedStore {
	ns := cmp.Or(o.leaderNS, os.Getenv("POD_NAMESPACE"))
	if o.appliedCM == "" || ns == "" {
		return nil
	}
	return &appliedStore{reader: mgr.GetAPIReader(), writer: mgr.GetClient(), key: client.ObjectKey{Namespace: ns, Name: o.appliedCM}}
}

// setApplied records raw as the content running; the leader keeps it.
func (w *configWatcher) setApplied(ctx context.Context, raw []byte, legacy bool) {
	w.mu.Lock()
	w.applied, w.legacy = raw, legacy
	w.mu.Unlock()
	if w.leading() {
		w.keep(ctx)
	}
}

// keep saves the content running as the configuration last applied.
func (w *configWatcher) keep(ctx context.Context) {
	if w.store == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.store.save(ctx, w.applied, w.legacy); err != nil {
		w.log.Error(err, "a restart will check the configuration file against an older configuration")
	}
}

// Start follows the configuration file until ctx ends.
func (w *configWatcher) Start(ctx context.Context) error {
	w.setApplied(ctx, w.loaded, w.legacy)
	// Once leading, keep what runs (the first start, an upgrade from a
	// controller that kept nothing, a standby's view of the leader's).
	go func() {
		select {
		case <-w.elected:
			w.keep(ctx)
		case <-ctx.Done():
		}
	}()
	config.Watch(ctx, w.path, w.watched, 5*time.Second, w.types, func(c *config.Config, raw []byte) bool {
		if !w.apply(ctx, c) {
			return false
		}
		w.setApplied(ctx, raw, false)
		return true
	}, func(err error) {
		w.m.ConfigChange("invalid")
		w.m.ConfigHeld("invalid")
		w.log.Error(err, "refusing configuration change; keeping the running configuration", "config", w.path)
	}, func() {
		w.refusal, w.evented = "", ""
		w.m.ConfigHeld("")
		w.log.Info("the configuration file is back to the running configuration: no change is held", "config", w.path)
	})
	return nil
}

// set makes c the running configuration, of the reconciler and of the
// Envoy Gateway integration.
func (w *configWatcher) set(ctx context.Context, c *config.Config) error {
	if err := w.r.SetConfig(ctx, c); err != nil {
		return err
	}
	switch {
	case w.eg != nil:
		if err := w.eg.SetConfig(ctx, c); err != nil {
			return fmt.Errorf("the Envoy Gateway integration: %w", err)
		}
	case envoygateway.Enabled(c):
		w.log.Error(errors.New("envoyGateway was added after start"), "restart the controller to start the Envoy Gateway integration (it watches Gateway API objects only when the configuration at start lists gateways); the rest of the change applies", "config", w.path)
	}
	return nil
}

// applyHeld applies c but for what revs would take out of live upstreams,
// which keeps its running rules (reconcile.Hold). It reports false, having
// changed nothing, when the result would still take servers out (the
// whole change then waits). Applied again only when it differs from what
// runs: each application requeues every Service.
func (w *configWatcher) applyHeld(ctx context.Context, c *config.Config, revs []reconcile.Revocation) (bool, error) {
	running := w.r.Running()
	held := reconcile.Hold(running, c, revs)
	if err := held.Validate(w.types); err != nil {
		w.log.V(1).Info("the configuration change cannot be held in part", "reason", err.Error())
		return false, nil
	}
	left, err := w.r.Revoked(ctx, held)
	if err != nil {
		return false, err
	}
	if len(left) > 0 {
		return false, nil
	}
	if reflect.DeepEqual(held, running) {
		return true, nil
	}
	return true, w.set(ctx, held)
}

// apply applies a valid change, or holds it while it would take servers
// out of live upstreams: they leave when their pods go or their Service
// is unmapped, not because a line of the configuration went. It reports
// whether the change is applied (false: held, to be tried again).
func (w *configWatcher) apply(ctx context.Context, c *config.Config) bool {
	revs, err := w.r.Revoked(ctx, c)
	if err != nil {
		w.m.ConfigChange("error")
		w.log.Error(err, "checking the configuration change; trying again", "config", w.path)
		return false
	}
	if len(revs) > 0 {
		// Checked again every 5s: once the Services are unmapped (or their
		// pods gone) the change applies whole. Until then the rest of it
		// applies, with what it would take kept from the running
		// configuration (reconcile.Hold) — unless that cannot be told
		// apart, and the whole change waits. Said once per list of what
		// it would take.
		what := make([]string, len(revs))
		for i, v := range revs {
			what[i] = v.String()
		}
		w.m.ConfigHeld("revoking")
		partial, err := w.applyHeld(ctx, c, revs)
		if err != nil {
			w.m.ConfigChange("error")
			w.log.Error(err, "applying the rest of the configuration change; trying again", "config", w.path)
			return false
		}
		said := strings.Join(what, "; ")
		if said != w.refusal {
			w.refusal = said
			w.m.ConfigChange("revoking")
			if partial {
				w.log.Error(errors.New(said), "holding part of the configuration change: it would take servers out of live upstreams; those keep their running rules, and the rest of the change applies now; the held part applies once nothing it would take is live (unmap the Services first to take their servers out on purpose)", "config", w.path)
			} else {
				w.log.Error(errors.New(said), "refusing configuration change: it would take servers out of live upstreams; keeping the running configuration, and applying the change once nothing it would take is live (unmap the Services first to take their servers out on purpose)", "config", w.path)
			}
		}
		if said != w.evented && w.leading() {
			w.evented = said
			w.r.RefuseRevocations(ctx, revs)
		}
		return false
	}
	w.refusal, w.evented = "", ""
	if err := w.set(ctx, c); err != nil {
		w.m.ConfigChange("error")
		w.log.Error(err, "applying the configuration change; trying again", "config", w.path)
		return false
	}
	w.m.ConfigChange("applied")
	w.m.ConfigHeld("")
	w.log.Info("configuration reloaded", "config", w.path, "loadBalancers", len(c.LoadBalancers))
	for _, warning := range c.Warnings() {
		w.log.Info("warning: "+warning, "config", w.path)
	}
	return true
}
