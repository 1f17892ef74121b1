// Envoy Gateway, whose translators the Envoy Gateway tests run
// (test/peers/build.sh builds ./translate inside a copy of its module):
// pinned here, out of the main module.
module github.com/stickydrain/stickydrain/test/peers/envoy-gateway

go 1.26.8

require github.com/envoyproxy/gateway v1.9.1
