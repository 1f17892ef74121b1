package config

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	c, err := Parse([]byte(`
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
`))
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
		{"no load balancers", "resync: 1m\n", "loadBalancers: empty"},
		{"bad type", "loadBalancers: [{name: a, type: f5, instances: {static: [\"tcp://h:1\"]}}]", `loadBalancers[0].type: "f5" is not one of haproxy, nginx-plus`},
		{"bad address", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"h:1\"]}}]", `loadBalancers[0].instances.static[0]: "h:1" is not unix:///path or tcp://host:port`},
		{"both instance kinds", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"], service: {namespace: n, name: s, port: p}}}]", "loadBalancers[0].instances: give static or service, not both"},
		{"duplicate name", "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}}, {name: a, type: haproxy, instances: {static: [\"tcp://h:2\"]}}]", `loadBalancers[1].name: "a" is used twice`},
		{"relative ready map", "loadBalancers: [{name: a, type: haproxy, haproxy: {readyMap: ready.map}, instances: {static: [\"tcp://h:1\"]}}]", `loadBalancers[0].haproxy.readyMap: "ready.map" is not an absolute path`},
		{"haproxy options on nginx-plus", "loadBalancers: [{name: a, type: nginx-plus, haproxy: {readyMap: /r.map}, instances: {static: [\"http://h:1/api\"]}}]", `loadBalancers[0].haproxy: only for type haproxy`},
		{"bad duration", "resync: soon\nloadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}}]", `"soon" is not a duration`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
