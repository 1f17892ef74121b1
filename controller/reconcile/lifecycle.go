package reconcile

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/plan"
)

// lifecycle is the Reconciler as the liveness Watcher sees it.
type lifecycle struct{ r *Reconciler }

// Instances lists every instance of every load balancer.
func (l lifecycle) Instances(ctx context.Context) (map[string][]backend.Instance, error) {
	cfg := l.r.cfg()
	out := make(map[string][]backend.Instance, len(cfg.LoadBalancers))
	for i := range cfg.LoadBalancers {
		insts, err := l.r.instancesOf(ctx, &cfg.LoadBalancers[i])
		if err != nil {
			return nil, err
		}
		out[cfg.LoadBalancers[i].Name] = insts
	}
	return out, nil
}

// Required lists the Services mapped onto lb, from the cache.
func (l lifecycle) Required(ctx context.Context, lb string) ([]string, error) {
	svcs, err := l.r.servicesOf(ctx, lb)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(svcs))
	for i, s := range svcs {
		out[i] = s.String()
	}
	return out, nil
}

// Renew queues every Service mapped onto lb.
func (l lifecycle) Renew(lb string, _ backend.Instance) {
	svcs, err := l.r.servicesOf(context.Background(), lb)
	if err != nil {
		return
	}
	for _, s := range svcs {
		l.r.renew <- event.GenericEvent{Object: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}}
	}
}

// servicesOf lists the Services whose annotation names load balancer lb
// and that are not being deleted.
func (r *Reconciler) servicesOf(ctx context.Context, lb string) ([]types.NamespacedName, error) {
	var list corev1.ServiceList
	if err := r.Client.List(ctx, &list, client.MatchingFields{indexLB: lb}); err != nil {
		return nil, fmt.Errorf("listing the Services mapped onto load balancer %s: %w", lb, err)
	}
	var out []types.NamespacedName
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out = append(out, client.ObjectKeyFromObject(&list.Items[i]))
		}
	}
	return out, nil
}

// markDone records that svc is done on every instance of lb that
// answered (ok): its upstreams there converged, or its mapping was refused
// and it asks nothing of lb. It then sets the marker of each instance that
// is filled now, at once rather than at the next probe.
func (r *Reconciler) markDone(ctx context.Context, svc types.NamespacedName, lb string, insts []backend.Instance, identities []string, ok []bool) {
	for i, inst := range insts {
		if ok[i] {
			r.liveness.Done(inst.ID(), identities[i], svc.String())
		}
	}
	r.watcher.Mark(ctx, lb, insts)
}

// doneRefused marks svc done on every instance of each load balancer its
// annotation names: a refused mapping must not keep a shared load
// balancer's fresh replicas out of rotation.
func (r *Reconciler) doneRefused(ctx context.Context, svc types.NamespacedName, annotation string) {
	lbs := map[string]bool{}
	for _, k := range upstreamKeys(annotation) {
		if lb, _, ok := strings.Cut(k, "/"); ok {
			lbs[lb] = true
		}
	}
	for name := range lbs {
		lb := r.lb(name)
		if lb == nil {
			continue
		}
		insts, err := r.instancesOf(ctx, lb)
		if err != nil {
			continue
		}
		ids := make([]string, len(insts))
		ok := make([]bool, len(insts))
		for i, inst := range insts {
			ids[i], ok[i] = r.liveness.Identity(inst.ID()), true
		}
		r.markDone(ctx, svc, name, insts, ids, ok)
	}
}

// doneOwned marks svc done, after a pass, on each instance where every one
// of its upstreams on that load balancer converged, and on every instance
// of a load balancer it names but owns nothing of (a conflict: it asks
// nothing of that load balancer).
func (r *Reconciler) doneOwned(ctx context.Context, svc types.NamespacedName, annotation string, owned []upstreamRef, outcomes [][]instanceOutcome) {
	type agg struct {
		inst     backend.Instance
		identity string
		ok       bool
	}
	byLB := map[string]map[string]*agg{}
	for i, u := range owned {
		m := byLB[u.LB]
		if m == nil {
			m = map[string]*agg{}
			byLB[u.LB] = m
		}
		for _, o := range outcomes[i] {
			a := m[o.inst.ID()]
			if a == nil {
				m[o.inst.ID()] = &agg{o.inst, o.identity, o.final}
				continue
			}
			a.ok = a.ok && o.final && a.identity == o.identity
		}
	}
	for lb, m := range byLB {
		var insts []backend.Instance
		var ids []string
		var ok []bool
		for _, a := range m {
			insts, ids, ok = append(insts, a.inst), append(ids, a.identity), append(ok, a.ok)
		}
		r.markDone(ctx, svc, lb, insts, ids, ok)
	}
	var refused []string
	for _, k := range upstreamKeys(annotation) {
		if lb, _, found := strings.Cut(k, "/"); found && byLB[lb] == nil {
			refused = append(refused, k)
		}
	}
	if len(refused) > 0 {
		r.doneRefused(ctx, svc, strings.Join(refused, ","))
	}
}

// checkLost warns, when an instance that held some of an upstream's
// servers after the last pass reads without any: everything the
// controller had set there was lost — an HAProxy restart, a reload
// without the saved state, NGINX Plus without its state file. The pass
// repairs it; the warning says how to keep them next time. held records
// what the pass leaves on the instance.
func (r *Reconciler) checkLost(ctx context.Context, svc *corev1.Service, lb *config.LoadBalancer, u upstreamRef,
	inst backend.Instance, cur, want map[netip.AddrPort]plan.State) {
	had := r.ledger.left(heldKey{inst.ID(), u}, len(want))
	if had == 0 || len(cur) > 0 || len(want) == 0 {
		return
	}
	hint := ""
	if d, ok := r.Drivers.Driver(lb.Type); ok {
		hint = d.LostStateHint()
	}
	r.Metrics.stateLost.WithLabelValues(u.LB).Inc()
	logf.FromContext(ctx).Info("load-balancer instance lost every server of the upstream (a restart or reload); refilling it", "upstream", u.String(),
		"instance", inst.ID(), "servers", len(want), "hint", hint)
	if svc != nil {
		r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, api.ReasonStateLost, "Repair",
			"instance %s of %s came back from a restart or reload without any of upstream %s's %d servers; refilling it. To keep them: %s",
			inst.ID(), u.LB, u.Upstream, len(want), hint)
	}
}
