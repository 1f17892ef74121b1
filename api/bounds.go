package api

import "time"

// Bounds on what a namespace user writes. Every value stickydrain reads
// from an annotation, a label, an EndpointSlice or a drainctl flag is
// checked against one of these where it is parsed, before any work is
// done with it, and a value past its bound is refused with an error that
// names the field and the bound. One namespace's mistake or malice then
// costs the webhook and the controller a bounded amount, whatever it
// writes: the webhook admits every opted-in pod of the cluster, and the
// controller's passes share each load balancer's connections.
//
// `make docs` lists them in docs/reference/bounds.md; docs/security.md
// names the test behind each.
const (
	// MaxDuration bounds every duration a user writes: max-wait, min-wait,
	// interval, request-timeout, idle-below, shutdown-margin and a kept
	// preStop sleep (30 days). Their sum, the grace period, stays far from
	// an overflow.
	MaxDuration = 30 * 24 * time.Hour
	// MaxRegexpLength bounds a regular expression (pattern, and each `=~`
	// or `!~` matcher of metric), in bytes.
	MaxRegexpLength = 1024
	// MaxRegexpProgram bounds the size of a regular expression once its
	// counted repetitions are expanded (`a{1000}` ten times is 10,000), a
	// character class counting one per range of characters (`\pL` over
	// 300), measured on the parsed expression before it is compiled: a
	// short expression can compile to hundreds of MiB.
	MaxRegexpProgram = 10000
	// MaxMetricMatchers bounds the label matchers of metric.
	MaxMetricMatchers = 16
	// MaxValueLength bounds any other annotation value stickydrain parses
	// (url, json-path, metric, context, the credentials' and header files'
	// names), in bytes.
	MaxValueLength = 2048
	// MaxBodyBytesLimit bounds max-body-bytes: the most drainctl reads of
	// one response (64 MiB).
	MaxBodyBytesLimit = 64 << 20
	// MaxUnreachableLimit bounds unreachable-limit.
	MaxUnreachableLimit = 10000
	// MaxUpstreams bounds the distinct entries of a Service's upstreams
	// annotation (repeated entries count once).
	MaxUpstreams = 32
	// MaxStickyRulesPerNamespace bounds the sticky route rules of one
	// namespace that the EnvoyPatchPolicy of a Gateway keeps: that policy
	// is one object every tenant of the Gateway shares, and one tenant's
	// thousands of rules must not push it past what the API server
	// stores, making every tenant's update of it fail.
	MaxStickyRulesPerNamespace = 100
	// MaxStickyRulesPerGateway bounds the sticky rules a Gateway's
	// EnvoyPatchPolicy keeps in all, whatever the namespaces: a rule's
	// patch is up to about 550 bytes (its cluster's name), so the policy
	// stays under 1 MiB, well within what the API server stores.
	MaxStickyRulesPerGateway = 1500
	// MaxUpstreamName bounds an upstream's name in the upstreams
	// annotation, in characters: it ends up in Event actions and log
	// lines.
	MaxUpstreamName = 100
	// MaxDryRunSummaryBytes bounds AnnotationDryRun: the webhook writes
	// less, and its reporter caches and repeats nothing longer (anyone who
	// may create pods can label one as a dry run).
	MaxDryRunSummaryBytes = 1024
)
