package reconcile

import (
	"context"
	"fmt"
	"sort"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/endpoints"
)

// instancesOf lists a load balancer's instances: its static addresses, or
// the ready endpoints of its instance Service.
func (r *Reconciler) instancesOf(ctx context.Context, lb *config.LoadBalancer) ([]backend.Instance, error) {
	addrs := lb.Instances.Static
	if s := lb.Instances.Service; s != nil {
		slices, err := r.slicesOf(ctx, s.Namespace, s.Name)
		if err != nil {
			return nil, err
		}
		// Every endpoint, ready or not, terminating or not: a new replica is
		// filled before it may become ready, and one that is shutting down
		// still serves its open connections.
		eps, err := endpoints.Desired(slices, s.Port, endpoints.Options{DrainNotReady: true, KeepDrainingWhenNotServing: true})
		if err != nil {
			return nil, fmt.Errorf("load balancer %s: instances of Service %s/%s: %w", lb.Name, s.Namespace, s.Name, err)
		}
		d, ok := r.Drivers.Driver(lb.Type)
		if !ok {
			return nil, fmt.Errorf("load balancer %s: type %s is not supported by this build", lb.Name, lb.Type)
		}
		addrs = nil
		for a := range eps {
			addrs = append(addrs, d.InstanceAddress(*lb, a))
		}
		sort.Strings(addrs)
	}
	return r.pool.get(addrs, func(a string) (backend.Instance, error) { return r.Drivers.New(*lb, a, r.InstanceLog) })
}

// slicesOf lists the EndpointSlices of the Service namespace/name from the
// cache, through its index.
func (r *Reconciler) slicesOf(ctx context.Context, namespace, name string) ([]discoveryv1.EndpointSlice, error) {
	var list discoveryv1.EndpointSliceList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{indexService: name}); err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of %s/%s: %w", namespace, name, err)
	}
	return list.Items, nil
}
