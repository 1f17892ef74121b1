// Package haproxy drives HAProxy through its Runtime API (a unix or TCP
// stats socket at level admin).
//
// HAProxy 2.6 (Debian's) refuses `cookie` on `add server`, so an upstream is
// a backend of server-template slots with dynamic cookies:
//
//	backend shop
//	    cookie SRV insert indirect nocache dynamic
//	    dynamic-cookie-key <a secret shared by every replica>
//	    server-template s 1-50 0.0.0.0:0 disabled
//
// The controller owns every server of such a backend. A free slot has the
// address 0.0.0.0; an endpoint takes a free slot (`set server B/S addr IP
// port P`), gets its state (`set server B/S state ready|drain|maint`), and
// gives the slot back when it is removed (maint, then addr 0.0.0.0). The
// dynamic cookie is a hash of the key, address and port, so it is the same
// on every replica and after a restart. All changes to one backend go over
// one connection, as one batch.
//
// On HAProxy 3.0 and later, WithDynamicServers holds an upstream as
// servers the controller adds and deletes instead (see dynamic.go).
package haproxy

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/stickydrain/stickydrain/controller/backend"
)

const freeAddr = "0.0.0.0"

// Instance is one HAProxy process.
type Instance struct {
	network, address string
	timeout          time.Duration
	id               string

	// readyMap is the map file holding the readiness marker; empty: none.
	readyMap string
	// dynamic: servers are added and deleted (3.0+), not slots.
	dynamic bool
	log     logr.Logger

	mu sync.Mutex
	// unknown holds the srv_admin_state bits no version defines that were
	// seen (and logged) already: each is logged once.
	unknown AdminState
	// versionOK: the process was found recent enough for dynamic servers.
	versionOK bool
	// tls, when set, authenticates both ends (WithTLS).
	tls *TLSFiles
}

var (
	_ backend.Instance    = (*Instance)(nil)
	_ backend.Prober      = (*Instance)(nil)
	_ backend.Marker      = (*Instance)(nil)
	_ backend.Heartbeater = (*Instance)(nil)
)

// Option sets an instance option.
type Option func(*Instance)

// WithReadyMap names the map file of the readiness marker (see
// MarkFilled).
func WithReadyMap(path string) Option { return func(h *Instance) { h.readyMap = path } }

// WithDynamicServers holds upstreams as dynamic servers (HAProxy 3.0 and
// later) instead of server-template slots.
func WithDynamicServers() Option { return func(h *Instance) { h.dynamic = true } }

// WithLogger logs what the instance notices on its own (unknown
// srv_admin_state bits); default: nothing.
func WithLogger(l logr.Logger) Option { return func(h *Instance) { h.log = l } }

// TLSFiles authenticate both ends of a TCP Runtime API: the client
// certificate the controller presents and the CA that verifies HAProxy's.
// They are read at each connection, so renewed files are used at once.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
	// ServerName HAProxy's certificate must carry; default: the address's host.
	ServerName string
}

// WithTLS speaks TLS with a client certificate to the Runtime API (tcp://
// addresses only).
func WithTLS(f TLSFiles) Option { return func(h *Instance) { h.tls = &f } }

func (h *Instance) tlsConfig() (*tls.Config, error) {
	f := h.tls
	pair, err := backend.LoadClientCertificate(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, err
	}
	roots, err := backend.CAPool(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	name := f.ServerName
	if name == "" {
		name, _, _ = net.SplitHostPort(h.address)
	}
	return &tls.Config{Certificates: []tls.Certificate{*pair}, RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS12}, nil
}

// New returns the instance at addr: unix:///path or tcp://host:port.
func New(addr string, timeout time.Duration, opts ...Option) (*Instance, error) {
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("haproxy instance %q: %w", addr, err)
	}
	h := &Instance{timeout: timeout, id: addr, log: logr.Discard()}
	switch u.Scheme {
	case "unix":
		h.network, h.address = "unix", u.Path
	case "tcp":
		h.network, h.address = "tcp", u.Host
	default:
		return nil, fmt.Errorf("haproxy instance %q: want unix:///path or tcp://host:port", addr)
	}
	for _, o := range opts {
		o(h)
	}
	if h.tls != nil && h.network != "tcp" {
		return nil, fmt.Errorf("haproxy instance %q: TLS needs tcp://host:port", addr)
	}
	return h, nil
}

// ID is the instance's address.
func (h *Instance) ID() string { return h.id }
