package reconcile

import (
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/endpoints"
	"github.com/stickydrain/stickydrain/controller/tenancy"
)

// endpointEventsPerPass is how many refused endpoints of one Service get an
// EndpointNotAllowed Event each on one load balancer in one pass; one more
// Event counts the rest. Whoever writes the Service's EndpointSlices
// chooses how many endpoints there are; the Events API is shared.
const endpointEventsPerPass = 10

// endpointRefusals counts and reports the endpoints of one Service that
// one pass refuses on one load balancer: every one in the refusal metric,
// the first endpointEventsPerPass in an Event each, the rest in one Event
// at done. Refusals in the order of their addresses give the same
// endpoints an Event on every pass, so that each stays one series.
type endpointRefusals struct {
	r   *Reconciler
	svc *corev1.Service
	lb  string
	n   int
}

func (e *endpointRefusals) refuse(a netip.Addr, v tenancy.Verdict) {
	e.r.Metrics.refusals.WithLabelValues(e.lb, string(v.Reason)).Inc()
	e.n++
	if e.n > endpointEventsPerPass {
		return
	}
	e.r.Recorder.Eventf(e.svc, nil, corev1.EventTypeWarning, api.ReasonEndpointNotAllowed, action("Admit", a.String()+" on "+e.lb),
		"%s; it is not a server of load balancer %s", v.Message, e.lb)
}

// done records the Event that counts the refusals beyond the first
// endpointEventsPerPass. Its action does not change with the count, so
// that it is one series; its note is the first pass's.
func (e *endpointRefusals) done() {
	more := e.n - endpointEventsPerPass
	if more <= 0 {
		return
	}
	e.r.Recorder.Eventf(e.svc, nil, corev1.EventTypeWarning, api.ReasonEndpointNotAllowed, action("Admit", "more endpoints on "+e.lb),
		"%d more endpoints are not servers of load balancer %s; only the first %d refused (by address) get an Event each pass, stickydrain_controller_refusals_total counts every one",
		more, e.lb, endpointEventsPerPass)
}

// byAddress are the addresses of desired in order.
func byAddress(desired map[netip.AddrPort]endpoints.Endpoint) []netip.AddrPort {
	return slices.SortedFunc(maps.Keys(desired), netip.AddrPort.Compare)
}
