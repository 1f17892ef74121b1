package inject

import "github.com/stickydrain/stickydrain/drainctl/params"

// Prefix is the prefix of every stickydrain label and annotation.
const Prefix = "stickydrain.io/"

// OptInLabel opts a Namespace or a pod (through its template) in with the
// value LabelEnabled; on a pod, LabelDisabled opts it out of an opted-in
// Namespace. A label, not an annotation: the API server can pre-filter
// webhook calls only by labels.
const (
	OptInLabel    = Prefix + "drain"
	LabelEnabled  = "enabled"
	LabelDisabled = "disabled"
)

// Parameters of the drain: annotations on the pod (its template), falling
// back to the same annotation on its Namespace. Each drainctl parameter is
// named as drainctl's flag is, and parsed by drainctl's own flag code.
const (
	// AnnotationURL is the session-count URL, normally
	// http://localhost:PORT/… . Default: none, a timed drain of max-wait.
	AnnotationURL = Prefix + params.FlagURL
	// AnnotationFormat is the body format: auto (default), number, json,
	// prometheus, tomcat-list, tomcat-sessions, match.
	AnnotationFormat = Prefix + params.FlagFormat
	// AnnotationJSONPath is the dot path of the count for format json, e.g.
	// measurements.0.value.
	AnnotationJSONPath = Prefix + params.FlagJSONPath
	// AnnotationMetric is the Prometheus metric and label matchers for
	// format prometheus, e.g. tomcat_sessions_active_current_sessions{name="app"}.
	AnnotationMetric = Prefix + params.FlagMetric
	// AnnotationContext is the Tomcat context path for format tomcat-list,
	// e.g. /app (ROOT is /). Default: every application but the managers.
	AnnotationContext = Prefix + params.FlagContext
	// AnnotationIdleBelow counts, for format tomcat-sessions, only sessions
	// active within this duration, e.g. 30m. Default: all.
	AnnotationIdleBelow = Prefix + params.FlagIdleBelow
	// AnnotationPattern is the regexp that means "still draining" for format
	// match, e.g. DRAINING.
	AnnotationPattern = Prefix + params.FlagPattern
	// AnnotationTarget is the count at or below which the pod is drained.
	// Default 0.
	AnnotationTarget = Prefix + params.FlagTarget
	// AnnotationMinWait is the least time the drain lasts, so the load
	// balancer's drain takes effect first. Default 10s.
	AnnotationMinWait = Prefix + params.FlagMinWait
	// AnnotationMaxWait is the longest the drain lasts. Default 1h. Set on a
	// running pod to a shorter value, it shortens the running drain.
	AnnotationMaxWait = params.MaxWaitAnnotation
	// AnnotationInterval is the time between polls. Default 10s.
	AnnotationInterval = Prefix + params.FlagInterval
	// AnnotationRequestTimeout bounds one poll. Default 5s.
	AnnotationRequestTimeout = Prefix + params.FlagRequestTimeout
	// AnnotationMaxBodyBytes is the largest body read. Default 1048576.
	AnnotationMaxBodyBytes = Prefix + params.FlagMaxBodyBytes
	// AnnotationUnreachableLimit is how many failed polls in a row end the
	// drain (the app is gone or hung). Default 6.
	AnnotationUnreachableLimit = Prefix + params.FlagUnreachableLimit
	// AnnotationBasicAuthFile is a file in the container holding
	// user:password for the count endpoint.
	AnnotationBasicAuthFile = Prefix + params.FlagBasicAuthFile
	// AnnotationBasicAuthEnv is an environment variable of the container
	// holding user:password.
	AnnotationBasicAuthEnv = Prefix + params.FlagBasicAuthEnv
	// AnnotationBearerTokenFile is a file in the container holding a token.
	AnnotationBearerTokenFile = Prefix + params.FlagBearerTokenFile
	// AnnotationBearerTokenEnv is an environment variable holding a token.
	AnnotationBearerTokenEnv = Prefix + params.FlagBearerTokenEnv
	// AnnotationHeaderFile is a file of extra "Name: value" headers.
	AnnotationHeaderFile = Prefix + params.FlagHeaderFile
	// AnnotationInsecureTLS, "true", skips TLS verification of an https
	// count endpoint. Default false.
	AnnotationInsecureTLS = Prefix + params.FlagInsecureTLS
	// AnnotationLogFormat is drainctl's log format: text (default) or json.
	AnnotationLogFormat = Prefix + params.FlagLogFormat
)

// Parameters of the injection itself.
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
	// the target container: drainctl runs it first, then waits. Without
	// it, a pod whose target container has a preStop hook is refused.
	AnnotationKeepPreStop = Prefix + "keep-prestop"
	// AnnotationStatus is set by the webhook to "injected" on the pods it
	// mutated; a pod carrying it is left alone.
	AnnotationStatus = Prefix + "status"
	// AnnotationRelease, set on a running pod, ends its drain at once.
	AnnotationRelease = params.ReleaseAnnotation
)

// DefaultContainerAnnotation is kubectl's annotation naming a pod's main
// container.
const DefaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// drainctlFlags maps each drainctl parameter annotation to its flag.
var drainctlFlags = []string{
	params.FlagURL, params.FlagFormat, params.FlagJSONPath, params.FlagMetric, params.FlagContext,
	params.FlagIdleBelow, params.FlagPattern, params.FlagTarget, params.FlagMinWait, params.FlagMaxWait,
	params.FlagInterval, params.FlagRequestTimeout, params.FlagMaxBodyBytes, params.FlagUnreachableLimit,
	params.FlagBasicAuthFile, params.FlagBasicAuthEnv, params.FlagBearerTokenFile, params.FlagBearerTokenEnv,
	params.FlagHeaderFile, params.FlagInsecureTLS, params.FlagLogFormat,
}

// DrainctlFlags lists the drainctl flags that pod annotations set, each
// as Prefix + its name (for the generated reference).
func DrainctlFlags() []string { return append([]string(nil), drainctlFlags...) }
