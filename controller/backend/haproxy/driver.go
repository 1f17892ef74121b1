package haproxy

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	"github.com/go-logr/logr"

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
func (Driver) Validate(f string, lb config.LoadBalancer) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if o := lb.HAProxy; o != nil {
		if o.ReadyMap != "" && (!strings.HasPrefix(o.ReadyMap, "/") || strings.ContainsAny(o.ReadyMap, " \t;")) {
			bad(f+".haproxy.readyMap", "%q is not an absolute path without spaces or ';' (the map file as haproxy.cfg names it)", o.ReadyMap)
		}
		switch o.Mode {
		case "", config.HAProxySlots, config.HAProxyDynamic:
		default:
			bad(f+".haproxy.mode", "%q is not one of %s (the default), %s (HAProxy 3.0 and later)", o.Mode, config.HAProxySlots, config.HAProxyDynamic)
		}
		if t := o.TLS; t != nil {
			for _, file := range []struct{ name, path string }{{"caFile", t.CAFile}, {"certFile", t.CertFile}, {"keyFile", t.KeyFile}} {
				if !strings.HasPrefix(file.path, "/") {
					bad(f+".haproxy.tls."+file.name, "%q: want the absolute path of a PEM file in the controller's container", file.path)
				}
			}
			for j, a := range lb.Instances.Static {
				if !strings.HasPrefix(a, "tcp://") {
					bad(fmt.Sprintf("%s.instances.static[%d]", f, j), "%q: haproxy.tls needs tcp://host:port addresses", a)
				}
			}
		}
	}
	for j, a := range lb.Instances.Static {
		if err := CheckAddress(a); err != nil {
			bad(fmt.Sprintf("%s.instances.static[%d]", f, j), "%v", err)
		}
	}
	return errs
}

// CheckAddress checks an instance's Runtime API address: unix:///path or
// tcp://host:port.
func CheckAddress(a string) error {
	u, err := url.Parse(a)
	if err != nil {
		return fmt.Errorf("%q: %w", a, err)
	}
	switch u.Scheme {
	case "unix":
		if u.Path == "" {
			return fmt.Errorf("%q: want unix:///path/to/admin.sock", a)
		}
		return nil
	case "tcp":
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return fmt.Errorf("%q: want tcp://host:port", a)
		}
		return nil
	}
	return fmt.Errorf("%q is not unix:///path or tcp://host:port", a)
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
