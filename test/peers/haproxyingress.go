package peers

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
)

// HAProxyIngress is how the tests and the benchmarks run haproxy-ingress
// outside a cluster, as its Makefile's run target does: its files under a
// filesystem prefix of its own, its ports free ones on loopback.
type HAProxyIngress struct {
	Peer
	// Prefix is its --local-filesystem-prefix; keep it short: its HAProxy's
	// socket paths under it must stay under 97 characters.
	Prefix string
	// Ports: HTTP, HTTPS, stats, the controller's healthz, HAProxy's
	// healthz, Prometheus.
	Ports [6]int
}

// Config is the data of its global ConfigMap: drain support on, every
// port on loopback, no TLS redirect, no syslog; extra adds or overrides.
func (h HAProxyIngress) Config(extra map[string]string) map[string]string {
	c := map[string]string{
		"drain-support":   "true",
		"bind-http":       fmt.Sprintf("127.0.0.1:%d", h.Ports[0]),
		"https-port":      fmt.Sprint(h.Ports[1]),
		"bind-https":      fmt.Sprintf("127.0.0.1:%d", h.Ports[1]),
		"stats-port":      fmt.Sprint(h.Ports[2]),
		"healthz-port":    fmt.Sprint(h.Ports[4]),
		"prometheus-port": fmt.Sprint(h.Ports[5]),
		"ssl-redirect":    "false",
		"syslog-endpoint": "",
	}
	maps.Copy(c, extra)
	return c
}

// Prepare puts its Lua scripts under the prefix.
func (h HAProxyIngress) Prepare() error {
	lua := filepath.Join(h.Prefix, "etc", "haproxy", "lua")
	if err := os.MkdirAll(lua, 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("sh", "-c", fmt.Sprintf("cp %s/etc/lua/* %s/", h.Resources, lua)).CombinedOutput(); err != nil {
		return fmt.Errorf("copying haproxy-ingress's Lua scripts: %w: %s", err, out)
	}
	return nil
}

// AdminSocket is its HAProxy's Runtime API socket.
func (h HAProxyIngress) AdminSocket() string {
	return filepath.Join(h.Prefix, "var", "run", "haproxy", "admin.sock")
}

// ReadyURL answers 200 once its HAProxy loaded its first configuration.
func (h HAProxyIngress) ReadyURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/healthz", h.Ports[4])
}

// Dir is the directory to run it in (its resources' parent).
func (h HAProxyIngress) Dir() string { return filepath.Dir(h.Resources) }

// Args is its command line: the ConfigMap namespace/name, the
// IngressClass, the leader election's ID, and extra flags.
func (h HAProxyIngress) Args(kubeconfig, configMap, class, electionID string, extra ...string) []string {
	return append([]string{
		"--kubeconfig=" + kubeconfig, "--local-filesystem-prefix=" + h.Prefix,
		"--update-status=false", "--watch-gateway=false",
		"--configmap=" + configMap, "--ingress-class=" + class,
		"--election-id=" + electionID, fmt.Sprintf("--healthz-addr=127.0.0.1:%d", h.Ports[3]),
	}, extra...)
}
