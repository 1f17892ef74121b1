// Package ext stands in for Traefik's dynamic configuration extension
// module (github.com/traefik/traefik/dynamic/ext), which Traefik's module
// zip leaves out. Traefik embeds these two structs; its open source build
// adds nothing to them.
package ext

// HTTP extends the HTTP configuration.
type HTTP struct{}

// Router extends a router.
type Router struct{}
