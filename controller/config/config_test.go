package config_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/drivers"
)

func TestParse(t *testing.T) {
	c, err := config.Parse([]byte(`
loadBalancers:
  - name: edge
    type: haproxy
    haproxy: {readyMap: /etc/haproxy/stickydrain-ready.map}
    instances:
      static: ["unix:///run/haproxy/a.sock", "tcp://127.0.0.1:9999"]
  - name: internal
    type: haproxy
    timeout: 2s
    instances:
      service: {namespace: lb, name: haproxy, port: runtime}
resync: 1m
`), drivers.New())
	if err != nil {
		t.Fatal(err)
	}
	if c.Resync.Duration != time.Minute || c.LoadBalancers[0].Timeout.Duration != 5*time.Second || c.LoadBalancers[1].Timeout.Duration != 2*time.Second ||
		c.LoadBalancers[0].HAProxy == nil || c.LoadBalancers[0].HAProxy.ReadyMap != "/etc/haproxy/stickydrain-ready.map" {
		t.Errorf("parsed %+v", c)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"unknown field", "loadBalancers: []\nresinc: 1m\n", `unknown field "resinc"`},
		{"bad type", "loadBalancers: [{name: a, type: f5, instances: {static: [\"tcp://h:1\"]}}]", `loadBalancers[0].type: Unsupported value: "f5": supported values: "haproxy", "nginx-plus"`},
		{"no name", "loadBalancers: [{type: haproxy, instances: {static: [\"tcp://h:1\"]}}]", "loadBalancers[0].name: Required value: a DNS label"},
		{"no type", "loadBalancers: [{name: a, instances: {static: [\"tcp://h:1\"]}}]", `loadBalancers[0].type: Required value: one of haproxy, nginx-plus`},
		{"an upstream without a name", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, upstreams: [{owner: a/b}]}]", "loadBalancers[0].upstreams[0].name: Required value: the upstream's name"},
		{"not a CIDR", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, allowedCIDRs: [pods]}]", `loadBalancers[0].allowedCIDRs[0]: Invalid value: "pods": not a network in CIDR form`},
		{"an unparsable address", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://a b:1\"]}}]", `loadBalancers[0].instances.static[0]: Invalid value: "tcp://a b:1": want unix:///path or tcp://host:port: invalid character " " in host name`},
		{"bad address", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"h:1\"]}}]", `loadBalancers[0].instances.static[0]: Invalid value: "h:1": not unix:///path or tcp://host:port`},
		{"both instance kinds", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"], service: {namespace: n, name: s, port: p}}}]", "loadBalancers[0].instances: Forbidden: give static or service, not both"},
		{"duplicate name", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}}, {name: a, type: haproxy, instances: {static: [\"tcp://h:2\"]}}]", `loadBalancers[1].name: Duplicate value: "a"`},
		{"relative ready map", "loadBalancers: [{name: a, type: haproxy, haproxy: {readyMap: ready.map}, instances: {static: [\"tcp://h:1\"]}}]", `loadBalancers[0].haproxy.readyMap: Invalid value: "ready.map": not an absolute path`},
		{"unknown haproxy mode", "loadBalancers: [{name: a, type: haproxy, haproxy: {mode: dyn}, instances: {static: [\"tcp://h:1\"]}}]", `loadBalancers[0].haproxy.mode: Invalid value: "dyn": not one of slots (the default), dynamic (HAProxy 3.0 and later)`},
		{"relative tls file", "loadBalancers: [{name: a, type: haproxy, haproxy: {tls: {caFile: ca.crt, certFile: /c, keyFile: /k}}, instances: {static: [\"tcp://h:1\"]}}]", `loadBalancers[0].haproxy.tls.caFile: Invalid value: "ca.crt": want the absolute path of a PEM file`},
		{"tls on a unix socket", "loadBalancers: [{name: a, type: haproxy, haproxy: {tls: {caFile: /ca, certFile: /c, keyFile: /k}}, instances: {static: [\"unix:///run/admin.sock\"]}}]", `loadBalancers[0].instances.static[0]: Invalid value: "unix:///run/admin.sock": haproxy.tls needs tcp://host:port addresses`},
		{"haproxy options on nginx-plus", "loadBalancers: [{name: a, type: nginx-plus, haproxy: {readyMap: /r.map}, instances: {static: [\"http://h:1/api\"]}}]", `loadBalancers[0].haproxy: Forbidden: only for type haproxy`},
		{"both all and names", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, allowedNamespaces: {all: true, names: [shop]}}]", "loadBalancers[0].allowedNamespaces: Forbidden: all: true allows every namespace"},
		{"empty namespaces", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, allowedNamespaces: {}}]", "loadBalancers[0].allowedNamespaces: Required value: want names"},
		{"bad namespace name", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, allowedNamespaces: {names: [Shop]}}]", `loadBalancers[0].allowedNamespaces.names[0]: Invalid value: "Shop": not a namespace name`},
		{"bad selector", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, allowedNamespaces: {selector: {matchExpressions: [{key: t, operator: Near}]}}}]", "loadBalancers[0].allowedNamespaces.selector: Invalid value: "},
		{"bad owner", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, upstreams: [{name: shop, owner: shop}]}]", `loadBalancers[0].upstreams[0].owner: Invalid value: "shop": not namespace/name of a Service`},
		{"owner and namespaces", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, upstreams: [{name: shop, owner: shop/shop, allowedNamespaces: {names: [b]}}]}]", "loadBalancers[0].upstreams[0].allowedNamespaces: Forbidden: give owner or allowedNamespaces, not both"},
		{"upstream without a rule", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, listedUpstreamsOnly: false, upstreams: [{name: shop}]}]", "loadBalancers[0].upstreams[0]: Required value: want owner or allowedNamespaces"},
		{"upstream twice", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, upstreams: [{name: shop, owner: a/b}, {name: shop, owner: a/c}]}]", `loadBalancers[0].upstreams[1].name: Duplicate value: "shop"`},
		{"bad upstream name", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, upstreams: [{name: \"sh op\", owner: a/b}]}]", `loadBalancers[0].upstreams[0].name: Invalid value: "sh op": not an upstream name`},
		{"bad CIDR", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, allowedCIDRs: [10.0.0.1/8]}]", `loadBalancers[0].allowedCIDRs[0]: Invalid value: "10.0.0.1/8": host bits set; want the network, 10.0.0.0/8`},
		{"bad duration", "resync: soon\nloadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}}]", `"soon" is not a duration`},
		{"gateway without namespace", "envoyGateway: {gateways: [{name: public}]}", `envoyGateway.gateways[0].namespace: Required value: the Gateway's namespace`},
		{"bad gateway name", "envoyGateway: {gateways: [{namespace: gw, name: Public}]}", `envoyGateway.gateways[0].name: Invalid value: "Public": not a Gateway name`},
		{"gateway twice", "envoyGateway: {gateways: [{namespace: gw, name: a}, {namespace: gw, name: a}]}", `envoyGateway.gateways[1]: Duplicate value: "gw/a"`},
		{"no gateways", "envoyGateway: {gateways: []}", "envoyGateway.gateways: Required value: want [{namespace, name, allowedNamespaces}]"},
		{"bad health-check choice", "envoyGateway: {gateways: [{namespace: gw, name: a, activeHealthChecks: warn}]}", `envoyGateway.gateways[0].activeHealthChecks: Unsupported value: "warn": supported values: "refuse", "allow"`},
		{"gateway namespaces empty", "envoyGateway: {gateways: [{namespace: gw, name: a, allowedNamespaces: {}}]}", "envoyGateway.gateways[0].allowedNamespaces: Required value: want names"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tt.yaml), drivers.New())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// Every problem is a field error (apimachinery's field.Error, as the API
// server reports a bad object), one a line: a tool finds the path and the
// kind of each with errors.As.
func TestValidationErrorsAreFieldErrors(t *testing.T) {
	_, err := config.Parse([]byte("resync: 100ms\nloadBalancers: [{name: A, type: haproxy, instances: {static: [\"tcp://h:1\"]}}]"), drivers.New())
	var fe *field.Error
	if !errors.As(err, &fe) || fe.Field != "resync" || fe.Type != field.ErrorTypeInvalid || fe.BadValue != "100ms" {
		t.Fatalf("error %v (%#v), want a field error for resync first", err, fe)
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{`resync: Invalid value: "100ms": too short; want at least 1s`, `loadBalancers[0].name: Invalid value: "A": not a DNS label (lower-case letters, digits, -)`}
	if !slices.Equal(lines, want) {
		t.Errorf("errors\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestEnvoyGatewayDefaultsAndWarnings(t *testing.T) {
	c, err := config.Parse([]byte(`
envoyGateway:
  gateways:
    - {namespace: gw, name: public, allowedNamespaces: {names: [shop]}}
    - {namespace: gw, name: closed}
    - {namespace: gw, name: checked, allowedNamespaces: {all: true}, activeHealthChecks: allow}
`), drivers.New())
	if err != nil {
		t.Fatal(err)
	}
	if got := c.EnvoyGateway.Gateways[0].ActiveHealthChecks; got != config.ActiveHealthChecksRefuse {
		t.Errorf("activeHealthChecks defaults to %q, want refuse", got)
	}
	ws := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{"Gateway gw/closed allows no namespace", "Gateway gw/checked: activeHealthChecks allow"} {
		if !strings.Contains(ws, want) {
			t.Errorf("warnings %q lack %q", ws, want)
		}
	}
	if strings.Contains(ws, "gw/public") {
		t.Errorf("warnings %q name gw/public, which is set as it should be", ws)
	}
	// Envoy Gateway alone is a whole configuration: no load balancer is
	// not worth a warning then.
	if strings.Contains(ws, "no load balancer configured") {
		t.Errorf("warnings %q say no load balancer is configured, with envoyGateway set", ws)
	}
}

func TestWarnings(t *testing.T) {
	c, err := config.Parse([]byte(`
loadBalancers:
  - {name: closed, type: haproxy, instances: {static: ["tcp://h:1"]}}
  - {name: open, type: haproxy, instances: {static: ["tcp://h:1"]}, allowedNamespaces: {all: true}, allowEndpointsWithoutPods: true}
  - {name: fine, type: haproxy, instances: {static: ["tcp://h:1"]}, allowedNamespaces: {names: [shop]}, upstreams: [{name: web}]}
  - {name: wide, type: haproxy, instances: {static: ["tcp://h:1"]}, allowedNamespaces: {names: [shop]}, listedUpstreamsOnly: false, upstreams: [{name: web, allowedNamespaces: {names: [shop]}}]}
  - {name: unlisted, type: haproxy, instances: {static: ["tcp://h:1"]}, allowedNamespaces: {names: [shop]}}
`), drivers.New())
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{"load balancer closed allows no namespace", "load balancer open allows every namespace", "load balancer open takes endpoints without Pods from any address",
		"load balancer wide sets listedUpstreamsOnly: false: allowedNamespaces covers every backend of its instances, the operator's own included",
		"load balancer unlisted lists no upstream: only the upstreams listed under upstreams are the controller's"} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "fine") {
		t.Errorf("a configured load balancer warns:\n%s", got)
	}
}

// FuzzParse: no configuration file makes Parse panic, and whatever it
// accepts validates and compiles.
func FuzzParse(f *testing.F) {
	f.Add([]byte("loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}, allowedNamespaces: {names: [shop]}}]"))
	f.Add([]byte("loadBalancers: [{name: a, type: nginx-plus, instances: {static: [\"http://h:1/api\"]}, upstreams: [{name: s, owner: a/b}], allowedCIDRs: [10.0.0.0/8]}]"))
	f.Add([]byte("loadBalancers: [{name: a, type: haproxy, instances: {service: {namespace: n, name: s, port: p}}, allowedNamespaces: {selector: {matchExpressions: [{key: t, operator: In, values: [a]}]}}}]\nresync: 1m"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := config.Parse(b, drivers.New())
		if err != nil {
			return
		}
		if err := c.Validate(drivers.New()); err != nil {
			t.Fatalf("Parse accepted what Validate refuses: %v", err)
		}
		_ = c.Warnings()
	})
}

// The install ships no load balancer (the operator's configuration is
// their own): an empty configuration is valid, maps nothing, and says so.
func TestEmptyConfigurationIsValidAndSaysItMapsNothing(t *testing.T) {
	for _, in := range []string{"", "resync: 1m\n", "loadBalancers: []\n"} {
		c, err := config.Parse([]byte(in), drivers.New())
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if w := c.Warnings(); len(w) != 1 || !strings.Contains(w[0], "no load balancer configured") {
			t.Errorf("%q: warnings %q, want one saying no load balancer is configured", in, w)
		}
	}
}
