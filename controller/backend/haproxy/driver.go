package haproxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/config"
)

// Type is the configuration's type of an HAProxy load balancer.
const Type = "haproxy"

// Driver is HAProxy's backend.Driver: the Runtime API of each instance.
type Driver struct{}

var _ backend.Driver = Driver{}

// Type is "haproxy".
func (Driver) Type() string { return Type }

// OptionsField is "haproxy" (config.HAProxyOptions).
func (Driver) OptionsField() string { return "haproxy" }

// Validate checks the haproxy options (readyMap, mode, tls) and the
// static instance addresses (unix:///path or tcp://host:port; tcp only
// with tls).
func (Driver) Validate(f *field.Path, lb config.LoadBalancer) field.ErrorList {
	var errs field.ErrorList
	static := f.Child("instances", "static")
	if o := lb.HAProxy; o != nil {
		hf := f.Child("haproxy")
		if o.ReadyMap != "" && (!strings.HasPrefix(o.ReadyMap, "/") || strings.ContainsAny(o.ReadyMap, " \t;")) {
			errs = append(errs, field.Invalid(hf.Child("readyMap"), o.ReadyMap, "not an absolute path without spaces or ';' (the map file as haproxy.cfg names it)"))
		}
		switch o.Mode {
		case "", config.HAProxySlots, config.HAProxyDynamic:
		default:
			errs = append(errs, field.Invalid(hf.Child("mode"), o.Mode, fmt.Sprintf("not one of %s (the default), %s (HAProxy 3.0 and later)", config.HAProxySlots, config.HAProxyDynamic)))
		}
		if t := o.TLS; t != nil {
			for _, file := range []struct{ name, path string }{{"caFile", t.CAFile}, {"certFile", t.CertFile}, {"keyFile", t.KeyFile}} {
				if !strings.HasPrefix(file.path, "/") {
					errs = append(errs, field.Invalid(hf.Child("tls", file.name), file.path, "want the absolute path of a PEM file in the controller's container"))
				}
			}
			for j, a := range lb.Instances.Static {
				if !strings.HasPrefix(a, "tcp://") {
					errs = append(errs, field.Invalid(static.Index(j), a, "haproxy.tls needs tcp://host:port addresses"))
				}
			}
		}
	}
	tls := lb.HAProxy != nil && lb.HAProxy.TLS != nil
	for j, a := range lb.Instances.Static {
		if tls && !strings.HasPrefix(a, "tcp://") {
			continue // said above: tls needs tcp://
		}
		if err := CheckAddress(a); err != nil {
			errs = append(errs, field.Invalid(static.Index(j), a, err.Error()))
		}
	}
	return errs
}

// CheckAddress checks an instance's Runtime API address: unix:///path or
// tcp://host:port.
// Its error says what is wrong, not the address (the caller names it).
func CheckAddress(a string) error {
	u, err := url.Parse(a)
	if err != nil {
		return fmt.Errorf("want unix:///path or tcp://host:port: %w", unwrapURL(err))
	}
	switch u.Scheme {
	case "unix":
		if u.Path == "" {
			return errors.New("want unix:///path/to/admin.sock")
		}
		return nil
	case "tcp":
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return errors.New("want tcp://host:port")
		}
		return nil
	}
	return errors.New("not unix:///path or tcp://host:port")
}

// unwrapURL is a url.Parse error without the address it quotes (the
// caller names the address).
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// InstanceAddress is the Runtime API of an instance found behind a
// Service: tcp://ip:port.
func (Driver) InstanceAddress(_ config.LoadBalancer, ep netip.AddrPort) string {
	return "tcp://" + ep.String()
}

// New returns the instance at addr with lb's haproxy options.
func (Driver) New(lb config.LoadBalancer, addr string, log logr.Logger) (backend.Instance, error) {
	opts := []Option{WithLogger(log.WithValues("loadBalancer", lb.Name))}
	if o := lb.HAProxy; o != nil {
		if o.ReadyMap != "" {
			opts = append(opts, WithReadyMap(o.ReadyMap))
		}
		if o.Mode == config.HAProxyDynamic {
			opts = append(opts, WithDynamicServers())
		}
		if t := o.TLS; t != nil {
			opts = append(opts, WithTLS(TLSFiles{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}))
		}
	}
	return New(addr, lb.Timeout.Duration, opts...)
}

// LostStateHint: save the state before a reload (the reload helper does).
func (Driver) LostStateHint() string {
	return "a restart, or a reload without saving the server state first (stickydrain-haproxy reload)"
}
