// Package version is what a stickydrain binary was built from, set at link
// time (make images, make build: -X), and the build_info metric that says
// it.
package version

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the release (or `git describe`); "dev" when not set.
var Version = "dev"

// Revision is the commit; when not set at link time, the one Go recorded
// (vcs.revision), else "unknown".
var Revision = ""

// Rev is Revision, or what the Go toolchain recorded.
func Rev() string {
	if Revision != "" {
		return Revision
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// BuildInfo is the gauge stickydrain_build_info{component, version,
// revision, goversion}, always 1: a dashboard's or an alert's way to see
// which build runs where (and a mixed rollout).
func BuildInfo(component string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "stickydrain_build_info",
		Help: "Which build of a stickydrain component runs: 1, labelled with the component, version, revision and Go version.",
		ConstLabels: prometheus.Labels{
			"component": component, "version": Version, "revision": Rev(), "goversion": runtime.Version(),
		},
	}, func() float64 { return 1 })
}
