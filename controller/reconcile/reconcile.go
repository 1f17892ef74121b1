// Package reconcile keeps load-balancer upstreams in step with the
// EndpointSlices of the Services mapped onto them
// (stickydrain.io/upstreams: "<lb>/<upstream>[,…]"). It is level-triggered:
// every pass reads each instance's actual servers, plans the difference to
// the desired ones and applies it, each instance on its own.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/endpoints"
	"github.com/stickydrain/stickydrain/controller/liveness"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/controller/tenancy"
)

// Reconciler reconciles Services.
type Reconciler struct {
	Client client.Client
	// Config is the configuration at start; SetConfig replaces it.
	Config *config.Config
	// APIReader reads what the cache may not hold yet (a Pod newer than
	// it); nil: Client.
	APIReader client.Reader
	// Drivers are the load-balancer types this build drives
	// (controller/drivers.New()); instances log what they notice on
	// their own to InstanceLog.
	Drivers     *backend.Registry
	InstanceLog logr.Logger
	Recorder    recorder.EventRecorder
	Metrics     *Metrics
	// Concurrency is how many Services are reconciled at once (different
	// Services only; one Service is never reconciled twice at once). 0
	// means 1.
	Concurrency int
	// ProbeEvery is how often every instance is probed for a new process
	// (restart, reload, new replica). 0 means 1s.
	ProbeEvery time.Duration

	liveness *liveness.Tracker
	watcher  *liveness.Watcher
	renew    chan event.GenericEvent
	// What passes remember (state.go).
	pool   *instancePool
	ledger *drainLedger
	owners *ownershipIndex
	// pods bounds the live reads of Pods (podcache.go); its zero value
	// is ready.
	pods   podReads
	passes *passLimiter

	mu      sync.Mutex
	current *config.Config
	policy  *tenancy.Policy
}

// SetupWithManager registers the controller: Services with the upstreams
// annotation, and the EndpointSlices of those Services and of the
// Services that list load-balancer instances.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.current = r.Config
	r.Metrics.loadBalancers(nil, r.Config)
	var err error
	if r.policy, err = tenancy.New(r.Config); err != nil {
		return err
	}
	r.pool, r.ledger, r.owners = newInstancePool(), newDrainLedger(), newOwnershipIndex()
	// As many passes on one instance as Services are reconciled at once.
	r.passes = newPassLimiter(r.Concurrency)
	r.liveness = liveness.NewTracker()
	r.renew = make(chan event.GenericEvent, 1024)
	r.watcher = &liveness.Watcher{
		Tracker: r.liveness, Source: lifecycle{r}, Every: r.ProbeEvery,
		Log:    mgr.GetLogger().WithName("liveness"),
		Probed: func(lb, result string) { r.Metrics.probes.WithLabelValues(lb, result).Inc() },
		Marks:  func(lb string) { r.Metrics.marks.WithLabelValues(lb).Inc() },
	}
	if err := mgr.Add(r.watcher); err != nil {
		return fmt.Errorf("adding the instance watcher: %w", err)
	}
	if err := mgr.Add(&liveness.Heartbeat{Instances: lifecycle{r}.Instances, Every: r.ProbeEvery / 2, Log: mgr.GetLogger().WithName("heartbeat")}); err != nil {
		return fmt.Errorf("adding the marker heartbeat: %w", err)
	}
	// Services by the upstreams they map, so that deciding who owns an
	// upstream reads the few Services mapping it, not every Service.
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Service{}, indexUpstream, byUpstream); err != nil {
		return fmt.Errorf("indexing Services by upstream: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &discoveryv1.EndpointSlice{}, indexService, func(o client.Object) []string {
		if name := o.GetLabels()[discoveryv1.LabelServiceName]; name != "" {
			return []string{name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing EndpointSlices by Service: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Service{}, indexLB, func(o client.Object) []string {
		var lbs []string
		for _, k := range upstreamKeys(o.GetAnnotations()[api.AnnotationUpstreams]) {
			if lb, _, ok := strings.Cut(k, "/"); ok && !slices.Contains(lbs, lb) {
				lbs = append(lbs, lb)
			}
		}
		return lbs
	}); err != nil {
		return fmt.Errorf("indexing Services by load balancer: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("stickydrain").
		For(&corev1.Service{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			_, ok := o.GetAnnotations()[api.AnnotationUpstreams]
			return ok || r.owners.has(client.ObjectKeyFromObject(o))
		}))).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.mapSlice)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.mapNamespace), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WatchesRawSource(source.Channel(r.renew, &handler.EnqueueRequestForObject{})).
		// Namespaces take turns in the queue (fairQueue): one that queues
		// a thousand Services does not hold another's one behind them.
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Concurrency), NewQueue: queueFor}).
		Complete(r)
}

// SetConfig replaces the configuration (a validated change of the file)
// and queues every mapped Service, so that what it allows or refuses now
// takes effect at once.
func (r *Reconciler) SetConfig(ctx context.Context, c *config.Config) error {
	p, err := tenancy.New(c)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.Metrics.loadBalancers(r.current, c)
	r.current, r.policy = c, p
	r.mu.Unlock()
	r.pool.reset() // addresses or timeouts may have changed
	known := r.owners.services()
	var list corev1.ServiceList
	if err := r.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("listing Services to apply the new configuration: %w", err)
	}
	for i := range list.Items {
		if _, ok := list.Items[i].Annotations[api.AnnotationUpstreams]; ok {
			known = append(known, client.ObjectKeyFromObject(&list.Items[i]))
		}
	}
	// Queued from a goroutine: a standby replica reads none of them until
	// it leads, and the caller must not wait for that.
	go func() {
		for _, k := range known {
			select {
			case r.renew <- event.GenericEvent{Object: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}

// Running is the configuration running: the file's, or part of it while
// a change is held in part (Hold).
func (r *Reconciler) Running() *config.Config { return r.cfg() }

func (r *Reconciler) cfg() *config.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current
}

// rules are the configuration and its compiled tenancy policy, taken
// together so that one pass decides by one of each.
func (r *Reconciler) rules() (*config.Config, *tenancy.Policy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current, r.policy
}

// mapSlice sends a slice's Service, and when the slice lists instances of a
// load balancer, every Service mapped onto that load balancer.
func (r *Reconciler) mapSlice(ctx context.Context, o client.Object) []ctrl.Request {
	svc := o.GetLabels()[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil
	}
	reqs := []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: svc}}}
	for _, lb := range r.cfg().LoadBalancers {
		if s := lb.Instances.Service; s != nil && s.Namespace == o.GetNamespace() && s.Name == svc {
			var list corev1.ServiceList
			if err := r.Client.List(ctx, &list, client.MatchingFields{indexLB: lb.Name}); err != nil {
				logf.FromContext(ctx).Error(err, "listing the Services mapped onto a load balancer whose instances changed", "lb", lb.Name)
				continue
			}
			for _, it := range list.Items {
				reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&it)})
			}
		}
	}
	return reqs
}

// Reconcile brings every upstream of one Service in step on every
// instance, in four steps: what the Service asks for (desired), what the
// rules let it have (admitted), each upstream on every instance of its load
// balancer (converge), and what the pass leaves behind (done).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cfg, policy := r.rules()
	key := req.NamespacedName
	var svc corev1.Service
	err := r.Client.Get(ctx, key, &svc)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	annotation, mapped := svc.Annotations[api.AnnotationUpstreams]
	if apierrors.IsNotFound(err) || !mapped || svc.DeletionTimestamp != nil {
		// The Service is gone or no longer mapped: empty what it owned.
		return r.unmap(ctx, policy, key), nil
	}

	// Desired: the upstreams the Service maps.
	ups, err := ParseUpstreams(annotation, cfg)
	if err != nil {
		r.refuseMapping(ctx, &svc, annotation, err)
		return ctrl.Result{}, nil
	}
	// Admitted: the upstreams it may own; those it held and owns no longer
	// are emptied (or handed to their next owner).
	owned, refused, err := r.owned(ctx, policy, &svc, ups)
	if err != nil {
		return ctrl.Result{}, err
	}
	held := r.release(ctx, policy, key, &svc, owned, refused)
	// Desired: its endpoints' states.
	slices, err := r.slicesOf(ctx, svc.Namespace, svc.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	desired, err := endpoints.Desired(slices, svc.Annotations[api.AnnotationPort], endpoints.Options{
		DrainNotReady: cfg.DrainNotReady, KeepDrainingWhenNotServing: cfg.KeepDrainingWhenNotServing,
	})
	if err != nil {
		r.refuseMapping(ctx, &svc, annotation, err)
		return ctrl.Result{}, nil
	}
	// What it owns, and what it could not give up yet (tried again next
	// pass).
	r.owners.set(key, append(append([]upstreamRef(nil), owned...), held...))
	// Admitted: the endpoints each load balancer's rules allow.
	admitted, err := r.admitAll(ctx, policy, &svc, owned, desired)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Converge: each upstream on its own load balancer, at once — a
	// Service mapped onto two load balancers is not drained on one after
	// the other.
	outcomes, converged := r.convergeAll(ctx, &svc, owned, admitted)
	// Done: the instances it is done on may be marked filled.
	r.doneOwned(ctx, key, annotation, owned, outcomes)
	if !converged && len(held) == 0 && allFinal(outcomes) {
		// Every failure was an instance that cannot hold what the Service
		// asks: the operator's or the Service's to fix, not a passing
		// fault. Tried again at a slower pace, so that such Services do
		// not take the instances' passes from the others; a new process
		// (a reload that adds the backend) brings it back at once.
		return ctrl.Result{RequeueAfter: cannotHoldRetry}, nil
	}
	if !converged || len(held) > 0 {
		logf.FromContext(ctx).V(1).Info("not every instance converged; retrying soon")
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	return ctrl.Result{RequeueAfter: cfg.Resync.Duration}, nil
}

// cannotHoldRetry is how soon a Service whose only failures were
// instances that cannot hold its upstreams is tried again.
const cannotHoldRetry = 30 * time.Second

// allFinal reports whether every instance of every upstream is final
// (converged, or cannot hold what the Service asks).
func allFinal(outcomes [][]instanceOutcome) bool {
	for _, os := range outcomes {
		for _, o := range os {
			if !o.final {
				return false
			}
		}
	}
	return true
}

// unmap empties what a Service gone or no longer mapped owned; it stays
// in the ownership index, and is tried again soon, while an instance has
// not answered.
func (r *Reconciler) unmap(ctx context.Context, policy *tenancy.Policy, key types.NamespacedName) ctrl.Result {
	held := r.release(ctx, policy, key, nil, nil, nil)
	r.owners.set(key, held)
	if len(held) > 0 {
		return ctrl.Result{RequeueAfter: 2 * time.Second}
	}
	return ctrl.Result{}
}

// refuseMapping reports a mapping that cannot be read, and marks the
// Service done on the load balancers it names (it asks nothing of them).
func (r *Reconciler) refuseMapping(ctx context.Context, svc *corev1.Service, annotation string, err error) {
	r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, api.ReasonBadMapping, "Map", "%v", err)
	r.doneRefused(ctx, client.ObjectKeyFromObject(svc), annotation)
}

// admitAll admits the desired endpoints on each load balancer the owned
// upstreams are on, once per load balancer.
func (r *Reconciler) admitAll(ctx context.Context, policy *tenancy.Policy, svc *corev1.Service, owned []upstreamRef, desired map[netip.AddrPort]endpoints.Endpoint) (map[string]map[netip.AddrPort]endpoints.Endpoint, error) {
	admitted := map[string]map[netip.AddrPort]endpoints.Endpoint{}
	for _, u := range owned {
		if admitted[u.LB] == nil {
			var err error
			if admitted[u.LB], err = r.admitted(ctx, policy, svc, u.LB, desired); err != nil {
				return nil, err
			}
		}
	}
	return admitted, nil
}

// convergeAll converges every owned upstream at once, and reports each
// one's instance outcomes and whether every instance of every upstream
// converged.
func (r *Reconciler) convergeAll(ctx context.Context, svc *corev1.Service, owned []upstreamRef, admitted map[string]map[netip.AddrPort]endpoints.Endpoint) ([][]instanceOutcome, bool) {
	converged := make([]bool, len(owned))
	outcomes := make([][]instanceOutcome, len(owned))
	var wg sync.WaitGroup
	for i, u := range owned {
		wg.Go(func() {
			outcomes[i], converged[i] = r.converge(ctx, svc, u, admitted[u.LB])
		})
	}
	wg.Wait()
	all := true
	for _, ok := range converged {
		all = all && ok
	}
	return outcomes, all
}

func older(a, b *corev1.Service) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

func (r *Reconciler) lb(name string) *config.LoadBalancer {
	cfg := r.cfg()
	for i := range cfg.LoadBalancers {
		if cfg.LoadBalancers[i].Name == name {
			return &cfg.LoadBalancers[i]
		}
	}
	return nil
}

// instanceOutcome is how one upstream's pass went on one instance: the
// process identity known before it read the instance, and whether every
// change landed.
type instanceOutcome struct {
	inst     backend.Instance
	identity string
	ok       bool
	// final: ok, or every failure was the instance answering that it
	// cannot hold what the Service asks (backend.ErrCannotHold), which is
	// the Service's to fix and must not hold the instance's readiness.
	final bool
}

// converge applies one upstream's desired servers on every instance of its
// load balancer, concurrently and independently. It reports how each
// instance went and whether every instance converged.
func (r *Reconciler) converge(ctx context.Context, svc *corev1.Service, u upstreamRef, desired map[netip.AddrPort]endpoints.Endpoint) ([]instanceOutcome, bool) {
	lb := r.lb(u.LB)
	if lb == nil {
		return nil, true
	}
	want, counts, oldest := r.observe(u, desired)
	insts, err := r.instancesOf(ctx, lb)
	if err != nil {
		r.Metrics.lbErrors.WithLabelValues(u.LB, "discover").Inc()
		logf.FromContext(ctx).Error(err, "listing instances", "upstream", u.String())
		return nil, false
	}
	results := make([]instanceResult, len(insts))
	var wg sync.WaitGroup
	for i, inst := range insts {
		wg.Go(func() { results[i] = r.applyOn(ctx, svc, lb, u, inst, want) })
	}
	wg.Wait()
	r.recordGauges(u, results, counts, oldest, r.drainDeadline(ctx, desired))
	return r.recordDrains(u, desired, results)
}

// drainDeadline is when the first grace period of the pods behind the
// upstream's draining servers ends (their deletionTimestamp, from the
// cache): a drain still under way after it has outlived its own max-wait.
// Zero when none drains.
func (r *Reconciler) drainDeadline(ctx context.Context, desired map[netip.AddrPort]endpoints.Endpoint) time.Time {
	var first time.Time
	for _, e := range desired {
		if e.State != plan.Draining || e.PodName == "" {
			continue
		}
		var pod corev1.Pod
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: e.PodNamespace, Name: e.PodName}, &pod); err != nil ||
			pod.DeletionTimestamp == nil || (e.PodUID != "" && pod.UID != e.PodUID) {
			continue
		}
		if t := pod.DeletionTimestamp.Time; first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}

// observe records the upstream's desired servers in the drain ledger, and
// returns the state each server should have, how many there are in each
// state and when the oldest drain began (for recordGauges).
func (r *Reconciler) observe(u upstreamRef, desired map[netip.AddrPort]endpoints.Endpoint) (map[netip.AddrPort]plan.State, map[plan.State]int, time.Time) {
	want := make(map[netip.AddrPort]plan.State, len(desired))
	counts := map[plan.State]int{}
	for a, e := range desired {
		want[a] = e.State
		counts[e.State]++
	}
	return want, counts, r.ledger.observe(u, desired, time.Now())
}

// recordGauges sets the upstream's gauges (servers by state, the oldest
// drain, slots) once an instance has read it: an upstream name labels a
// series only when the operator's load balancer has it, so that names a
// user writes into an annotation, thousands of them, make no series.
func (r *Reconciler) recordGauges(u upstreamRef, results []instanceResult, counts map[plan.State]int, oldest, deadline time.Time) {
	// A drain that ended ends its series whether or not an instance could
	// be read: a stale deadline would fire the alert for a pod long gone.
	if oldest.IsZero() {
		r.Metrics.oldestDrain.DeleteLabelValues(u.LB, u.Upstream)
	}
	if deadline.IsZero() {
		r.Metrics.drainDeadline.DeleteLabelValues(u.LB, u.Upstream)
	}
	read := false
	for _, res := range results {
		read = read || res.read
	}
	if !read {
		return
	}
	for _, s := range []plan.State{plan.Active, plan.Draining, plan.Down} {
		r.Metrics.servers.WithLabelValues(u.LB, u.Upstream, s.String()).Set(float64(counts[s]))
	}
	if !oldest.IsZero() {
		r.Metrics.oldestDrain.WithLabelValues(u.LB, u.Upstream).Set(float64(oldest.UnixMilli()) / 1000)
	}
	if !deadline.IsZero() {
		r.Metrics.drainDeadline.WithLabelValues(u.LB, u.Upstream).Set(float64(deadline.UnixMilli()) / 1000)
	}
	r.recordSlots(u, results)
}

// instanceResult is how one upstream's pass went on one instance: its
// outcome, the changes that landed, and its slots when it has a bound
// (backend.Capacity).
type instanceResult struct {
	instanceOutcome
	applied     map[netip.AddrPort]plan.Change
	used, total int
	bounded     bool
	// read: the instance has the upstream and answered its read.
	read bool
}

// applyOn reads the upstream's servers on one instance, plans the changes
// to want and applies them.
func (r *Reconciler) applyOn(ctx context.Context, svc *corev1.Service, lb *config.LoadBalancer, u upstreamRef, inst backend.Instance, want map[netip.AddrPort]plan.State) instanceResult {
	log := logf.FromContext(ctx).WithValues("upstream", u.String())
	res := instanceResult{instanceOutcome: instanceOutcome{inst: inst, identity: r.liveness.Identity(inst.ID())}, applied: map[netip.AddrPort]plan.Change{}}
	done, err := r.passes.begin(ctx, inst.ID())
	if err != nil {
		log.Error(err, "waiting for a connection to the instance", "instance", inst.ID())
		return res
	}
	defer done()
	p, err := inst.Begin(ctx, u.Upstream)
	if err != nil {
		if errors.Is(err, backend.ErrCannotHold) {
			res.final = true
			r.cannotHold(svc, u, inst, err)
			return res
		}
		r.Metrics.lbErrors.WithLabelValues(u.LB, "read").Inc()
		log.Error(err, "reading servers", "instance", inst.ID())
		return res
	}
	defer p.Close()
	res.read = true
	if c, ok := p.(backend.Capacity); ok {
		res.used, res.total, res.bounded = c.Slots()
	}
	cur := p.Servers()
	r.checkLost(ctx, svc, lb, u, inst, cur, want)
	target := want
	if nz, ok := p.(backend.Normalizer); ok {
		target = nz.Normalize(want)
	}
	changes := plan.Calculate(cur, target)
	errs := p.Apply(ctx, changes)
	res.ok, res.final = true, true
	var cannot error
	for j, ch := range changes {
		result := "ok"
		if errs[j] != nil {
			result, res.ok = "error", false
			if errors.Is(errs[j], backend.ErrCannotHold) {
				// Reported once a pass by cannotHold (an Event, its own
				// count); per change only in the detailed log.
				cannot = errs[j]
				log.V(1).Info("the instance cannot hold this change", "instance", inst.ID(), "op", ch.Op, "server", ch.Addr.String(), "error", errs[j].Error())
			} else {
				res.final = false
				r.Metrics.lbErrors.WithLabelValues(u.LB, "apply").Inc()
				log.Error(errs[j], "applying change", "instance", inst.ID(), "op", ch.Op, "server", ch.Addr.String())
			}
		} else {
			res.applied[ch.Addr] = ch
			log.Info("applied", "instance", inst.ID(), "op", ch.Op, "server", ch.Addr.String(), "state", ch.State.String())
		}
		r.Metrics.changes.WithLabelValues(lb.Type, string(ch.Op), ch.State.String(), result).Inc()
	}
	if cannot != nil {
		r.cannotHold(svc, u, inst, cannot)
	}
	return res
}

// cannotHold reports an instance that cannot hold what the Service asks
// of upstream u (backend.ErrCannotHold): a Warning on the Service and
// stickydrain_controller_lb_errors_total{call="cannot-hold"}.
func (r *Reconciler) cannotHold(svc *corev1.Service, u upstreamRef, inst backend.Instance, err error) {
	r.Metrics.lbErrors.WithLabelValues(u.LB, "cannot-hold").Inc()
	if svc != nil {
		r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, api.ReasonCannotHold, action("Converge", u.String()),
			"%v; the Service is retried, and the load balancer's other Services and fresh replicas do not wait for it", err)
	}
}

// recordSlots sets the upstream's slot gauges: the most used and the
// fewest there are on any bounded instance.
func (r *Reconciler) recordSlots(u upstreamRef, results []instanceResult) {
	used, total := 0, -1
	for _, res := range results {
		if res.bounded {
			used = max(used, res.used)
			if total < 0 || res.total < total {
				total = res.total
			}
		}
	}
	if total >= 0 {
		r.Metrics.slots.WithLabelValues(u.LB, u.Upstream).Set(float64(total))
		r.Metrics.slotsUsed.WithLabelValues(u.LB, u.Upstream).Set(float64(used))
	}
}

// recordDrains records what the instances that answered did: how long
// each drain took to reach them, the Draining and Removed Events, and the
// servers the ledger may forget. It returns each instance's outcome and
// whether every instance converged. Events speak of the instances that
// answered; one that is down converges when it returns (every pass reads
// its actual state).
func (r *Reconciler) recordDrains(u upstreamRef, desired map[netip.AddrPort]endpoints.Endpoint, results []instanceResult) ([]instanceOutcome, bool) {
	allOK, answered := true, 0
	for _, res := range results {
		allOK = allOK && res.ok
		if res.ok {
			answered++
		}
		for a, ch := range res.applied {
			if ch.State == plan.Draining && (ch.Op == plan.OpAdd || ch.Op == plan.OpSet) {
				if since, ok := r.ledger.since(u, a); ok {
					r.Metrics.drainDelay.WithLabelValues(u.LB).Observe(time.Since(since).Seconds())
				}
			}
		}
	}
	if answered > 0 {
		for a, e := range desired {
			if e.State == plan.Draining {
				r.announce(e, u, a, api.ServerNote{Reason: api.ReasonDraining, Server: a.String(), Upstream: u.String(), Answered: answered, Instances: len(results)})
			}
		}
		// Servers no longer desired are gone from every instance that
		// answered.
		for _, g := range r.ledger.forgetGone(u, desired) {
			r.announce(g.pod, u, g.addr, api.ServerNote{Reason: api.ReasonRemoved, Server: g.addr.String(), Upstream: u.String(), Answered: answered, Instances: len(results)})
		}
	}
	out := make([]instanceOutcome, len(results))
	for i := range results {
		out[i] = results[i].instanceOutcome
	}
	return out, allOK
}

// announce records an Event on the endpoint's pod: once per server,
// upstream and reason, and again when more of the upstream's instances
// have applied it than the last one said (an instance that was down
// caught up), so that the latest Event tells how far the drain reached.
func (r *Reconciler) announce(e endpoints.Endpoint, u upstreamRef, a netip.AddrPort, note api.ServerNote) {
	if e.PodName == "" || !r.ledger.tell(announcement{u, a, note.Reason}, note.Answered) {
		return
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.PodNamespace, Name: e.PodName, UID: e.PodUID}}
	r.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, note.Reason, "LoadBalance", "%s", note.String())
}
