// Package api is stickydrain's contract: every label and annotation that
// users, the webhook, drainctl and the controller read or write, the
// Events' reasons, drainctl's exit statuses, and the drain parameters as
// data. No binary owns these keys; the webhook, drainctl, the controller,
// the docs generator and the kubectl plugin all read them here.
//
// It imports nothing but the standard library: drainctl, a static binary
// in every opted-in pod, imports it and must stay free of Kubernetes.
package api

// Prefix is the prefix of every stickydrain label and annotation.
const Prefix = "stickydrain.io/"

// The opt-in label, on a Namespace or a pod (its template). A label, not
// an annotation: the API server can pre-filter webhook calls only by
// labels.
const (
	// OptInLabel opts a Namespace or a pod in: LabelEnabled, LabelDryRun,
	// or LabelDisabled.
	OptInLabel = Prefix + "drain"
	// LabelEnabled, as the value of OptInLabel, gets the drain injected.
	LabelEnabled = "enabled"
	// LabelDisabled, on a pod, opts it out of an opted-in Namespace.
	LabelDisabled = "disabled"
	// LabelDryRun, as the value of OptInLabel on a Namespace or a pod, opts
	// in for a look only: nothing is injected; the pod carries
	// AnnotationDryRun saying what would have been.
	LabelDryRun = "dry-run"
)

// The label the webhook sets on a dry-run pod, beside AnnotationDryRun. Its
// dry-run reporter watches only pods carrying it: a label, so that the API
// server filters and the webhook never receives the other pods' metadata.
const (
	// DryRunPodLabel marks a pod let through in dry run, with the value
	// DryRunPodValue.
	DryRunPodLabel = Prefix + "dry-run"
	// DryRunPodValue is the value of DryRunPodLabel.
	DryRunPodValue = "true"
)

// Drain parameters: annotations on the pod (its template), falling back to
// the same annotation on its Namespace. Each is Prefix + the name of the
// drainctl flag it sets (Params lists them with their defaults and forms).
const (
	// AnnotationURL is the session-count URL, normally
	// http://localhost:PORT/… . Default: none, a timed drain of max-wait.
	AnnotationURL = Prefix + ParamURL
	// AnnotationFormat is the body format: auto (default), number, json,
	// prometheus, tomcat-list, tomcat-sessions, match.
	AnnotationFormat = Prefix + ParamFormat
	// AnnotationJSONPath is the dot path of the count for format json, e.g.
	// measurements.0.value.
	AnnotationJSONPath = Prefix + ParamJSONPath
	// AnnotationMetric is the Prometheus metric and label matchers for
	// format prometheus, e.g. tomcat_sessions_active_current_sessions{name="app"}.
	AnnotationMetric = Prefix + ParamMetric
	// AnnotationContext is the Tomcat context path for format tomcat-list,
	// e.g. /app (ROOT is /). Default: every application but the managers.
	AnnotationContext = Prefix + ParamContext
	// AnnotationIdleBelow counts, for format tomcat-sessions, only sessions
	// active within this duration, e.g. 30m. Default: all.
	AnnotationIdleBelow = Prefix + ParamIdleBelow
	// AnnotationPattern is the regexp that means "still draining" for format
	// match, e.g. DRAINING.
	AnnotationPattern = Prefix + ParamPattern
	// AnnotationTarget is the count at or below which the pod is drained.
	// Default 0.
	AnnotationTarget = Prefix + ParamTarget
	// AnnotationMinWait is the least time the drain lasts, so the load
	// balancer's drain takes effect first. Default 10s.
	AnnotationMinWait = Prefix + ParamMinWait
	// AnnotationMaxWait is the longest the drain lasts. Default 1h. Set on a
	// running pod to a shorter Go duration than the drain's, it shortens
	// the running drain (drainctl reads it through the downward API);
	// longer values are ignored: the grace period was sized for the
	// original.
	AnnotationMaxWait = Prefix + ParamMaxWait
	// AnnotationInterval is the time between polls. Default 10s.
	AnnotationInterval = Prefix + ParamInterval
	// AnnotationRequestTimeout bounds one poll. Default 5s.
	AnnotationRequestTimeout = Prefix + ParamRequestTimeout
	// AnnotationMaxBodyBytes is the largest body read. Default 1048576.
	AnnotationMaxBodyBytes = Prefix + ParamMaxBodyBytes
	// AnnotationUnreachableLimit is how many failed polls in a row end the
	// drain (the app is gone or hung). Default 6.
	AnnotationUnreachableLimit = Prefix + ParamUnreachableLimit
	// AnnotationBasicAuthFile is a file in the container holding
	// user:password for the count endpoint.
	AnnotationBasicAuthFile = Prefix + ParamBasicAuthFile
	// AnnotationBasicAuthEnv is an environment variable of the container
	// holding user:password.
	AnnotationBasicAuthEnv = Prefix + ParamBasicAuthEnv
	// AnnotationBearerTokenFile is a file in the container holding a token.
	AnnotationBearerTokenFile = Prefix + ParamBearerTokenFile
	// AnnotationBearerTokenEnv is an environment variable holding a token.
	AnnotationBearerTokenEnv = Prefix + ParamBearerTokenEnv
	// AnnotationHeaderFile is a file of extra "Name: value" headers.
	AnnotationHeaderFile = Prefix + ParamHeaderFile
	// AnnotationInsecureTLS, "true", skips TLS verification of an https
	// count endpoint. Default false.
	AnnotationInsecureTLS = Prefix + ParamInsecureTLS
	// AnnotationLogFormat is drainctl's log format: text (default) or json.
	AnnotationLogFormat = Prefix + ParamLogFormat
)

// Annotations of the injection itself, on the pod (its template) unless
// said otherwise.
const (
	// AnnotationContainer names the container to hook. Default: the one
	// named by kubectl.kubernetes.io/default-container, else the first.
	AnnotationContainer = Prefix + "container"
	// AnnotationDrainctl says how drainctl gets into the pod: "inject"
	// (default, unless the webhook's --drainctl-delivery says otherwise: an
	// init container copies it into an emptyDir), "image-volume" (the
	// drainctl image mounted read-only as an image volume: Kubernetes 1.35+
	// on containerd 2.1+ or CRI-O 1.31+; no init container, no copy) or
	// "image" (it is already in the image, at AnnotationDrainctlPath).
	AnnotationDrainctl = Prefix + "drainctl"
	// AnnotationDrainctlPath is drainctl's path in the image, with
	// drainctl "image". Default /usr/local/bin/drainctl.
	AnnotationDrainctlPath = Prefix + "drainctl-path"
	// AnnotationShutdownMargin is added to max-wait and min-wait for the
	// grace period, for the app's own shutdown after SIGTERM. Default 30s.
	AnnotationShutdownMargin = Prefix + "shutdown-margin"
	// AnnotationKeepPreStop, "true", keeps an existing exec preStop hook of
	// the target container: drainctl runs it first, then waits. A sleep or
	// httpGet preStop hook is kept without it (drainctl sleeps or calls it
	// first, and the grace period counts it); without it, a pod whose
	// target container has an exec preStop hook is refused, and a
	// tcpSocket one is refused either way.
	AnnotationKeepPreStop = Prefix + "keep-prestop"
	// AnnotationStatus is set by the webhook to "injected" on the pods it
	// mutated; a pod carrying it is left alone.
	AnnotationStatus = Prefix + "status"
	// AnnotationRelease, set on a running pod to any value but "false",
	// ends its drain at once (drainctl exits ExitReleased).
	AnnotationRelease = Prefix + "release"
	// AnnotationOwnerKinds, on a Namespace, lists the kinds of controller
	// whose pods a Namespace opt-in reaches ("ReplicaSet,StatefulSet,DaemonSet"),
	// replacing the webhook's --namespace-opt-in-owner-kinds.
	AnnotationOwnerKinds = Prefix + "owner-kinds"
	// AnnotationDryRun is set by the webhook on a dry-run pod: what it would
	// have injected, or why it would have refused the pod.
	AnnotationDryRun = Prefix + "dry-run"
)

// Values of AnnotationStatus and AnnotationDrainctl.
const (
	// StatusInjected, as AnnotationStatus, marks a pod the webhook mutated.
	StatusInjected = "injected"

	// DeliveryInject: an init container copies drainctl into an emptyDir.
	DeliveryInject = "inject"
	// DeliveryImageVolume: the drainctl image is mounted read-only as an
	// image volume.
	DeliveryImageVolume = "image-volume"
	// DeliveryImage: drainctl is already in the app's image.
	DeliveryImage = "image"
)

// DefaultContainerAnnotation is kubectl's annotation naming a pod's main
// container.
const DefaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// Service annotations, read by the controller.
const (
	// AnnotationUpstreams maps a Service onto load-balancer upstreams:
	// "<lb>/<upstream>[,<lb>/<upstream>…]", lb a name from the configuration;
	// at most 32 distinct entries (repeats count once), upstream names of
	// up to 100 letters, digits, _ . : - (docs/reference/bounds.md).
	AnnotationUpstreams = Prefix + "upstreams"
	// AnnotationPort picks the Service port (name or number) whose
	// endpoints become servers. Default: the only port.
	AnnotationPort = Prefix + "port"
)

// Reasons of the Events the controller records: on the pod (Normal) as
// its server drains and goes, on the Service (Warning) for what it
// refused or repaired.
const (
	// ReasonDraining, on a pod: its server was set draining on the
	// upstream's instances.
	ReasonDraining = "Draining"
	// ReasonRemoved, on a pod: its server was removed, the pod being gone.
	ReasonRemoved = "Removed"
	// ReasonUpstreamConflict: two Services map the same upstream.
	ReasonUpstreamConflict = "UpstreamConflict"
	// ReasonBadMapping: the Service's stickydrain.io/upstreams or
	// stickydrain.io/port cannot be read, or names a load balancer not
	// configured.
	ReasonBadMapping = "BadUpstreamMapping"
	// ReasonApplyFailed is reserved for a change a load balancer refused:
	// the controller reports those in its log and metrics
	// (stickydrain_controller_lb_errors_total) and records no Event
	// with this reason yet.
	ReasonApplyFailed = "LoadBalancerError"
	// ReasonCannotHold: an instance of the load balancer answered but
	// cannot hold what the Service asks: the upstream is not in its
	// configuration, or has no free server-template slot. The Service is
	// retried; the load balancer's other Services and its fresh replicas'
	// readiness do not wait for it.
	ReasonCannotHold = "UpstreamCannotHold"
	// ReasonStateLost: an instance came back from a restart or reload
	// without the upstream's servers; the controller refills it.
	ReasonStateLost = "LoadBalancerStateLost"
	// ReasonUpstreamNotAllowed: the configuration does not give the
	// Service's Namespace the upstream it maps.
	ReasonUpstreamNotAllowed = "UpstreamNotAllowed"
	// ReasonEndpointNotAllowed: an endpoint may not become a server of the
	// load balancer: its address is outside allowedCIDRs, it names no Pod,
	// a Pod of another namespace, a Pod that does not have that address or
	// has finished, or a Pod the controller could not read yet (tried again
	// on a later pass). At most 10 a Service and pass, then one counting
	// the rest.
	ReasonEndpointNotAllowed = "EndpointNotAllowed"
	// ReasonConfigurationRefused: a configuration change that would take
	// servers out of live upstreams is held.
	ReasonConfigurationRefused = "ConfigurationChangeRefused"
)

// Reasons of the Events the controller records on HTTPRoutes behind Envoy
// Gateway (configuration envoyGateway), one per
// sticky rule (sessionPersistence) when its outcome changes, and on the
// Gateway.
const (
	// ReasonStickyThroughDrains (Normal): the rule's sessions stay on a
	// terminating pod until its drain ends (its cluster lets a session
	// reach a DRAINING endpoint).
	ReasonStickyThroughDrains = "StickyThroughDrains"
	// ReasonRouteNotAllowed: the route's namespace is not in the
	// Gateway's allowedNamespaces.
	ReasonRouteNotAllowed = "RouteNotAllowed"
	// ReasonBackendNotOptedIn: a backend of the rule is not a Service
	// whose pods carry the drain.
	ReasonBackendNotOptedIn = "BackendNotOptedIn"
	// ReasonActiveHealthCheck: a BackendTrafficPolicy checks the route's
	// backends actively; the rule is not kept (activeHealthChecks: refuse,
	// the default) or is kept at a cost (allow).
	ReasonActiveHealthCheck = "ActiveHealthCheck"
	// ReasonStickyRuleLimit: the route's namespace has more sticky rules
	// on the Gateway than api.MaxStickyRulesPerNamespace; the rules past
	// the bound (by cluster name) are not kept sticky through drains.
	ReasonStickyRuleLimit = "StickyRuleLimit"
	// ReasonPolicyConflict (on the Gateway): an EnvoyPatchPolicy named
	// stickydrain-<gateway> exists that the controller did not create; it
	// is left alone and nothing is kept sticky on that Gateway.
	ReasonPolicyConflict = "EnvoyPatchPolicyConflict"
)

// ManagedByLabel and ManagedByValue mark the objects the controller
// creates (an EnvoyPatchPolicy), so that it never changes one it did not.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "stickydrain"
)

// ReasonDryRun, on a dry-run pod (the webhook): what it would have
// injected, or why it would have refused the pod.
const ReasonDryRun = "DrainDryRun"

// drainctl's exit statuses: what the kubelet records for a preStop hook
// that ends otherwise than drained.
const (
	ExitDrained     = 0 // the count reached --target (after --min-wait)
	ExitError       = 1 // an internal failure (install could not write, the log could not be opened)
	ExitUsage       = 2 // bad command line or credentials file
	ExitMaxWait     = 3 // --max-wait passed; also the normal end of a timed drain (no --url)
	ExitUnreachable = 4 // --unreachable-limit polls in a row failed (count: the one poll failed)
	ExitReleased    = 5 // an operator released it: the stickydrain.io/release annotation, or drainctl release
	ExitInterrupted = 6 // SIGTERM or SIGINT
)

// ControlSocket is the address `drainctl wait` listens on for an operator's
// release or shorter max-wait while the pod terminates, when the kubelet
// no longer refreshes the pod's downward-API annotations: a Linux abstract
// unix socket (no file, nothing to mount), in the pod's network namespace,
// so only the pod's own processes reach it (`drainctl release`, `drainctl
// shorten`, run with kubectl exec: what kubectl stickydrain does). drainctl
// appends "/" and its mount namespace's inode, which an exec into the
// container shares and no other container has: pods with hostNetwork share
// the socket namespace, pods with hostPID the PID namespace too.
const ControlSocket = "@stickydrain.io/drainctl"

// The control socket's requests, one line each; the answer is one line,
// "ok …" or "error: …".
const (
	// ControlRelease ends the drain (drainctl exits ExitReleased).
	ControlRelease = "release"
	// ControlMaxWait, followed by a space and a Go duration, lowers the
	// drain's max-wait; a longer one than it runs with is refused.
	ControlMaxWait = "max-wait"
)
