package plugin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
)

// Finding levels.
const (
	LevelOK      = "ok"
	LevelWarning = "warning"
	LevelError   = "error"
)

// Finding is one thing Check found, with the fix when it is not ok.
type Finding struct {
	Level   string `json:"level"`
	Object  string `json:"object"`
	Check   string `json:"check"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// AutoscalerGrace is cluster-autoscaler's default cap on a pod's grace
// period at scale-down (--max-graceful-termination-sec 600).
const AutoscalerGrace = 600

// webhookSuffix ends the name of each webhook of stickydrain's
// MutatingWebhookConfiguration (manifests/webhook, the chart).
const webhookSuffix = ".pods.stickydrain.io"

// Check says what is wrong before a rollout loses sessions, for
// target "deploy/NAME", "sts/NAME" or "ns/NAME" (each Deployment and
// StatefulSet of the Namespace) in namespace.
func (c *Client) Check(ctx context.Context, namespace, target string) ([]Finding, error) {
	kind, name, ok := strings.Cut(target, "/")
	if !ok || name == "" {
		return nil, fmt.Errorf("%q: want deploy/NAME, sts/NAME or ns/NAME", target)
	}
	var workloads []workloadRef
	switch strings.ToLower(kind) {
	case "deploy", "deployment", "deployments", "deployment.apps":
		d, err := c.Kube.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("deployment %s/%s: %w", namespace, name, err)
		}
		workloads = append(workloads, deploymentRef(d))
	case "sts", "statefulset", "statefulsets", "statefulset.apps":
		s, err := c.Kube.AppsV1().StatefulSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("statefulset %s/%s: %w", namespace, name, err)
		}
		workloads = append(workloads, statefulSetRef(s))
	case "ns", "namespace", "namespaces":
		namespace = name
		ds, err := c.Kube.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing deployments of %s: %w", namespace, err)
		}
		for i := range ds.Items {
			workloads = append(workloads, deploymentRef(&ds.Items[i]))
		}
		ss, err := c.Kube.AppsV1().StatefulSets(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing statefulsets of %s: %w", namespace, err)
		}
		for i := range ss.Items {
			workloads = append(workloads, statefulSetRef(&ss.Items[i]))
		}
	default:
		return nil, fmt.Errorf("%q: want deploy/NAME, sts/NAME or ns/NAME", target)
	}
	ns, err := c.Kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", namespace, err)
	}
	out := []Finding{c.checkWebhook(ctx)}
	if len(workloads) == 0 {
		out = append(out, Finding{Level: LevelWarning, Object: "namespace/" + namespace, Check: "workloads",
			Message: "no Deployment or StatefulSet", Fix: "name the workload: check deploy/NAME or sts/NAME"})
	}
	for _, w := range workloads {
		fs, err := c.checkWorkload(ctx, ns, w)
		if err != nil {
			return out, err
		}
		out = append(out, fs...)
	}
	return out, nil
}

// workloadRef is what Check reads of a Deployment or StatefulSet.
type workloadRef struct {
	object   string // deployment/web
	template corev1.PodTemplateSpec
	selector *metav1.LabelSelector
}

func deploymentRef(d *appsv1.Deployment) workloadRef {
	return workloadRef{"deployment/" + d.Name, d.Spec.Template, d.Spec.Selector}
}

func statefulSetRef(s *appsv1.StatefulSet) workloadRef {
	return workloadRef{"statefulset/" + s.Name, s.Spec.Template, s.Spec.Selector}
}

func (c *Client) checkWebhook(ctx context.Context) Finding {
	f := Finding{Object: "mutatingwebhookconfigurations", Check: "webhook"}
	list, err := c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		f.Level, f.Message = LevelWarning, fmt.Sprintf("cannot read the webhook configurations: %v", err)
		f.Fix = "run check with a user who may list mutatingwebhookconfigurations"
		return f
	}
	// The install's webhooks may span configurations (stickydrain, and
	// stickydrain-other-kinds): every one of them counts.
	var names, empty []string
	emptyIn := "" // the configuration of the first entry without a caBundle
	for _, m := range list.Items {
		had := len(names)
		for _, w := range m.Webhooks {
			if !strings.HasSuffix(w.Name, webhookSuffix) {
				continue
			}
			names = append(names, w.Name)
			if len(w.ClientConfig.CABundle) == 0 {
				if len(empty) == 0 {
					emptyIn = "mutatingwebhookconfiguration/" + m.Name
				}
				empty = append(empty, w.Name)
			}
		}
		if had == 0 && len(names) > 0 {
			f.Object = "mutatingwebhookconfiguration/" + m.Name
		}
	}
	switch {
	case len(empty) > 0:
		f.Object = emptyIn
		f.Level = LevelError
		f.Message = fmt.Sprintf("%d of %d webhooks have no caBundle (%s): the API server cannot call the webhook, and opted-in pods are refused", len(empty), len(names), strings.Join(empty, ", "))
		f.Fix = "cert-manager's CA injector fills it: check that cert-manager runs and that the webhook's Certificate is Ready (kubectl -n stickydrain-system get certificate)"
		return f
	case len(names) > 0:
		f.Level, f.Message = LevelOK, fmt.Sprintf("%d webhooks, each with a caBundle", len(names))
		return f
	}
	f.Level, f.Message = LevelError, "no stickydrain webhook configuration: nothing injects the drain"
	f.Fix = "install stickydrain (docs/install.md)"
	return f
}

func (c *Client) checkWorkload(ctx context.Context, ns *corev1.Namespace, w workloadRef) ([]Finding, error) {
	var out []Finding
	add := func(level, check, msg, fix string) {
		out = append(out, Finding{Level: level, Object: w.object, Check: check, Message: msg, Fix: fix})
	}

	// Opted in, by the pod template's label or the Namespace's.
	podOpt, nsOpt := w.template.Labels[api.OptInLabel], ns.Labels[api.OptInLabel]
	optIn := func() string {
		switch {
		case podOpt != "":
			return podOpt
		case nsOpt != "":
			return nsOpt
		}
		return ""
	}()
	switch optIn {
	case api.LabelEnabled:
		where := "its pod template"
		if podOpt == "" {
			where = "its Namespace"
		}
		add(LevelOK, "opt-in", fmt.Sprintf("opted in by %s (%s=%s)", where, api.OptInLabel, api.LabelEnabled), "")
	case api.LabelDryRun:
		add(LevelWarning, "opt-in", "dry run only: nothing is injected, each pod's "+api.AnnotationDryRun+" annotation says what would be",
			fmt.Sprintf("when it reads right, set %s=%s on the Namespace or the pod template", api.OptInLabel, api.LabelEnabled))
	case api.LabelDisabled:
		add(LevelError, "opt-in", fmt.Sprintf("opted out by its pod template (%s=%s)", api.OptInLabel, api.LabelDisabled),
			"remove the label from the pod template")
	default:
		add(LevelError, "opt-in", "not opted in: its pods get no drain and lose their sessions when they stop",
			fmt.Sprintf("kubectl label namespace %s %s=%s (or the label on the pod template)", ns.Name, api.OptInLabel, api.LabelEnabled))
	}

	// Its running pods: injected, their grace period.
	sel, err := metav1.LabelSelectorAsSelector(w.selector)
	if err != nil {
		return out, fmt.Errorf("%s: selector: %w", w.object, err)
	}
	pods, err := c.Kube.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return out, fmt.Errorf("listing pods of %s: %w", w.object, err)
	}
	var running, bare []string
	var probe *corev1.Pod
	maxGrace := int64(0)
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		running = append(running, p.Name)
		if !injected(p) {
			bare = append(bare, p.Name)
			continue
		}
		if probe == nil {
			probe = p
		}
		if g := p.Spec.TerminationGracePeriodSeconds; g != nil && *g > maxGrace {
			maxGrace = *g
		}
	}
	sort.Strings(bare)
	switch {
	case len(running) == 0:
		add(LevelWarning, "pods", "no running pod to look at", "")
	case len(bare) > 0:
		add(LevelError, "pods", fmt.Sprintf("%d of %d running pods carry no drain (%s): created before the opt-in or without the webhook, they lose their sessions when they stop", len(bare), len(running), strings.Join(bare, ", ")),
			fmt.Sprintf("kubectl -n %s rollout restart %s (its new pods are injected)", ns.Name, w.object))
	default:
		add(LevelOK, "pods", fmt.Sprintf("%d running pods, each with its drain", len(running)), "")
	}
	if maxGrace > AutoscalerGrace {
		add(LevelWarning, "grace-period", fmt.Sprintf("grace period %ds: cluster-autoscaler's scale-down gives a pod at most %ds (--max-graceful-termination-sec) and cuts a longer drain", maxGrace, AutoscalerGrace),
			"raise --max-graceful-termination-sec on cluster-autoscaler, or lower "+api.AnnotationMaxWait)
	} else if maxGrace > 0 {
		add(LevelOK, "grace-period", fmt.Sprintf("grace period %ds, within cluster-autoscaler's default %ds", maxGrace, AutoscalerGrace), "")
	}

	// The drained container's readiness probe.
	target := targetContainer(&w.template)
	switch {
	case target == nil:
		add(LevelError, "readiness", "the pod template has no containers", "")
	case target.ReadinessProbe == nil:
		add(LevelWarning, "readiness", fmt.Sprintf("container %s has no readiness probe: new pods take sessions before the app can serve them", target.Name),
			"add a readinessProbe, and keep it passing while the pod drains: behind proxies that drop not-serving endpoints (Traefik, haproxy-ingress) a failing probe ends the bound sessions")
	default:
		add(LevelOK, "readiness", fmt.Sprintf("container %s has a readiness probe (keep it passing while the pod drains)", target.Name), "")
	}

	// The Services that select its pods and the upstreams they map.
	fs, err := c.checkServices(ctx, ns.Name, w)
	if err != nil {
		return out, err
	}
	out = append(out, fs...)

	// The session URL, asked from inside a pod as drainctl asks it; then
	// whether the probes (and the load balancer's health check) create
	// sessions.
	if c.Exec != nil && probe != nil {
		f := c.checkSessionURL(ctx, probe, w.object)
		out = append(out, f)
		if f.Level == LevelOK {
			out = append(out, c.checkProbes(ctx, probe, w.object)...)
		}
	}
	return out, nil
}

// targetContainer is the container the webhook hooks: the one named by
// stickydrain.io/container, else by kubectl's default-container
// annotation, else the first.
func targetContainer(t *corev1.PodTemplateSpec) *corev1.Container {
	for _, key := range []string{api.AnnotationContainer, api.DefaultContainerAnnotation} {
		if name := t.Annotations[key]; name != "" {
			for i := range t.Spec.Containers {
				if t.Spec.Containers[i].Name == name {
					return &t.Spec.Containers[i]
				}
			}
		}
	}
	if len(t.Spec.Containers) == 0 {
		return nil
	}
	return &t.Spec.Containers[0]
}

// serviceWarnings are the reasons of the controller's Warning Events on a
// Service that mean its upstream mapping is not in effect.
var serviceWarnings = []string{api.ReasonUpstreamNotAllowed, api.ReasonBadMapping, api.ReasonUpstreamConflict, api.ReasonEndpointNotAllowed}

func (c *Client) checkServices(ctx context.Context, namespace string, w workloadRef) ([]Finding, error) {
	svcs, err := c.Kube.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing services of %s: %w", namespace, err)
	}
	var out []Finding
	podLabels := labels.Set(w.template.Labels)
	for _, s := range svcs.Items {
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
			continue
		}
		obj := "service/" + s.Name
		mapping := s.Annotations[api.AnnotationUpstreams]
		if mapping == "" {
			out = append(out, Finding{Level: LevelOK, Object: obj, Check: "upstreams",
				Message: "selects the pods, mapped onto no load-balancer upstream: only proxies that follow its EndpointSlices themselves (haproxy-ingress, Traefik) keep its sessions",
				Fix:     ""})
			continue
		}
		evs, err := c.Kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.kind", "Service"), fields.OneTermEqualSelector("involvedObject.name", s.Name),
			fields.OneTermEqualSelector("type", corev1.EventTypeWarning)).String()})
		if err != nil && !apierrors.IsForbidden(err) {
			return out, fmt.Errorf("listing events of %s/%s: %w", namespace, obj, err)
		}
		var problems []string
		if evs != nil {
			for _, e := range evs.Items {
				for _, r := range serviceWarnings {
					if e.Reason == r && e.InvolvedObject.UID == s.UID {
						problems = append(problems, e.Reason+": "+e.Message)
					}
				}
			}
		}
		sort.Strings(problems)
		if len(problems) > 0 {
			out = append(out, Finding{Level: LevelError, Object: obj, Check: "upstreams",
				Message: fmt.Sprintf("maps %s, which the controller refused: %s", mapping, strings.Join(problems, "; ")),
				Fix:     "fix " + api.AnnotationUpstreams + " as the Event says, or ask the operator to give this Namespace the upstream (the controller's tenants)"})
			continue
		}
		out = append(out, Finding{Level: LevelOK, Object: obj, Check: "upstreams", Message: "maps " + mapping + " (no Warning from the controller)"})
	}
	if len(out) == 0 {
		out = append(out, Finding{Level: LevelWarning, Object: w.object, Check: "upstreams", Message: "no Service selects its pods",
			Fix: "create the Service that the load balancer or ingress sends to"})
	}
	return out, nil
}

// countSource is how a pod's drainctl reads its session count: the
// drained container, drainctl's path there, its source flags (those
// `drainctl count` and `drainctl probe` take) and the URL ("" for a timed
// drain). A pod whose hook cannot be read gives the finding instead.
type countSource struct {
	container, drainctl, url string
	flags                    []string
}

func podCountSource(p *corev1.Pod, object, check string) (countSource, *Finding) {
	container, cmd := drainContainer(p)
	if container == "" {
		return countSource{}, &Finding{Object: object, Check: check, Level: LevelWarning, Message: fmt.Sprintf("pod %s has no drainctl preStop hook to read the URL from", p.Name)}
	}
	w := params.NewWait()
	fs := w.FlagSet()
	if err := fs.Parse(cmd[2:]); err != nil {
		return countSource{}, &Finding{Object: object, Check: check, Level: LevelError, Message: fmt.Sprintf("pod %s: its drainctl flags do not parse: %v", p.Name, err)}
	}
	source := pflag.NewFlagSet("count", pflag.ContinueOnError)
	params.NewWait().BindSource(source)
	cs := countSource{container: container, drainctl: cmd[0], url: w.URL}
	fs.Visit(func(fl *pflag.Flag) {
		if source.Lookup(fl.Name) != nil {
			cs.flags = append(cs.flags, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	return cs, nil
}

// checkSessionURL runs `drainctl count` with the pod's own source flags
// in its drained container: what drainctl will read when the pod stops.
func (c *Client) checkSessionURL(ctx context.Context, p *corev1.Pod, object string) Finding {
	f := Finding{Object: object, Check: "session-url"}
	cs, bad := podCountSource(p, object, f.Check)
	if bad != nil {
		return *bad
	}
	if cs.url == "" {
		f.Level, f.Message = LevelOK, "timed drain (no session-count URL): it waits max-wait"
		return f
	}
	count := append([]string{cs.drainctl, "count"}, cs.flags...)
	stdout, stderr, err := c.Exec(ctx, p.Namespace, p.Name, cs.container, count)
	if err != nil {
		f.Level = LevelError
		f.Message = fmt.Sprintf("drainctl count in pod %s: %v: %s", p.Name, err, strings.TrimSpace(stderr))
		f.Fix = "make " + cs.url + " answer inside the pod (see docs/opting-in.md for each app's count URL and format)"
		return f
	}
	f.Level = LevelOK
	f.Message = fmt.Sprintf("%s answers in pod %s: %s sessions (%s)", cs.url, p.Name, strings.TrimSpace(stdout), strings.TrimSpace(stderr))
	return f
}

// WriteFindings writes findings as a table: level, object, check, what,
// and the fix under it.
func WriteFindings(w io.Writer, findings []Finding) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "LEVEL\tOBJECT\tCHECK\tFINDING")
	for _, f := range findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Level, f.Object, f.Check, f.Message)
		if f.Fix != "" {
			fmt.Fprintf(tw, "\t\t\tfix: %s\n", f.Fix)
		}
	}
	return tw.Flush()
}

// WriteFindingsJSON writes findings as {"findings": […]}.
func WriteFindingsJSON(w io.Writer, findings []Finding) error {
	return writeJSON(w, struct {
		Findings []Finding `json:"findings"`
	}{findings})
}

// Worst is the most severe level among findings.
func Worst(findings []Finding) string {
	worst := LevelOK
	for _, f := range findings {
		switch {
		case f.Level == LevelError:
			return LevelError
		case f.Level == LevelWarning:
			worst = LevelWarning
		}
	}
	return worst
}
