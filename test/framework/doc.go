// Package framework is what the project's integration suites, end-to-end
// scenarios and benchmarks share to run stickydrain against a real control
// plane (test/cluster): the webhook and the controller binaries started
// with their real flags and with exactly the permissions they ship with
// (manifests/<component>/rbac.yaml), the shipped webhook configurations
// pointed at a local webhook, metric scrapes made as a Prometheus holding
// the shipped metrics-reader role would make them, and the one Must the
// tests use.
//
// The tiers: unit tests beside the code need nothing (`make test-unit`
// runs them with -short); the integration suites beside each binary
// (webhook, controller) and in test/{cluster,node,install} start a
// control plane through test/cluster and skip under -short
// (cluster.SkipIfShort); test/e2e holds the scenarios — users, rollouts,
// faults — built on this package.
package framework
