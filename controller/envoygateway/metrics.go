package envoygateway

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/config"
)

// Metrics are the Envoy Gateway integration's metrics.
type Metrics struct {
	rules  *prometheus.GaugeVec
	writes *prometheus.CounterVec
}

// ruleOutcomes are the values of the rules gauge's outcome label.
var ruleOutcomes = []string{"kept", api.ReasonRouteNotAllowed, api.ReasonBackendNotOptedIn, api.ReasonActiveHealthCheck}

// writeResults are the values of the writes counter's result label.
var writeResults = []string{"created", "updated", "deleted", "conflict", "error"}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		rules: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stickydrain_controller_envoy_gateway_rules",
			Help: "Sticky route rules (sessionPersistence) on each configured Gateway, by outcome: kept (sessions stay on draining pods), or why not (RouteNotAllowed, BackendNotOptedIn, ActiveHealthCheck — kept anyway with activeHealthChecks: allow counts as kept).",
		}, []string{"gateway", "outcome"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stickydrain_controller_envoy_gateway_policy_writes_total",
			Help: "Writes of the EnvoyPatchPolicy kept for each configured Gateway, by result: created, updated, deleted, conflict (a policy of that name the controller did not create), error.",
		}, []string{"gateway", "result"}),
	}
	for _, c := range []prometheus.Collector{m.rules, m.writes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering Envoy Gateway metrics: %w", err)
		}
	}
	return m, nil
}

// gateways starts every configured Gateway's series at 0 and drops those
// of Gateways no longer configured.
func (m *Metrics) gateways(was, now *config.Config) {
	keep := map[string]bool{}
	for _, k := range gatewayKeys(now) {
		keep[k.String()] = true
		for _, o := range ruleOutcomes {
			m.rules.WithLabelValues(k.String(), o)
		}
		for _, w := range writeResults {
			m.writes.WithLabelValues(k.String(), w)
		}
	}
	for _, k := range gatewayKeys(was) {
		if !keep[k.String()] {
			m.rules.DeletePartialMatch(prometheus.Labels{"gateway": k.String()})
			m.writes.DeletePartialMatch(prometheus.Labels{"gateway": k.String()})
		}
	}
}

// observe sets the rules gauge of one Gateway from a plan.
func (m *Metrics) observe(gw types.NamespacedName, outs []Outcome) {
	counts := map[string]int{}
	for _, o := range outs {
		if o.Kept {
			counts["kept"]++
		} else {
			counts[o.Reason]++
		}
	}
	for _, o := range ruleOutcomes {
		m.rules.WithLabelValues(gw.String(), o).Set(float64(counts[o]))
	}
}
