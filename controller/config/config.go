// Package config reads and validates the controller's configuration file:
// the load balancers, their type and their instances.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Load-balancer types.
const (
	TypeHAProxy   = "haproxy"
	TypeNGINXPlus = "nginx-plus"
)

// Config is the file given with --config.
//
//	loadBalancers:
//	  - name: edge
//	    type: haproxy
//	    instances:
//	      static: ["unix:///var/run/haproxy/admin.sock", "tcp://127.0.0.1:9999"]
//	  - name: internal
//	    type: haproxy
//	    instances:
//	      service: {namespace: lb, name: haproxy-runtime, port: runtime}
//	resync: 30s
type Config struct {
	LoadBalancers []LoadBalancer `json:"loadBalancers"`
	// Resync is how often every upstream is reconciled without an event,
	// to repair what no event announces (a load-balancer restart). Default
	// 30s.
	Resync Duration `json:"resync,omitempty"`
	// DrainNotReady routes endpoints that are not ready and not
	// terminating as draining instead of not at all, as haproxy-ingress
	// does. Default false.
	DrainNotReady bool `json:"drainNotReady,omitempty"`
	// KeepDrainingWhenNotServing keeps a terminating endpoint draining even
	// when it no longer passes its readiness probe. Default false: it is
	// marked down.
	KeepDrainingWhenNotServing bool `json:"keepDrainingWhenNotServing,omitempty"`
}

// LoadBalancer is one load balancer and how to reach its instances.
type LoadBalancer struct {
	Name      string    `json:"name"`
	Type      string    `json:"type"`
	Instances Instances `json:"instances"`
	// Timeout bounds one call to one instance. Default 5s.
	Timeout Duration `json:"timeout,omitempty"`
	// NGINXPlus holds the API options of a nginx-plus load balancer.
	NGINXPlus *NGINXPlusOptions `json:"nginxPlus,omitempty"`
	// HAProxy holds the options of an haproxy load balancer.
	HAProxy *HAProxyOptions `json:"haproxy,omitempty"`
}

// HAProxyOptions are the options of an haproxy load balancer.
type HAProxyOptions struct {
	// ReadyMap is the path, as HAProxy's configuration names it, of an
	// empty map file whose key "filled" the controller sets on each
	// process once it holds every server, so that a readiness check on it
	// keeps a restarted or new replica out of rotation until then. Empty:
	// no marker.
	ReadyMap string `json:"readyMap,omitempty"`
}

// NGINXPlusOptions say how to talk to the NGINX Plus API. Credentials come
// from mounted files only.
type NGINXPlusOptions struct {
	// APIVersion pins the API version (4–9); 0 negotiates the newest both
	// sides speak.
	APIVersion int `json:"apiVersion,omitempty"`
	// CAFile verifies an https API against this CA bundle.
	CAFile string `json:"caFile,omitempty"`
	// InsecureSkipVerify skips TLS verification.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
	// BasicAuthFile holds user:password.
	BasicAuthFile string `json:"basicAuthFile,omitempty"`
	// HeaderFile holds extra request headers, one "Name: value" a line.
	HeaderFile string `json:"headerFile,omitempty"`
}

// Instances is a static list of addresses or a Service whose ready
// endpoints are the instances (an HAProxy Deployment of N replicas).
type Instances struct {
	Static  []string    `json:"static,omitempty"`
	Service *ServiceRef `json:"service,omitempty"`
}

// ServiceRef names a Service and the port of its endpoints to use.
type ServiceRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Port is the EndpointSlice port name or number of the runtime API.
	Port string `json:"port"`
}

// Duration is a time.Duration written as "30s".
type Duration struct{ time.Duration }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := yaml.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration; want e.g. 30s, 5m", s)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// Parse reads and validates a configuration.
func Parse(b []byte) (*Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("parsing configuration: %w", err)
	}
	if c.Resync.Duration == 0 {
		c.Resync.Duration = 30 * time.Second
	}
	for i := range c.LoadBalancers {
		if c.LoadBalancers[i].Timeout.Duration == 0 {
			c.LoadBalancers[i].Timeout.Duration = 5 * time.Second
		}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Load reads the file at path.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading configuration: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate reports every problem, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if len(c.LoadBalancers) == 0 {
		bad("loadBalancers", "empty; want at least one load balancer")
	}
	if c.Resync.Duration < time.Second {
		bad("resync", "%s is too short; want at least 1s", c.Resync.Duration)
	}
	seen := map[string]bool{}
	for i, lb := range c.LoadBalancers {
		f := fmt.Sprintf("loadBalancers[%d]", i)
		if !nameRE.MatchString(lb.Name) {
			bad(f+".name", "%q is not a DNS label (lower-case letters, digits, -)", lb.Name)
		} else if seen[lb.Name] {
			bad(f+".name", "%q is used twice", lb.Name)
		}
		seen[lb.Name] = true
		switch lb.Type {
		case TypeHAProxy, TypeNGINXPlus:
		default:
			bad(f+".type", "%q is not one of %s, %s", lb.Type, TypeHAProxy, TypeNGINXPlus)
		}
		if o := lb.NGINXPlus; o != nil {
			if lb.Type != TypeNGINXPlus {
				bad(f+".nginxPlus", "only for type %s", TypeNGINXPlus)
			}
			if o.APIVersion != 0 && (o.APIVersion < 4 || o.APIVersion > 9) {
				bad(f+".nginxPlus.apiVersion", "%d is not supported; want 4 to 9, or 0 to negotiate", o.APIVersion)
			}
		}
		if o := lb.HAProxy; o != nil {
			if lb.Type != TypeHAProxy {
				bad(f+".haproxy", "only for type %s", TypeHAProxy)
			}
			if o.ReadyMap != "" && (!strings.HasPrefix(o.ReadyMap, "/") || strings.ContainsAny(o.ReadyMap, " \t;")) {
				bad(f+".haproxy.readyMap", "%q is not an absolute path without spaces or ';' (the map file as haproxy.cfg names it)", o.ReadyMap)
			}
		}
		if lb.Timeout.Duration <= 0 {
			bad(f+".timeout", "want a positive duration")
		}
		in := lb.Instances
		switch {
		case len(in.Static) > 0 && in.Service != nil:
			bad(f+".instances", "give static or service, not both")
		case len(in.Static) == 0 && in.Service == nil:
			bad(f+".instances", "empty; want static: [addresses] or service: {namespace, name, port}")
		}
		for j, a := range in.Static {
			if err := CheckAddress(lb.Type, a); err != nil {
				bad(fmt.Sprintf("%s.instances.static[%d]", f, j), "%v", err)
			}
		}
		if s := in.Service; s != nil {
			if s.Namespace == "" || s.Name == "" || s.Port == "" {
				bad(f+".instances.service", "want namespace, name and port (the endpoint port name or number)")
			}
		}
	}
	return errors.Join(errs...)
}

// CheckAddress checks one instance address: for haproxy unix:///path or
// tcp://host:port (the Runtime API), for nginx-plus http(s)://host:port/api.
func CheckAddress(typ, a string) error {
	u, err := url.Parse(a)
	if err != nil {
		return fmt.Errorf("%q: %w", a, err)
	}
	switch typ {
	case TypeHAProxy:
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
	case TypeNGINXPlus:
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%q: want http(s)://host:port/api", a)
		}
	}
	return nil
}
