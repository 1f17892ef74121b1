// Package drivers registers the load-balancer types this build supports.
// A new backend is its package (a backend.Driver) and one line here.
package drivers

import (
	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/backend/nginxplus"
)

// New returns a registry of every driver of this build.
func New() *backend.Registry {
	r, err := backend.NewRegistry(
		haproxy.Driver{},
		nginxplus.Driver{},
	)
	if err != nil {
		// The list above is fixed at build time; a test checks it.
		panic(err)
	}
	return r
}
