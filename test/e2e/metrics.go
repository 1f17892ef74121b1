package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stickydrain/stickydrain/test/framework"
)

// monitoredName is a metric name in a PromQL query of the shipped
// monitoring (the queries themselves are parsed by Prometheus' own parser
// in tools/dashboards and by promtool in manifests).
var monitoredName = regexp.MustCompile(`\bstickydrain_[a-z0-9_]+\b`)

// MonitoredMetrics are the metric names the shipped dashboard and alerts
// (manifests/monitoring) query, sorted.
func MonitoredMetrics() ([]string, error) {
	seen := map[string]bool{}
	for _, f := range []string{"dashboard.json", "prometheusrule.yaml"} {
		b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "manifests", "monitoring", f))
		if err != nil {
			return nil, err
		}
		for _, name := range monitoredName.FindAllString(string(b), -1) {
			seen[name] = true
		}
	}
	if len(seen) == 0 {
		return nil, errors.New("manifests/monitoring queries no stickydrain metric")
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// ExposedNames are the names of the samples in Prometheus text
// exposition body, read with Prometheus' own parser (a histogram's
// _bucket, _sum and _count each, a summary's _sum and _count).
func ExposedNames(body string) (map[string]bool, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("the metrics do not parse as Prometheus text: %w", err)
	}
	out := map[string]bool{}
	for name, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		out[name] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[name+"_sum"], out[name+"_count"] = true, true
		}
	}
	return out, nil
}

// monitoredMetricsExposed asserts that every metric the shipped dashboard
// and alerts query is exposed by the running binaries of env — the
// webhook and every controller replica (the leader's are the ones that
// count) — scraped as Prometheus does. Call it while a drain is under way:
// some series exist only then.
func monitoredMetricsExposed(ctx context.Context, t *testing.T, env *Env) {
	t.Helper()
	want, err := MonitoredMetrics()
	if err != nil {
		t.Fatal(err)
	}
	var ports []int
	if env.webhook != nil {
		ports = append(ports, env.webhook.MetricsPort)
	}
	env.ctlMu.Lock()
	for _, c := range env.Controllers {
		ports = append(ports, c.MetricsPort)
	}
	env.ctlMu.Unlock()
	if len(ports) < 2 {
		t.Fatalf("%d binaries to scrape; want the webhook and a controller", len(ports))
	}
	reader, err := framework.MetricsToken(ctx, env.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	exposed := map[string]bool{}
	for _, port := range ports {
		status, body, _, err := framework.Scrape(ctx, port, reader)
		if err != nil || status != http.StatusOK {
			t.Errorf("scrape of 127.0.0.1:%d: status %d, %v", port, status, err)
			continue
		}
		names, err := ExposedNames(body)
		if err != nil {
			t.Errorf("scrape of 127.0.0.1:%d: %v", port, err)
			continue
		}
		maps.Copy(exposed, names)
	}
	var missing []string
	for _, name := range want {
		if !exposed[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the dashboard or the alerts query %v, which no running binary exposes during a drain", missing)
	}
	t.Logf("%d metrics the dashboard and the alerts query, each exposed by the running binaries during the drain", len(want))
}
