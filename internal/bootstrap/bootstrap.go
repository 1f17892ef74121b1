// Package bootstrap is what the webhook and the controller set up the same
// way: the logger, Go's memory limit, the scheme, the manager (metrics,
// probes, pprof, leader election), build_info and the health checks; and
// the exit status of their Run.
package bootstrap

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/stickydrain/stickydrain/internal/serving"
	"github.com/stickydrain/stickydrain/internal/version"
)

// Options are the settings the webhook and the controller share.
type Options struct {
	// Component names the binary: its logger, its build_info and its
	// leader-election Lease (stickydrain-<component>).
	Component string
	// Zap are the logging flags.
	Zap zap.Options
	// MetricsAddr, ProbeAddr and PprofAddr are where the metrics, /healthz
	// and /readyz, and Go's profiles are served ("0" or "" disables one).
	MetricsAddr, ProbeAddr, PprofAddr string
	// Serving hardens the metrics endpoint.
	Serving serving.Flags
	// LeaderElect elects a leader in LeaderElectionNamespace (default: the
	// pod's own).
	LeaderElect             bool
	LeaderElectionNamespace string
	// Tune sets the manager's options that are the binary's own (the
	// webhook server, the cache).
	Tune func(*ctrl.Options)
	// RestConfig is the API server's; nil: the kubeconfig or in-cluster
	// configuration, as controller-runtime finds them.
	RestConfig *rest.Config
}

// Manager sets the logger up and returns the manager with build_info
// registered and /healthz answering, and the component's logger. The
// caller adds its readiness check and its runnables, then starts it.
func Manager(o Options) (ctrl.Manager, logr.Logger, error) {
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.Zap)))
	log := ctrl.Log.WithName(o.Component)
	setMemoryLimit(log, memlimit.FromCgroup)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, log, fmt.Errorf("building the scheme: %w", err)
	}
	restCfg := o.RestConfig
	if restCfg == nil {
		var err error
		if restCfg, err = ctrl.GetConfig(); err != nil {
			return nil, log, fmt.Errorf("loading the kubeconfig: %w", err)
		}
	}
	mo := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 o.Serving.Metrics(o.MetricsAddr),
		HealthProbeBindAddress:  o.ProbeAddr,
		PprofBindAddress:        o.PprofAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "stickydrain-" + o.Component,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// A new leader takes over without waiting for the old lease to
		// expire.
		LeaderElectionReleaseOnCancel: true,
	}
	if o.Tune != nil {
		o.Tune(&mo)
	}
	mgr, err := ctrl.NewManager(restCfg, mo)
	if err != nil {
		return nil, log, fmt.Errorf("creating the manager: %w", err)
	}
	if err := metrics.Registry.Register(version.BuildInfo(o.Component)); err != nil {
		return nil, log, fmt.Errorf("registering build_info: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, log, fmt.Errorf("adding /healthz: %w", err)
	}
	return mgr, log, nil
}

// MemoryRatio is the share of the container's memory limit that Go's
// runtime is given as its soft limit: the rest is for what the runtime
// does not count (the binary's pages among them).
const MemoryRatio = 0.9

// setMemoryLimit gives Go's runtime a soft memory limit (GOMEMLIMIT) of
// MemoryRatio of the limit provider reads (the container's, from its
// cgroup), so that the collector works harder as the heap nears it instead
// of letting the heap grow to twice what is live (GOGC=100) into the
// kernel's OOM killer: the controller caches every Pod of the cluster,
// about 1.6 KiB each (bench/results.md). GOMEMLIMIT in the environment
// wins, as AUTOMEMLIMIT=off or another ratio does (automemlimit's
// settings); without a limit nothing changes. What it did is logged.
func setMemoryLimit(log logr.Logger, provider memlimit.Provider) {
	// Errors are logged by Set itself, through log; the binary runs on
	// without a limit then.
	_, _ = memlimit.Set(memlimit.WithProvider(provider), memlimit.WithRatio(MemoryRatio),
		memlimit.WithLogger(slog.New(logr.ToSlogHandler(log))))
}

// UsageError is a mistake of the command line or the configuration: the
// binary exits 2, as with a bad flag.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usage marks err as the operator's mistake (exit status 2).
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return UsageError{Err: err}
}

// Exit is the exit status of a Run that returned err, which it prints to
// stderr prefixed by the component: 0 without an error, 2 for a
// UsageError, 1 otherwise.
func Exit(component string, err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", component, err)
	if errors.As(err, new(UsageError)) {
		return 2
	}
	return 1
}
