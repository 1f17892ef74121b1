package backend

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/stickydrain/stickydrain/controller/config"
)

// Driver is one load-balancer type: everything the controller decides by
// a load balancer's type is asked of its driver. Each backend package
// provides one (haproxy.Driver, nginxplus.Driver), and a Registry holds
// the drivers a build supports (controller/drivers registers them, one
// line each). Capabilities beyond Instance are the optional interfaces an
// instance implements (Normalizer, Prober, Marker, Heartbeater).
type Driver interface {
	// Type is the configuration's loadBalancers[].type.
	Type() string
	// OptionsField is the load balancer's field holding this type's own
	// options (config.LoadBalancer's json name, "haproxy"), "" if none.
	OptionsField() string
	// Validate checks what belongs to the type: its options and its static
	// instance addresses. Each error is a field error under path
	// (loadBalancers[i]).
	Validate(path *field.Path, lb config.LoadBalancer) field.ErrorList
	// InstanceAddress is the address of an instance found as an endpoint
	// of the load balancer's instance Service (its options may choose the
	// scheme).
	InstanceAddress(lb config.LoadBalancer, ep netip.AddrPort) string
	// New returns the instance at addr, logging what it notices to log.
	New(lb config.LoadBalancer, addr string, log logr.Logger) (Instance, error)
	// LostStateHint tells an operator how to keep an upstream's servers
	// across a restart or reload of an instance.
	LostStateHint() string
}

// Registry holds drivers by type. It implements config.TypeChecker.
type Registry struct {
	drivers map[string]Driver
}

// NewRegistry registers drivers; two of one type, or two claiming one
// options field, are refused.
func NewRegistry(drivers ...Driver) (*Registry, error) {
	r := &Registry{drivers: map[string]Driver{}}
	fields := map[string]string{}
	for _, d := range drivers {
		if _, dup := r.drivers[d.Type()]; dup || d.Type() == "" {
			return nil, fmt.Errorf("backend: load-balancer type %q registered twice or empty", d.Type())
		}
		if f := d.OptionsField(); f != "" {
			if other, dup := fields[f]; dup {
				return nil, fmt.Errorf("backend: options field %q claimed by types %s and %s", f, other, d.Type())
			}
			fields[f] = d.Type()
		}
		r.drivers[d.Type()] = d
	}
	return r, nil
}

// Driver is the driver of type typ.
func (r *Registry) Driver(typ string) (Driver, bool) {
	d, ok := r.drivers[typ]
	return d, ok
}

// Types lists the registered types, sorted.
func (r *Registry) Types() []string {
	out := make([]string, 0, len(r.drivers))
	for t := range r.drivers {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// CheckType checks lb against its type's driver: the type is registered,
// no other type's options are set, and the driver's own checks pass.
func (r *Registry) CheckType(path *field.Path, lb config.LoadBalancer) field.ErrorList {
	d, ok := r.drivers[lb.Type]
	if !ok && lb.Type == "" {
		return field.ErrorList{field.Required(path.Child("type"), "one of "+strings.Join(r.Types(), ", "))}
	}
	if !ok {
		return field.ErrorList{field.NotSupported(path.Child("type"), lb.Type, r.Types())}
	}
	var errs field.ErrorList
	for _, set := range lb.OptionFields() {
		if set == d.OptionsField() {
			continue
		}
		owner := ""
		for _, o := range r.drivers {
			if o.OptionsField() == set {
				owner = o.Type()
			}
		}
		if owner == "" {
			errs = append(errs, field.Forbidden(path.Child(set), "no load-balancer type of this build takes it"))
			continue
		}
		errs = append(errs, field.Forbidden(path.Child(set), "only for type "+owner))
	}
	return append(errs, d.Validate(path, lb)...)
}

// New returns the instance at addr of lb, by its type's driver.
func (r *Registry) New(lb config.LoadBalancer, addr string, log logr.Logger) (Instance, error) {
	d, ok := r.drivers[lb.Type]
	if !ok {
		return nil, fmt.Errorf("load balancer %s: type %s is not supported by this build", lb.Name, lb.Type)
	}
	return d.New(lb, addr, log)
}
