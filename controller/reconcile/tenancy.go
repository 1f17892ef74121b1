package reconcile

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/endpoints"
	"github.com/stickydrain/stickydrain/controller/tenancy"
)

// action is an Event's action, what the controller did or refused to do
// and to what, cut to the 128 characters the Events API takes.
func action(verb, what string) string {
	a := verb + " " + what
	if len(a) > 128 {
		a = a[:128]
	}
	return a
}

// CacheOptions are the manager's cache options the Reconciler expects:
// Pods are cached with only what tells an endpoint's Pod and its
// addresses apart, and whether the webhook injected it, so that a
// cluster's Pods cost little memory.
func CacheOptions() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Transform: stripPod},
	}}
}

func stripPod(o any) (any, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return o, nil
	}
	var ann map[string]string
	if v, ok := p.Annotations[api.AnnotationStatus]; ok {
		// Whether the webhook injected the drain (read by the Envoy
		// Gateway integration).
		ann = map[string]string{api.AnnotationStatus: v}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion, DeletionTimestamp: p.DeletionTimestamp, Annotations: ann},
		// The phase: a finished Pod's addresses are no longer its own.
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}, nil
}

// claim decides whether svc may map onto u, reading its namespace's labels
// when a rule selects namespaces by label.
func (r *Reconciler) claim(ctx context.Context, p *tenancy.Policy, svc types.NamespacedName, u upstreamRef) (tenancy.Verdict, error) {
	var nsLabels map[string]string
	if p.NeedsNamespaceLabels() {
		var ns corev1.Namespace
		if err := r.Client.Get(ctx, types.NamespacedName{Name: svc.Namespace}, &ns); err != nil && !apierrors.IsNotFound(err) {
			return tenancy.Verdict{}, fmt.Errorf("reading Namespace %s for its labels: %w", svc.Namespace, err)
		}
		nsLabels = ns.Labels
	}
	return p.Claim(u.LB, u.Upstream, svc, nsLabels), nil
}

// ownerOf is the Service that owns upstream u: the one it is pinned to,
// else the oldest allowed Service mapping it (then by namespace/name);
// nil when no Service may. known holds verdicts the caller has already
// reached in this pass (its own Service's), which are not asked again;
// parsed, the annotations this pass has already read (nil: none), so
// that a pass reads each Service's annotation once, not once per
// upstream it shares.
func (r *Reconciler) ownerOf(ctx context.Context, p *tenancy.Policy, u upstreamRef, known map[types.NamespacedName]tenancy.Verdict, parsed map[string][]upstreamRef) (*corev1.Service, error) {
	if parsed == nil {
		parsed = map[string][]upstreamRef{}
	}
	var list corev1.ServiceList
	if err := r.Client.List(ctx, &list, client.MatchingFields{indexUpstream: u.String()}); err != nil {
		return nil, fmt.Errorf("listing the Services mapped onto %s: %w", u, err)
	}
	var owner *corev1.Service
	for i := range list.Items {
		o := &list.Items[i]
		if o.DeletionTimestamp != nil || (owner != nil && !older(o, owner)) {
			continue
		}
		ann := o.Annotations[api.AnnotationUpstreams]
		ups, seen := parsed[ann]
		if !seen {
			ups, _ = ParseUpstreams(ann, r.cfg()) // nil when it cannot be read
			parsed[ann] = ups
		}
		if !slices.Contains(ups, u) {
			continue
		}
		k := client.ObjectKeyFromObject(o)
		v, ok := known[k]
		if !ok {
			var err error
			if v, err = r.claim(ctx, p, k, u); err != nil {
				return nil, err
			}
		}
		if v.Allowed {
			owner = o
		}
	}
	return owner, nil
}

// owned keeps the upstreams of ups that svc owns. A refused claim gets an
// UpstreamNotAllowed Warning naming the rule; a claim an older Service
// holds, an UpstreamConflict Warning. refused maps each refused upstream
// to its verdict.
func (r *Reconciler) owned(ctx context.Context, p *tenancy.Policy, svc *corev1.Service, ups []upstreamRef) (owned []upstreamRef, refused map[upstreamRef]tenancy.Verdict, err error) {
	key := client.ObjectKeyFromObject(svc)
	refused = map[upstreamRef]tenancy.Verdict{}
	parsed := map[string][]upstreamRef{}
	for _, u := range ups {
		v, err := r.claim(ctx, p, key, u)
		if err != nil {
			return nil, nil, err
		}
		if !v.Allowed {
			refused[u] = v
			r.Metrics.refusals.WithLabelValues(u.LB, string(v.Reason)).Inc()
			// The action names the upstream: events of one object, reason
			// and action form one series, whose note is the first one's.
			r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, api.ReasonUpstreamNotAllowed, action("Map", u.String()), "%s; no load balancer was changed for it", v.Message)
			continue
		}
		owner, err := r.ownerOf(ctx, p, u, map[types.NamespacedName]tenancy.Verdict{key: v}, parsed)
		if err != nil {
			return nil, nil, err
		}
		if owner != nil && client.ObjectKeyFromObject(owner) != key {
			r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, api.ReasonUpstreamConflict, action("Map", u.String()),
				"upstream %s is already mapped from Service %s/%s, created first; stickydrain owns each upstream's membership for one Service only (pin it with the configuration's upstreams[].owner)", u, owner.Namespace, owner.Name)
			continue
		}
		owned = append(owned, u)
	}
	return owned, refused, nil
}

// release empties the upstreams svc owned after its last pass and owns no
// longer (its Service went, dropped them, or was refused them by a new
// configuration), unless another Service owns them now: that one is
// queued, and its pass replaces the servers. It returns the upstreams it
// could not empty yet (an instance did not answer): svc still holds them,
// and the next pass tries again.
func (r *Reconciler) release(ctx context.Context, p *tenancy.Policy, key types.NamespacedName, svc *corev1.Service, keep []upstreamRef, refused map[upstreamRef]tenancy.Verdict) (held []upstreamRef) {
	for _, u := range r.owners.held(key) {
		if slices.Contains(keep, u) {
			continue
		}
		owner, err := r.ownerOf(ctx, p, u, nil, nil)
		if err != nil {
			logf.FromContext(ctx).Error(err, "finding the next owner of a released upstream", "upstream", u.String())
			held = append(held, u)
			continue
		}
		if owner != nil && client.ObjectKeyFromObject(owner) != key {
			r.renew <- event.GenericEvent{Object: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: owner.Namespace, Name: owner.Name}}}
			continue
		}
		if _, converged := r.converge(ctx, nil, u, nil); !converged {
			held = append(held, u)
			continue
		}
		r.Metrics.forget(u)
		if v, was := refused[u]; was && svc != nil {
			r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, api.ReasonUpstreamNotAllowed, action("Withdraw", u.String()),
				"servers removed from %s: %s", u, v.Message)
		}
	}
	return held
}

// admitted keeps the desired servers that the load balancer's endpoint
// rules let become servers, and warns of those it refuses, a few a pass
// (endpointRefusals). A Pod's addresses come from the cache, and from the
// API server when the cache does not agree (a Pod newer than the cache),
// as podAddrs allows. An endpoint whose targetRef has no namespace names a
// Pod of the Service's namespace, as the rules read it; the admitted
// endpoint says so, so that Events on its Pod land there.
func (r *Reconciler) admitted(ctx context.Context, p *tenancy.Policy, svc *corev1.Service, lb string, desired map[netip.AddrPort]endpoints.Endpoint) (map[netip.AddrPort]endpoints.Endpoint, error) {
	out := make(map[netip.AddrPort]endpoints.Endpoint, len(desired))
	refusals := endpointRefusals{r: r, svc: svc, lb: lb}
	defer refusals.done()
	for _, a := range byAddress(desired) {
		e := desired[a]
		if e.PodName != "" && e.PodNamespace == "" {
			e.PodNamespace = svc.Namespace
		}
		te := tenancy.Endpoint{Addr: a.Addr(), PodNamespace: e.PodNamespace, PodName: e.PodName}
		v := p.Endpoint(lb, svc.Namespace, te)
		if !v.Allowed && e.PodName != "" && v.Reason == tenancy.NotPodAddress {
			addrs, phase, err := r.podAddrs(ctx, svc.Namespace, e.PodName, a.Addr())
			if err != nil && !podNotRead(err) {
				return nil, err
			}
			te.PodAddrs, te.PodPhase, te.PodNotVerified = addrs, phase, podNotRead(err)
			v = p.Endpoint(lb, svc.Namespace, te)
		}
		if !v.Allowed {
			refusals.refuse(a.Addr(), v)
			continue
		}
		out[a] = e
	}
	return out, nil
}

// podAddrs are the addresses and phase of Pod ns/name: from the cache
// when they include want or the Pod has finished (it never runs again),
// else from the API server — unless a live read within podReadTTL found
// what the cache holds now, or the rate of live reads is spent
// (errPodNotRead). nil addresses when the Pod does not exist; none when
// it has finished.
func (r *Reconciler) podAddrs(ctx context.Context, ns, name string, want netip.Addr) ([]netip.Addr, corev1.PodPhase, error) {
	key := types.NamespacedName{Namespace: ns, Name: name}
	var pod corev1.Pod
	err := r.Client.Get(ctx, key, &pod)
	cached := err == nil
	if cached {
		if addrs := podIPs(&pod); slices.Contains(addrs, want) || tenancy.Finished(pod.Status.Phase) {
			return addrs, pod.Status.Phase, nil
		}
	} else if !apierrors.IsNotFound(err) {
		return nil, "", fmt.Errorf("reading Pod %s: %w", key, err)
	}
	if r.pods.confirmed(key, cached, pod.ResourceVersion) {
		if !cached {
			return nil, "", nil
		}
		return podIPs(&pod), pod.Status.Phase, nil
	}
	if !r.pods.take() {
		return nil, "", fmt.Errorf("reading Pod %s: %w", key, errPodNotRead)
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	pod = corev1.Pod{}
	if err := reader.Get(ctx, key, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.pods.record(key, false, "")
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("reading Pod %s: %w", key, err)
	}
	r.pods.record(key, true, pod.ResourceVersion)
	return podIPs(&pod), pod.Status.Phase, nil
}

// podIPs are the addresses of Pod p; none once it has finished, when the
// network may have given them to other pods (why Kubernetes stopped
// publishing finished Pods' addresses, kubernetes#109414).
func podIPs(p *corev1.Pod) []netip.Addr {
	out := []netip.Addr{}
	if tenancy.Finished(p.Status.Phase) {
		return out
	}
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	if a, err := netip.ParseAddr(p.Status.PodIP); err == nil && !slices.Contains(out, a.Unmap()) {
		out = append(out, a.Unmap())
	}
	return out
}

// mapNamespace queues the mapped Services of a Namespace whose labels
// changed: a label selector may allow or refuse them now.
func (r *Reconciler) mapNamespace(ctx context.Context, o client.Object) []ctrl.Request {
	var list corev1.ServiceList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetName())); err != nil {
		logf.FromContext(ctx).Error(err, "listing the Services of a Namespace whose labels changed", "namespace", o.GetName())
		return nil
	}
	var reqs []ctrl.Request
	for i := range list.Items {
		if _, ok := list.Items[i].Annotations[api.AnnotationUpstreams]; ok {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}
