// Command dashboards writes stickydrain's Grafana dashboard, written as
// code with Grafana's foundation SDK: manifests/monitoring/dashboard.json
// (the kustomize install's ConfigMap for Grafana's sidecar) and the same
// JSON in charts/stickydrain/files/dashboard.json (the chart's). `make
// docs` runs it; a test fails when the files differ from what it writes,
// when a query does not parse as PromQL, or names a metric no binary
// exposes.
//
//	go run . --root ../..
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Outputs are where the dashboard goes, relative to the repository root.
var Outputs = []string{
	filepath.Join("manifests", "monitoring", "dashboard.json"),
	filepath.Join("charts", "stickydrain", "files", "dashboard.json"),
}

func main() {
	root := flag.String("root", "../..", "the repository's `directory`")
	flag.Parse()
	b, err := Render()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboards:", err)
		os.Exit(1)
	}
	for _, out := range Outputs {
		if err := os.WriteFile(filepath.Join(*root, out), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "dashboards:", err)
			os.Exit(1)
		}
	}
}

// Render is the dashboard's JSON.
func Render() ([]byte, error) {
	d, err := Dashboard().Build()
	if err != nil {
		return nil, fmt.Errorf("building the dashboard: %w", err)
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the dashboard: %w", err)
	}
	return append(b, '\n'), nil
}

func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(expr).LegendFormat(legend).
		Datasource(dashboard.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")})
}

func series(title, unit string, targets ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Unit(unit).Min(0).Height(8).Span(12)
	for _, t := range targets {
		p = p.WithTarget(t)
	}
	return p
}

// Dashboard is what an operator watches during a rollout: admissions by
// result, drains in progress and their age, servers by state per
// upstream, load-balancer errors, drain propagation delay.
func Dashboard() *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder("stickydrain").
		Uid("stickydrain").
		Tags([]string{"stickydrain"}).
		Refresh("30s").
		Time("now-3h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithRow(dashboard.NewRowBuilder("Drains")).
		WithPanel(stat.NewPanelBuilder().Title("Servers draining").Height(4).Span(6).
			WithTarget(query(`sum(stickydrain_controller_servers{state="draining"})`, "draining"))).
		WithPanel(stat.NewPanelBuilder().Title("Oldest drain").Unit("s").Height(4).Span(6).
			WithTarget(query(`max(time() - stickydrain_controller_oldest_drain_start_timestamp_seconds)`, "age"))).
		WithPanel(stat.NewPanelBuilder().Title("Load-balancer errors (1h)").Height(4).Span(6).
			WithTarget(query(`sum(increase(stickydrain_controller_lb_errors_total[1h]))`, "errors"))).
		WithPanel(stat.NewPanelBuilder().Title("Admission errors (1h)").Height(4).Span(6).
			WithTarget(query(`sum(increase(stickydrain_webhook_admissions_total{result="error"}[1h]))`, "errors"))).
		WithPanel(series("Servers by state, per upstream", "short",
			query(`sum by (lb, upstream, state) (stickydrain_controller_servers)`, "{{lb}}/{{upstream}} {{state}}"))).
		WithPanel(series("HAProxy server-template slots in use, per upstream", "percentunit",
			query(`stickydrain_controller_slots_used / stickydrain_controller_slots`, "{{lb}}/{{upstream}}"))).
		WithPanel(series("Drain age, per upstream", "s",
			query(`time() - stickydrain_controller_oldest_drain_start_timestamp_seconds`, "{{lb}}/{{upstream}}"))).
		WithPanel(series("Drain propagation delay (terminating seen → drained on an instance)", "s",
			query(`histogram_quantile(0.5, sum by (lb, le) (rate(stickydrain_controller_drain_delay_seconds_bucket[$__rate_interval])))`, "{{lb}} p50"),
			query(`histogram_quantile(0.99, sum by (lb, le) (rate(stickydrain_controller_drain_delay_seconds_bucket[$__rate_interval])))`, "{{lb}} p99"))).
		WithPanel(series("Load-balancer errors", "ops",
			query(`sum by (lb, call) (rate(stickydrain_controller_lb_errors_total[$__rate_interval]))`, "{{lb}} {{call}}"),
			query(`sum by (lb, result) (rate(stickydrain_controller_instance_probes_total{result!="ok"}[$__rate_interval]))`, "{{lb}} probe {{result}}"))).
		WithRow(dashboard.NewRowBuilder("Admissions")).
		WithPanel(series("Admissions by result", "ops",
			query(`sum by (webhook, result) (rate(stickydrain_webhook_admissions_total[$__rate_interval]))`, "{{webhook}} {{result}}"))).
		WithPanel(series("Admission latency", "s",
			query(`histogram_quantile(0.99, sum by (webhook, le) (rate(stickydrain_webhook_admission_duration_seconds_bucket[$__rate_interval])))`, "{{webhook}} p99"))).
		WithRow(dashboard.NewRowBuilder("Controller")).
		WithPanel(series("Server changes applied", "ops",
			query(`sum by (backend, op, state, result) (rate(stickydrain_controller_changes_total[$__rate_interval]))`, "{{backend}} {{op}} {{state}} {{result}}"))).
		WithPanel(series("Configuration changes and refusals", "short",
			query(`sum by (result) (increase(stickydrain_controller_config_changes_total[$__rate_interval]))`, "config {{result}}"),
			query(`sum by (lb, reason) (increase(stickydrain_controller_refusals_total[$__rate_interval]))`, "refused {{lb}} {{reason}}")))
}
