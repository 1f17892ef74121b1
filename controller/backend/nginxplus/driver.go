package nginxplus

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

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
	o := lb.NGINXPlus
	if o == nil {
		o = &config.NGINXPlusOptions{}
	}
	if o.APIVersion != 0 && (o.APIVersion < 4 || o.APIVersion > 9) {
		errs = append(errs, fmt.Errorf("%s.nginxPlus.apiVersion: %d is not supported; want 4 to 9, or 0 to negotiate", f, o.APIVersion))
	}
	for _, file := range []struct{ name, path string }{{"caFile", o.CAFile}, {"certFile", o.CertFile}, {"keyFile", o.KeyFile}, {"basicAuthFile", o.BasicAuthFile}, {"headerFile", o.HeaderFile}} {
		if file.path != "" && !strings.HasPrefix(file.path, "/") {
			errs = append(errs, fmt.Errorf("%s.nginxPlus.%s: %q: want the absolute path of a file in the controller's container", f, file.name, file.path))
		}
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, fmt.Errorf("%s.nginxPlus.certFile, keyFile: set both (the client certificate and its key) or neither", f))
	}
	for j, a := range lb.Instances.Static {
		if err := CheckAddress(a); err != nil {
			errs = append(errs, fmt.Errorf("%s.instances.static[%d]: %w", f, j, err))
		} else if usesTLS(o) && !strings.HasPrefix(a, "https://") {
			errs = append(errs, fmt.Errorf("%s.instances.static[%d]: %q: nginxPlus's TLS settings need https://host:port/api addresses", f, j, a))
		}
	}
	return errs
}

// usesTLS reports whether the options ask for TLS to the API: a CA, a
// client certificate, a server name or no verification. Instances found
// behind a Service are then reached over https.
func usesTLS(o *config.NGINXPlusOptions) bool {
	return o != nil && (o.CAFile != "" || o.CertFile != "" || o.ServerName != "" || o.InsecureSkipVerify)
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
// http://ip:port/api, or https:// with nginxPlus's TLS settings.
func (Driver) InstanceAddress(lb config.LoadBalancer, ep netip.AddrPort) string {
	if usesTLS(lb.NGINXPlus) {
		return "https://" + ep.String() + "/api"
	}
	return "http://" + ep.String() + "/api"
}

// New returns the instance at addr with lb's nginxPlus options.
func (Driver) New(lb config.LoadBalancer, addr string, _ logr.Logger) (backend.Instance, error) {
	return New(addr, lb)
}

// LostStateHint: NGINX Plus keeps an upstream's servers across a reload
// only with the state directive.
func (Driver) LostStateHint() string {
	return "keep the upstream's servers with NGINX Plus' state directive (manifests/samples/nginx-plus/nginx.conf)"
}
