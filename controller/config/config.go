// Package config reads and validates the controller's configuration file:
// the load balancers, their type and their instances.
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// TypeChecker checks what belongs to a load balancer's type — that the
// type exists, its options, its instance addresses — for Validate: the
// backends' drivers know it (backend.Registry implements it). Each error
// is a field error under path (loadBalancers[i]).
type TypeChecker interface {
	CheckType(path *field.Path, lb LoadBalancer) field.ErrorList
}

// Config is the file given with --config.
//
//	loadBalancers:
//	  - name: edge
//	    type: haproxy
//	    instances:
//	      static: ["unix:///var/run/haproxy/admin.sock", "tcp://127.0.0.1:9999"]
//	    allowedNamespaces: {names: [shop, billing]}
//	    upstreams:
//	      - {name: checkout, owner: shop/checkout}
//	  - name: internal
//	    type: haproxy
//	    instances:
//	      service: {namespace: lb, name: haproxy-runtime, port: runtime}
//	    allowedNamespaces: {selector: {matchLabels: {stickydrain.io/lb-internal: allowed}}}
//	resync: 30s
//
// Nothing may map onto a load balancer until its allowedNamespaces (or an
// upstream's) says who may: a namespace user can write annotations and
// EndpointSlices, and must not be able to point a load balancer the
// operator did not give them at their pods, or at any address.
type Config struct {
	// LoadBalancers are the load balancers Services may map onto, each by
	// its name. At least one.
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
	// EnvoyGateway lists the Envoy Gateway Gateways whose sticky route
	// rules (sessionPersistence) keep their sessions on draining pods: the
	// controller keeps one EnvoyPatchPolicy per Gateway that lets those
	// rules' clusters route a session's cookie to a DRAINING endpoint.
	// Empty: none (the controller does not watch Gateway API objects).
	EnvoyGateway *EnvoyGateway `json:"envoyGateway,omitempty"`
}

// EnvoyGateway is the Envoy Gateway integration (docs/ingress.md, "Envoy
// Gateway").
type EnvoyGateway struct {
	// Gateways are the Gateways whose routes are kept sticky through
	// drains, each with the namespaces whose routes may be.
	Gateways []Gateway `json:"gateways"`
}

// Gateway is one Gateway (gateway.networking.k8s.io) served by Envoy
// Gateway.
type Gateway struct {
	// Namespace and Name name the Gateway. Its EnvoyPatchPolicy,
	// stickydrain-<name>, is kept in this namespace (Envoy Gateway applies
	// a policy only to a Gateway of its own namespace).
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// AllowedNamespaces are the namespaces whose HTTPRoutes on this Gateway
	// may be kept sticky through drains. Unset: none (a
	// route of another namespace gets a RouteNotAllowed Event).
	AllowedNamespaces *Namespaces `json:"allowedNamespaces,omitempty"`
	// ActiveHealthChecks says what to do with a sticky rule whose route an
	// active health check covers (a BackendTrafficPolicy with
	// healthCheck.active): Envoy treats a host failing an active health
	// check like a DRAINING one in this setting (envoy issue 23213), so
	// allowing DRAINING would also send sessions to failing hosts.
	// "refuse" (default): the rule is left as Envoy Gateway made it, with a
	// Warning Event on the route; "allow": the rule gets the setting
	// anyway, with a Warning Event saying what it costs.
	ActiveHealthChecks string `json:"activeHealthChecks,omitempty"`
}

// Values of Gateway.ActiveHealthChecks.
const (
	ActiveHealthChecksRefuse = "refuse"
	ActiveHealthChecksAllow  = "allow"
)

// LoadBalancer is one load balancer and how to reach its instances.
type LoadBalancer struct {
	// Name is the <lb> of the stickydrain.io/upstreams annotation: a DNS
	// label, unique in the file.
	Name string `json:"name"`
	// Type is haproxy (the Runtime API) or nginx-plus (the NGINX Plus API).
	Type string `json:"type"`
	// Instances are the load balancer's instances; every one gets every
	// change.
	Instances Instances `json:"instances"`
	// Timeout bounds one call to one instance. Default 5s.
	Timeout Duration `json:"timeout,omitempty"`
	// NGINXPlus holds the API options of a nginx-plus load balancer.
	NGINXPlus *NGINXPlusOptions `json:"nginxPlus,omitempty"`
	// HAProxy holds the options of an haproxy load balancer.
	HAProxy *HAProxyOptions `json:"haproxy,omitempty"`
	// AllowedNamespaces are the namespaces whose Services may map onto
	// this load balancer's upstreams. Unset: none may (every mapping is
	// refused with an UpstreamNotAllowed Event).
	AllowedNamespaces *Namespaces `json:"allowedNamespaces,omitempty"`
	// Upstreams give single upstreams their own allowed namespaces, or pin
	// them to one Service.
	Upstreams []Upstream `json:"upstreams,omitempty"`
	// ListedUpstreamsOnly: only the upstreams listed under upstreams (a
	// name alone lists one) are the controller's, and allowedNamespaces
	// covers those alone; a Service mapping any other backend of the load
	// balancer (the operator's own: an admin backend, a static one) is
	// refused with UpstreamNotAllowed (reason NotListed). Default true.
	// false: allowedNamespaces covers every backend of the load
	// balancer's instances, whatever they are (logged as a warning).
	ListedUpstreamsOnly *bool `json:"listedUpstreamsOnly,omitempty"`
	// AllowEndpointsWithoutPods lets endpoints that are not one of a Pod's
	// own addresses in the Service's namespace (selector-less Services,
	// hand-written EndpointSlices) become servers. Default false: they are
	// refused with an EndpointNotAllowed Event.
	AllowEndpointsWithoutPods bool `json:"allowEndpointsWithoutPods,omitempty"`
	// AllowedCIDRs, when set, bound every server address of this load
	// balancer, whether a Pod's or not (for example the pod network,
	// 10.244.0.0/16). Empty: no bound beyond the Pod rule.
	AllowedCIDRs []string `json:"allowedCIDRs,omitempty"`
}

// Namespaces select namespaces, as Gateway API's allowedRoutes does: by
// name, by label, or all. A namespace matching names or selector is
// allowed.
type Namespaces struct {
	// All allows every namespace: for a cluster with a single tenant.
	All bool `json:"all,omitempty"`
	// Names lists namespaces by name.
	Names []string `json:"names,omitempty"`
	// Selector selects namespaces by their labels (which only those who
	// may edit Namespaces can change).
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// Upstream is the rule of one upstream of a load balancer.
type Upstream struct {
	// Name is the upstream (HAProxy backend, NGINX Plus upstream).
	Name string `json:"name"`
	// AllowedNamespaces, when set, replace the load balancer's for this
	// upstream.
	AllowedNamespaces *Namespaces `json:"allowedNamespaces,omitempty"`
	// Owner pins the upstream to one Service, "namespace/name": no other
	// Service may map onto it, whatever the order they were created in.
	Owner string `json:"owner,omitempty"`
}

// HAProxyOptions are the options of an haproxy load balancer.
type HAProxyOptions struct {
	// ReadyMap is the path, as HAProxy's configuration names it, of an
	// empty map file whose key "filled" the controller sets on each
	// process once it holds every server, so that a readiness check on it
	// keeps a restarted or new replica out of rotation until then. Empty:
	// no marker.
	ReadyMap string `json:"readyMap,omitempty"`
	// Mode is how an upstream's servers are held: "slots" (the default;
	// every HAProxy version): the backend's server-template slots, which
	// a reload keeps through the server-state-file; or "dynamic" (HAProxy
	// 3.0 and later): servers the controller adds (`add server … cookie`)
	// and deletes, with no slot limit, which a reload or restart empties
	// until they are added again (the reload helper does it at once).
	Mode string `json:"mode,omitempty"`
	// TLS authenticates both ends of the Runtime API on TCP: the
	// controller presents a client certificate, which HAProxy's
	// `stats socket … ssl crt … ca-file … verify required` checks, and
	// verifies HAProxy's. Without it, anything that reaches a TCP Runtime
	// API at `level admin` can drain or kill servers (docs/security.md).
	TLS *RuntimeTLS `json:"tls,omitempty"`
}

// RuntimeTLS are the files of a mutually authenticated Runtime API (for
// example a cert-manager Secret mounted into the controller); they are
// read at each connection, so a renewed certificate is used at once.
type RuntimeTLS struct {
	// CAFile verifies HAProxy's serving certificate.
	CAFile string `json:"caFile"`
	// CertFile and KeyFile are the controller's client certificate.
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	// ServerName is the name HAProxy's certificate must carry; default:
	// the instance address's host (a pod IP when instances come from a
	// Service: name the Service's DNS name here).
	ServerName string `json:"serverName,omitempty"`
}

// The modes of HAProxyOptions.Mode.
const (
	HAProxySlots   = "slots"
	HAProxyDynamic = "dynamic"
)

// NGINXPlusOptions say how to talk to the NGINX Plus API. Credentials come
// from mounted files only.
type NGINXPlusOptions struct {
	// APIVersion pins the API version (4–9); 0 negotiates the newest both
	// sides speak.
	APIVersion int `json:"apiVersion,omitempty"`
	// CAFile verifies an https API against this CA bundle.
	CAFile string `json:"caFile,omitempty"`
	// CertFile and KeyFile are the client certificate the controller
	// presents to an https API that asks for one (NGINX's
	// `ssl_verify_client on` on the API's server block). They are read at
	// each connection, so a renewed certificate is used at once. Both or
	// neither.
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// ServerName is the name the API's certificate must carry; default:
	// the instance address's host (a pod IP when instances come from a
	// Service: name the Service's DNS name here).
	ServerName string `json:"serverName,omitempty"`
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
	// Static lists addresses: for haproxy unix:///path or tcp://host:port
	// (the Runtime API, level admin), for nginx-plus
	// http(s)://host:port/api.
	Static []string `json:"static,omitempty"`
	// Service finds the instances as the endpoints of a Service, ready or
	// not (a new replica is filled before it turns ready).
	Service *ServiceRef `json:"service,omitempty"`
}

// ServiceRef names a Service and the port of its endpoints to use.
type ServiceRef struct {
	// Namespace is the Service's namespace.
	Namespace string `json:"namespace"`
	// Name is the Service's name.
	Name string `json:"name"`
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
func Parse(b []byte, types TypeChecker) (*Config, error) {
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
	if c.EnvoyGateway != nil {
		for i := range c.EnvoyGateway.Gateways {
			if c.EnvoyGateway.Gateways[i].ActiveHealthChecks == "" {
				c.EnvoyGateway.Gateways[i].ActiveHealthChecks = ActiveHealthChecksRefuse
			}
		}
	}
	if err := c.Validate(types); err != nil {
		return nil, err
	}
	return &c, nil
}

// Load reads the file at path.
func Load(path string, types TypeChecker) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading configuration: %w", err)
	}
	c, err := Parse(b, types)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate reports every problem as a field error (k8s.io/apimachinery's
// field.Error: the field's path, what is wrong with its value and the
// accepted form), one per line: what every load balancer shares here,
// what belongs to its type from types.
func (c *Config) Validate(types TypeChecker) error {
	if types == nil {
		return errors.New("config: no load-balancer types to check against (a build registers them: controller/drivers)")
	}
	var errs field.ErrorList
	if c.Resync.Duration < time.Second {
		errs = append(errs, field.Invalid(field.NewPath("resync"), c.Resync.String(), "too short; want at least 1s"))
	}
	seen := map[string]bool{}
	for i, lb := range c.LoadBalancers {
		f := field.NewPath("loadBalancers").Index(i)
		if lb.Name == "" {
			errs = append(errs, field.Required(f.Child("name"), "a DNS label (lower-case letters, digits, -) that Services' stickydrain.io/upstreams name"))
		} else if !nameRE.MatchString(lb.Name) {
			errs = append(errs, field.Invalid(f.Child("name"), lb.Name, "not a DNS label (lower-case letters, digits, -)"))
		} else if seen[lb.Name] {
			errs = append(errs, field.Duplicate(f.Child("name"), lb.Name))
		}
		seen[lb.Name] = true
		errs = append(errs, types.CheckType(f, lb)...)
		errs = append(errs, validateTenancy(f, lb)...)
		if lb.Timeout.Duration <= 0 {
			errs = append(errs, field.Invalid(f.Child("timeout"), lb.Timeout.String(), "want a positive duration such as 5s"))
		}
		in, inf := lb.Instances, f.Child("instances")
		switch {
		case len(in.Static) > 0 && in.Service != nil:
			errs = append(errs, field.Forbidden(inf, "give static or service, not both"))
		case len(in.Static) == 0 && in.Service == nil:
			errs = append(errs, field.Required(inf, "want static: [addresses] or service: {namespace, name, port}"))
		}
		if s := in.Service; s != nil {
			if s.Namespace == "" || s.Name == "" || s.Port == "" {
				errs = append(errs, field.Required(inf.Child("service"), "want namespace, name and port (the endpoint port name or number)"))
			}
		}
	}
	if eg := c.EnvoyGateway; eg != nil {
		gw := field.NewPath("envoyGateway", "gateways")
		if len(eg.Gateways) == 0 {
			errs = append(errs, field.Required(gw, "want [{namespace, name, allowedNamespaces}], or leave envoyGateway out"))
		}
		seenGW := map[string]bool{}
		for i, g := range eg.Gateways {
			f := gw.Index(i)
			if g.Namespace == "" {
				errs = append(errs, field.Required(f.Child("namespace"), "the Gateway's namespace"))
			} else if !nameRE.MatchString(g.Namespace) {
				errs = append(errs, field.Invalid(f.Child("namespace"), g.Namespace, "not a namespace name (a DNS label)"))
			}
			if !objectNameRE.MatchString(g.Name) || len(g.Name) > 253-len(GatewayPolicyPrefix) {
				errs = append(errs, field.Invalid(f.Child("name"), g.Name, fmt.Sprintf("not a Gateway name (lower-case letters, digits, - and ., at most %d characters)", 253-len(GatewayPolicyPrefix))))
			}
			key := g.Namespace + "/" + g.Name
			if seenGW[key] {
				errs = append(errs, field.Duplicate(f, key))
			}
			seenGW[key] = true
			errs = append(errs, validateNamespaces(f.Child("allowedNamespaces"), g.AllowedNamespaces)...)
			switch g.ActiveHealthChecks {
			case "", ActiveHealthChecksRefuse, ActiveHealthChecksAllow:
			default:
				errs = append(errs, field.NotSupported(f.Child("activeHealthChecks"), g.ActiveHealthChecks, []string{ActiveHealthChecksRefuse, ActiveHealthChecksAllow}))
			}
		}
	}
	return joinFieldErrors(errs)
}

// joinFieldErrors is errs as one error, one per line (nil when none); each
// stays a *field.Error for errors.As.
func joinFieldErrors(errs field.ErrorList) error {
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// GatewayPolicyPrefix begins the name of the EnvoyPatchPolicy the
// controller keeps for a Gateway: stickydrain-<gateway>.
const GatewayPolicyPrefix = "stickydrain-"

var objectNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)

// UpstreamNameRE is what an upstream name may be (an HAProxy backend or
// NGINX Plus upstream name): no spaces, ';', '/' or ','.
var UpstreamNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

func validateTenancy(f *field.Path, lb LoadBalancer) field.ErrorList {
	errs := validateNamespaces(f.Child("allowedNamespaces"), lb.AllowedNamespaces)
	seen := map[string]bool{}
	for j, u := range lb.Upstreams {
		uf := f.Child("upstreams").Index(j)
		switch {
		case u.Name == "":
			errs = append(errs, field.Required(uf.Child("name"), "the upstream's name (an HAProxy backend, an NGINX Plus upstream)"))
		case !UpstreamNameRE.MatchString(u.Name):
			errs = append(errs, field.Invalid(uf.Child("name"), u.Name, "not an upstream name (letters, digits, _ . : -)"))
		case seen[u.Name]:
			errs = append(errs, field.Duplicate(uf.Child("name"), u.Name))
		}
		seen[u.Name] = true
		errs = append(errs, validateNamespaces(uf.Child("allowedNamespaces"), u.AllowedNamespaces)...)
		if u.Owner != "" {
			ns, name, ok := strings.Cut(u.Owner, "/")
			if !ok || !nameRE.MatchString(ns) || !serviceRE.MatchString(name) {
				errs = append(errs, field.Invalid(uf.Child("owner"), u.Owner, "not namespace/name of a Service"))
			}
			if u.AllowedNamespaces != nil {
				errs = append(errs, field.Forbidden(uf.Child("allowedNamespaces"), "give owner or allowedNamespaces, not both: an owner is the only Service that may map the upstream"))
			}
		}
		if u.Owner == "" && u.AllowedNamespaces == nil && !lb.ListsUpstreams() {
			errs = append(errs, field.Required(uf, "want owner or allowedNamespaces (a name alone lists an upstream as the controller's only where listedUpstreamsOnly is true, the default)"))
		}
	}
	for j, c := range lb.AllowedCIDRs {
		p, err := netip.ParsePrefix(c)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(f.Child("allowedCIDRs").Index(j), c, "not a network in CIDR form, such as 10.244.0.0/16 or fd00::/64"))
		case p.Masked() != p:
			errs = append(errs, field.Invalid(f.Child("allowedCIDRs").Index(j), c, fmt.Sprintf("host bits set; want the network, %s", p.Masked())))
		}
	}
	return errs
}

var serviceRE = regexp.MustCompile(`^[a-z]([a-z0-9-]*[a-z0-9])?$`)

func validateNamespaces(f *field.Path, n *Namespaces) field.ErrorList {
	if n == nil {
		return nil
	}
	var errs field.ErrorList
	if n.All && (len(n.Names) > 0 || n.Selector != nil) {
		errs = append(errs, field.Forbidden(f, "all: true allows every namespace; names and selector would be ignored, remove them"))
	}
	if !n.All && len(n.Names) == 0 && n.Selector == nil {
		errs = append(errs, field.Required(f, "want names: [...], selector: {matchLabels: ...}, or all: true"))
	}
	for j, name := range n.Names {
		if !nameRE.MatchString(name) {
			errs = append(errs, field.Invalid(f.Child("names").Index(j), name, "not a namespace name (a DNS label)"))
		}
	}
	if n.Selector != nil {
		if _, err := metav1.LabelSelectorAsSelector(n.Selector); err != nil {
			errs = append(errs, field.Invalid(f.Child("selector"), field.OmitValueType{}, err.Error()))
		}
	}
	return errs
}

// ListsUpstreams reports whether only the listed upstreams are the
// controller's (ListedUpstreamsOnly, true unless set false).
func (lb LoadBalancer) ListsUpstreams() bool {
	return lb.ListedUpstreamsOnly == nil || *lb.ListedUpstreamsOnly
}

// WithLegacyDefaults reads c as a controller did before ListedUpstreamsOnly
// defaulted to true: each load balancer that does not set it covers every
// backend. It is how a configuration kept by such a controller (the
// applied ConfigMap) is read, so that the file, read as today, is checked
// against what really ran.
func (c *Config) WithLegacyDefaults() *Config {
	out := *c
	out.LoadBalancers = make([]LoadBalancer, len(c.LoadBalancers))
	for i, lb := range c.LoadBalancers {
		if lb.ListedUpstreamsOnly == nil {
			all := false
			lb.ListedUpstreamsOnly = &all
		}
		out.LoadBalancers[i] = lb
	}
	return &out
}

// OptionFields lists the type-specific option fields set on lb, by their
// names in the file: a driver takes its own (backend.Driver.OptionsField),
// and the others are refused.
func (lb LoadBalancer) OptionFields() []string {
	var out []string
	if lb.HAProxy != nil {
		out = append(out, "haproxy")
	}
	if lb.NGINXPlus != nil {
		out = append(out, "nginxPlus")
	}
	return out
}

// Warnings are legal settings the operator should know about at start
// and at each reload.
func (c *Config) Warnings() []string {
	var out []string
	if len(c.LoadBalancers) == 0 && c.EnvoyGateway == nil {
		out = append(out, "no load balancer configured (loadBalancers is empty): every Service mapping is refused until the operator adds one")
	}
	for _, lb := range c.LoadBalancers {
		if lb.AllowedNamespaces == nil && len(lb.Upstreams) == 0 {
			out = append(out, fmt.Sprintf("load balancer %s allows no namespace: every Service mapping onto it is refused (UpstreamNotAllowed) until allowedNamespaces or upstreams say who may", lb.Name))
		}
		if lb.ListsUpstreams() && lb.AllowedNamespaces != nil && len(lb.Upstreams) == 0 {
			out = append(out, fmt.Sprintf("load balancer %s lists no upstream: only the upstreams listed under upstreams are the controller's (listedUpstreamsOnly, true by default), so every Service mapping onto it is refused (UpstreamNotAllowed, NotListed) until upstreams lists them (a name alone lists one)", lb.Name))
		}
		if lb.AllowedNamespaces != nil && !lb.ListsUpstreams() {
			out = append(out, fmt.Sprintf("load balancer %s sets listedUpstreamsOnly: false: allowedNamespaces covers every backend of its instances, the operator's own included (an admin or static backend an allowed namespace could map and fill)", lb.Name))
		}
		if lb.AllowedNamespaces != nil && lb.AllowedNamespaces.All {
			out = append(out, fmt.Sprintf("load balancer %s allows every namespace (allowedNamespaces.all): any namespace user can map a Service onto its upstreams", lb.Name))
		}
		if lb.AllowEndpointsWithoutPods && len(lb.AllowedCIDRs) == 0 {
			out = append(out, fmt.Sprintf("load balancer %s takes endpoints without Pods from any address (allowEndpointsWithoutPods without allowedCIDRs): bound them with allowedCIDRs", lb.Name))
		}
	}
	if c.EnvoyGateway != nil {
		for _, g := range c.EnvoyGateway.Gateways {
			if g.AllowedNamespaces == nil {
				out = append(out, fmt.Sprintf("Gateway %s/%s allows no namespace: no route on it is kept sticky through drains (RouteNotAllowed) until allowedNamespaces says whose may", g.Namespace, g.Name))
			}
			if g.ActiveHealthChecks == ActiveHealthChecksAllow {
				out = append(out, fmt.Sprintf("Gateway %s/%s: activeHealthChecks allow: sessions of a health-checked sticky rule also stay on a host failing its active health check (envoy issue 23213)", g.Namespace, g.Name))
			}
		}
	}
	return out
}
