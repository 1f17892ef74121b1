package nginxplus

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation/field"

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
func (Driver) Validate(f *field.Path, lb config.LoadBalancer) field.ErrorList {
	var errs field.ErrorList
	o := lb.NGINXPlus
	if o == nil {
		o = &config.NGINXPlusOptions{}
	}
	nf, static := f.Child("nginxPlus"), f.Child("instances", "static")
	if o.APIVersion != 0 && (o.APIVersion < 4 || o.APIVersion > 9) {
		errs = append(errs, field.Invalid(nf.Child("apiVersion"), o.APIVersion, "not supported; want 4 to 9, or 0 to negotiate"))
	}
	for _, file := range []struct{ name, path string }{{"caFile", o.CAFile}, {"certFile", o.CertFile}, {"keyFile", o.KeyFile}, {"basicAuthFile", o.BasicAuthFile}, {"headerFile", o.HeaderFile}} {
		if file.path != "" && !strings.HasPrefix(file.path, "/") {
			errs = append(errs, field.Invalid(nf.Child(file.name), file.path, "want the absolute path of a file in the controller's container"))
		}
	}
	if o.CertFile == "" && o.KeyFile != "" {
		errs = append(errs, field.Required(nf.Child("certFile"), "set certFile and keyFile (the client certificate and its key) or neither"))
	} else if o.CertFile != "" && o.KeyFile == "" {
		errs = append(errs, field.Required(nf.Child("keyFile"), "set certFile and keyFile (the client certificate and its key) or neither"))
	}
	for j, a := range lb.Instances.Static {
		if err := CheckAddress(a); err != nil {
			errs = append(errs, field.Invalid(static.Index(j), a, err.Error()))
		} else if usesTLS(o) && !strings.HasPrefix(a, "https://") {
			errs = append(errs, field.Invalid(static.Index(j), a, "nginxPlus's TLS settings need https://host:port/api addresses"))
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
// Its error says what is wrong, not the address (the caller names it).
func CheckAddress(a string) error {
	u, err := url.Parse(a)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the address it quotes: the caller names it
		}
		return fmt.Errorf("want http(s)://host:port/api: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want http(s)://host:port/api")
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
