package nginxplus

import (
	"fmt"
	"net/netip"
	"net/url"

	"github.com/go-logr/logr"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/config"
)

// Type is the configuration's type of an NGINX Plus load balancer.
const Type = "nginx-plus"

// Driver is NGINX Plus' backend.Driver: the NGINX Plus API of each
// instance.
type Driver struct{}

var _ backend.Driver = Driver{}

// Type is "nginx-plus".
func (Driver) Type() string { return Type }

// OptionsField is "nginxPlus" (config.NGINXPlusOptions).
func (Driver) OptionsField() string { return "nginxPlus" }

// Validate checks the nginxPlus options and the static instance addresses
// (http(s)://host:port/api).
func (Driver) Validate(f string, lb config.LoadBalancer) []error {
	var errs []error
	if o := lb.NGINXPlus; o != nil && o.APIVersion != 0 && (o.APIVersion < 4 || o.APIVersion > 9) {
		errs = append(errs, fmt.Errorf("%s.nginxPlus.apiVersion: %d is not supported; want 4 to 9, or 0 to negotiate", f, o.APIVersion))
	}
	for j, a := range lb.Instances.Static {
		if err := CheckAddress(a); err != nil {
			errs = append(errs, fmt.Errorf("%s.instances.static[%d]: %w", f, j, err))
		}
	}
	return errs
}

// CheckAddress checks an instance's API address: http(s)://host:port/api.
func CheckAddress(a string) error {
	u, err := url.Parse(a)
	if err != nil {
		return fmt.Errorf("%q: %w", a, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want http(s)://host:port/api", a)
	}
	return nil
}

// InstanceAddress is the API of an instance found behind a Service:
// http://ip:port/api.
func (Driver) InstanceAddress(ep netip.AddrPort) string { return "http://" + ep.String() + "/api" }

// New returns the instance at addr with lb's nginxPlus options.
func (Driver) New(lb config.LoadBalancer, addr string, _ logr.Logger) (backend.Instance, error) {
	return New(addr, lb)
}

// LostStateHint: NGINX Plus keeps an upstream's servers across a reload
// only with the state directive.
func (Driver) LostStateHint() string {
	return "keep the upstream's servers with NGINX Plus' state directive (manifests/samples/nginx-plus/nginx.conf)"
}
