package reconcile

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/tenancy"
)

// Metrics of the controller.
type Metrics struct {
	servers    *prometheus.GaugeVec
	changes    *prometheus.CounterVec
	lbErrors   *prometheus.CounterVec
	drainDelay *prometheus.HistogramVec
	probes     *prometheus.CounterVec
	marks      *prometheus.CounterVec
	stateLost  *prometheus.CounterVec
	refusals   *prometheus.CounterVec
	configs    *prometheus.CounterVec
	configHeld *prometheus.GaugeVec
	// oldestDrain is when the oldest drain of each upstream began; absent
	// while none drains.
	oldestDrain *prometheus.GaugeVec
	// drainDeadline is when the first grace period of an upstream's
	// draining pods ends; absent while none drains.
	drainDeadline *prometheus.GaugeVec
	// slots and slotsUsed: the upstream's server slots on its instances
	// (HAProxy server-template): the fewest any instance has, the most any
	// uses.
	slots, slotsUsed *prometheus.GaugeVec
}

// NewMetrics registers the controller's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		servers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stickydrain_controller_servers",
			Help: "Desired servers of each mapped upstream that an instance of its load balancer has, by state (active, draining, down).",
		}, []string{"lb", "upstream", "state"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stickydrain_controller_changes_total",
			Help: "Server changes applied to load-balancer instances, by backend type, op (add, set, remove), state and result.",
		}, []string{"backend", "op", "state", "result"}),
		lbErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stickydrain_controller_lb_errors_total",
			Help: "Failed calls to load-balancer instances, by load balancer and call (read, apply, discover; cannot-hold: the instance answered that it has no such upstream or no room for another server).",
		}, []string{"lb", "call"}),
		drainDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "stickydrain_controller_drain_delay_seconds",
			Help:    "Time from the controller first seeing an endpoint terminating to its drain applied on an instance.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"lb"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stickydrain_controller_instance_probes_total",
			Help: "Probes of load-balancer instances for a new process, by load balancer and result (ok, new: a restart, reload or new replica, error).",
		}, []string{"lb", "result"}),
		marks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stickydrain_controller_instance_filled_total",
			Help: "Readiness markers set on load-balancer processes once they held every server, by load balancer.",
		}, []string{"lb"}),
		stateLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stickydrain_controller_instance_state_lost_total",
			Help: "Upstreams found without any server on a load-balancer process that replaced another (a restart, a reload without saved state, NGINX Plus without its state file), by load balancer; each was refilled.",
		}, []string{"lb"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stickydrain_controller_refusals_total",
			Help: "Mappings and endpoints refused by the tenancy rules, by load balancer and reason (NoRule, NamespaceNotAllowed, Pinned, UnknownLoadBalancer, NotListed, OutsideCIDRs, WithoutPod, PodInOtherNamespace, NotPodAddress, PodFinished, PodNotVerified); counted on each pass that refuses them.",
		}, []string{"lb", "reason"}),
		configs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stickydrain_controller_config_changes_total",
			Help: "Changes of the configuration file seen, by result: applied; invalid (refused, it does not parse or validate); revoking (refused, it would take servers out of live upstreams); error (not checked, tried again).",
		}, []string{"result"}),
		configHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stickydrain_controller_config_held",
			Help: "1 while a change of the configuration file is refused and the controller runs the previous configuration, by reason (invalid: it does not parse or validate; revoking: it would take servers out of live upstreams, and applies once nothing it would take is live); 0 otherwise.",
		}, []string{"reason"}),
		oldestDrain: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stickydrain_controller_oldest_drain_start_timestamp_seconds",
			Help: "When the oldest drain under way on each mapped upstream began (the controller first saw its endpoint terminating), as a Unix time; absent while none drains. time() minus it is the drain's age.",
		}, []string{"lb", "upstream"}),
		drainDeadline: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stickydrain_controller_drain_deadline_timestamp_seconds",
			Help: "When the grace period of the first of each mapped upstream's draining pods to run out ends (its deletionTimestamp: max-wait + min-wait + shutdown-margin after its deletion), as a Unix time; absent while none drains. time() past it is a drain that outlived its own max-wait: a pod stuck terminating.",
		}, []string{"lb", "upstream"}),
		slots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stickydrain_controller_slots",
			Help: "Server slots of each mapped upstream on load balancers that have a fixed number (HAProxy server-template), the fewest of its instances, as last read.",
		}, []string{"lb", "upstream"}),
		slotsUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stickydrain_controller_slots_used",
			Help: "Server slots of each mapped upstream holding a server (active, draining or down), the most of its instances, as last read; a new pod finds no slot once it reaches stickydrain_controller_slots.",
		}, []string{"lb", "upstream"}),
	}
	for _, c := range []prometheus.Collector{m.servers, m.changes, m.lbErrors, m.drainDelay, m.probes, m.marks, m.stateLost, m.refusals, m.configs, m.configHeld, m.oldestDrain, m.drainDeadline, m.slots, m.slotsUsed} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering controller metrics: %w", err)
		}
	}
	// Every result at 0 from the start: a series born at 1 has no
	// increase() and no rate() until it counts again, and the alert on a
	// refused configuration would miss the first refusal.
	for _, result := range configResults() {
		m.configs.WithLabelValues(result)
	}
	m.ConfigHeld("")
	return m, nil
}

// configResults are the results a change of the configuration file is
// counted by (ConfigChange).
func configResults() []string { return []string{"applied", "invalid", "revoking", "error"} }

// loadBalancers starts the counters of cfg's load balancers at 0 (lb
// errors by call, refusals by reason), so that the first error or refusal
// is an increase an alert and a dashboard see; a load balancer of was (the
// configuration before, nil at the start) no longer in cfg loses its
// series.
func (m *Metrics) loadBalancers(was, cfg *config.Config) {
	names := map[string]bool{}
	for _, lb := range cfg.LoadBalancers {
		names[lb.Name] = true
		for _, call := range []string{"read", "apply", "discover", "cannot-hold"} {
			m.lbErrors.WithLabelValues(lb.Name, call)
		}
		for _, reason := range tenancy.Reasons() {
			if reason != tenancy.UnknownLoadBalancer { // never counted under a known name
				m.refusals.WithLabelValues(lb.Name, string(reason))
			}
		}
	}
	if was == nil {
		return
	}
	for _, lb := range was.LoadBalancers {
		if !names[lb.Name] {
			m.lbErrors.DeletePartialMatch(prometheus.Labels{"lb": lb.Name})
			m.refusals.DeletePartialMatch(prometheus.Labels{"lb": lb.Name})
		}
	}
}

// ConfigChange counts a change of the configuration file by its result:
// applied, invalid, revoking or error.
func (m *Metrics) ConfigChange(result string) { m.configs.WithLabelValues(result).Inc() }

// ConfigHeld says why a change of the configuration file is held
// (invalid, revoking), or that none is ("").
func (m *Metrics) ConfigHeld(reason string) {
	for _, r := range []string{"invalid", "revoking"} {
		v := 0.0
		if r == reason {
			v = 1
		}
		m.configHeld.WithLabelValues(r).Set(v)
	}
}

// forget drops the gauges of an upstream no Service maps any more.
func (m *Metrics) forget(u upstreamRef) {
	m.servers.DeletePartialMatch(prometheus.Labels{"lb": u.LB, "upstream": u.Upstream})
	for _, g := range []*prometheus.GaugeVec{m.oldestDrain, m.drainDeadline, m.slots, m.slotsUsed} {
		g.DeleteLabelValues(u.LB, u.Upstream)
	}
}
