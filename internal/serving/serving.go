// Package serving hardens the HTTPS endpoints of the webhook and the
// controller as the kubebuilder scaffold does: metrics over HTTPS to
// callers the API server authenticates (TokenReview) and authorizes
// (SubjectAccessReview on GET /metrics), and no HTTP/2 unless asked for
// (the HTTP/2 rapid-reset and CONTINUATION advisories). Health probes stay
// plain HTTP.
package serving

import (
	"crypto/tls"

	"github.com/spf13/pflag"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Flags are the command-line settings of the served endpoints.
type Flags struct {
	Secure      bool
	EnableHTTP2 bool
	CertDir     string
}

// Bind registers the flags on fs.
func (f *Flags) Bind(fs *pflag.FlagSet) {
	fs.BoolVar(&f.Secure, "metrics-secure", true, "serve metrics over HTTPS to callers the API server authenticates and authorizes for GET /metrics; false serves plain HTTP to anyone who can connect")
	fs.BoolVar(&f.EnableHTTP2, "enable-http2", false, "let the HTTPS servers speak HTTP/2 (off because of the HTTP/2 rapid-reset and CONTINUATION advisories)")
	fs.StringVar(&f.CertDir, "metrics-cert-dir", "", "`directory` with tls.crt and tls.key for the metrics server; empty: a self-signed certificate made at start")
}

// TLSOpts are the TLS settings of every HTTPS server.
func (f *Flags) TLSOpts() []func(*tls.Config) {
	if f.EnableHTTP2 {
		return nil
	}
	return []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
}

// Metrics are the metrics server's options, listening on addr.
func (f *Flags) Metrics(addr string) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr, SecureServing: f.Secure, CertDir: f.CertDir, TLSOpts: f.TLSOpts()}
	if f.Secure {
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}
