// Package inject is the webhook's pure core: given a pod and its
// Namespace's labels and annotations, it adds the drain — the preStop hook
// running `drainctl wait`, the volumes and mounts it needs, the init
// container that delivers drainctl, a long enough grace period.
//
// Promises: Inject is idempotent (a second pass changes nothing); it never
// lowers terminationGracePeriodSeconds; it never replaces a preStop hook it
// did not write, unless asked to keep it; it leaves containers other than
// the target alone; names it adds never collide with the pod's own.
package inject

import (
	"errors"
	"fmt"
	"net"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
)

// Where the injected pieces go in the pod.
const (
	BinVolume       = "stickydrain-bin"
	PodinfoVolume   = "stickydrain-podinfo"
	InitContainer   = "stickydrain-install"
	BinDir          = "/stickydrain/bin"
	PodinfoDir      = "/etc/stickydrain/podinfo"
	PodinfoFile     = PodinfoDir + "/annotations"
	DefaultImageBin = "/usr/local/bin/drainctl"
	// InstallerPath is where the stickydrain image holds drainctl.
	InstallerPath = "/drainctl"

	DefaultShutdownMargin = 30 * time.Second
)

// Reason says why a pod was or was not mutated: metric labels and logs.
type Reason string

// Reasons.
const (
	ReasonInjected        Reason = "injected"
	ReasonNotOptedIn      Reason = "not-opted-in"
	ReasonOptedOut        Reason = "opted-out"
	ReasonAlreadyInjected Reason = "already-injected"
	ReasonInvalid         Reason = "invalid"
	// ReasonBarePod: the Namespace opted in, but the pod has no
	// controller (kubectl run, kubectl debug); its own label opts it in.
	ReasonBarePod Reason = "bare-pod"
	// ReasonOwnerOutOfScope: the Namespace opted in, but the pod's
	// controller is not of the owner kinds (a Job's pod).
	ReasonOwnerOutOfScope Reason = "owner-out-of-scope"
	// ReasonDryRun: opted in for a look; nothing injected.
	ReasonDryRun Reason = "dry-run"
	// ReasonPodOptInNotAllowed: the pod opts itself in by label in a
	// Namespace that has not opted in and that the operator does not let
	// pods opt in by label (Config.PodOptInNamespaces).
	ReasonPodOptInNotAllowed Reason = "pod-opt-in-not-allowed"
)

// Config is what the webhook's flags set.
type Config struct {
	// DrainctlImage is the image of the init container that installs
	// drainctl (it holds the static binary at InstallerPath).
	DrainctlImage string
	// DrainctlImageFrom names a container of the webhook's own pod whose
	// image is the drainctl image (the install's init container): the
	// one place an image mirror rewrites, for both images. ResolveDrainctlImage
	// sets DrainctlImage from it.
	DrainctlImageFrom string
	// OwnerKinds are the controller kinds whose pods a Namespace opt-in
	// reaches; empty: DefaultOwnerKinds.
	OwnerKinds []string
	// DrainctlDelivery is how drainctl reaches a pod whose annotation
	// stickydrain.io/drainctl does not say: DeliveryInject (empty means
	// it) or DeliveryImageVolume.
	DrainctlDelivery string
	// PodOptInNamespaces, when set, are the only Namespaces whose pods may
	// opt themselves in by label (stickydrain.io/drain=enabled or dry-run)
	// while the Namespace has not opted in: elsewhere such a pod gets no
	// drain, and a warning saying why. Empty: any Namespace.
	PodOptInNamespaces []string
	// MaxWaitCeiling, when above 0, is the longest max-wait a pod gets: a
	// pod asking for more (or the default, above it) gets the ceiling and
	// a warning naming it.
	MaxWaitCeiling time.Duration
}

// BindFlags registers the config's flags.
func (c *Config) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.DrainctlImage, "drainctl-image", c.DrainctlImage, "`image` of the init container that installs drainctl into opted-in pods")
	fs.StringVar(&c.DrainctlImageFrom, "drainctl-image-from-container", c.DrainctlImageFrom, "take the drainctl image from this `container` of the webhook's own pod (POD_NAMESPACE, POD_NAME): the install's init container, so that kustomize images: or Helm values set it in one place, and the node pulls it before the webhook serves; instead of --drainctl-image")
	fs.Func("drainctl-delivery", "how drainctl reaches a pod whose stickydrain.io/drainctl annotation does not say: `mode` inject (an init container copies it; the default) or image-volume (the drainctl image mounted read-only: Kubernetes 1.35+ on containerd 2.1+ or CRI-O 1.31+)", func(v string) error {
		if err := checkDelivery(v); err != nil {
			return err
		}
		c.DrainctlDelivery = v
		return nil
	})
	fs.Func("pod-opt-in-namespaces", "comma-separated `names` of the only Namespaces whose pods may opt themselves in by label while their Namespace has not (a pod elsewhere labelled stickydrain.io/drain=enabled gets no drain, and a warning); default: any Namespace", func(v string) error {
		var names []string
		for _, n := range strings.Split(v, ",") {
			n = strings.TrimSpace(n)
			if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
				return fmt.Errorf("%q is not a Namespace name: %s", n, strings.Join(errs, "; "))
			}
			names = append(names, n)
		}
		c.PodOptInNamespaces = names
		return nil
	})
	fs.DurationVar(&c.MaxWaitCeiling, "max-wait-ceiling", c.MaxWaitCeiling, "the longest max-wait any pod gets (`duration`, e.g. 12h; at most "+api.MaxDuration.String()+"): a pod asking for more, or the default when it is above, gets this and a warning naming it; 0: no ceiling")
	fs.Func("namespace-opt-in-owner-kinds", "comma-separated `kinds` of controller whose pods a Namespace opt-in reaches (default "+strings.Join(DefaultOwnerKinds, ",")+"; also DaemonSet, Job (a CronJob's pods are its Jobs'), ReplicationController); a pod's own label opts any pod in", func(v string) error {
		k, err := ParseOwnerKinds(v)
		if err != nil {
			return err
		}
		c.OwnerKinds = k
		return nil
	})
}

// Validate checks the config.
func (c *Config) Validate() error {
	switch {
	case c.DrainctlImage != "" && c.DrainctlImageFrom != "":
		return errors.New("--drainctl-image and --drainctl-image-from-container both set: give one")
	case c.DrainctlImage == "" && c.DrainctlImageFrom == "":
		return errors.New("the drainctl image is required: --drainctl-image=IMAGE (e.g. ghcr.io/stickydrain/drainctl:v0.1.0) or --drainctl-image-from-container=NAME (a container of the webhook's own pod)")
	}
	if c.DrainctlDelivery != "" {
		if err := checkDelivery(c.DrainctlDelivery); err != nil {
			return fmt.Errorf("--drainctl-delivery=%s: %w", c.DrainctlDelivery, err)
		}
	}
	if c.MaxWaitCeiling < 0 || c.MaxWaitCeiling > api.MaxDuration {
		return fmt.Errorf("--max-wait-ceiling=%s: want 0 (no ceiling) up to %s", c.MaxWaitCeiling, api.MaxDuration)
	}
	return nil
}

// checkDelivery accepts the modes a webhook may make every pod's default
// (DeliveryImage is a pod's own to say: only its image knows).
func checkDelivery(v string) error {
	if v != api.DeliveryInject && v != api.DeliveryImageVolume {
		return fmt.Errorf("want %s or %s", api.DeliveryInject, api.DeliveryImageVolume)
	}
	return nil
}

// ResolveDrainctlImage sets DrainctlImage from the container
// DrainctlImageFrom of own, the webhook's own pod, when that flag is set.
func (c *Config) ResolveDrainctlImage(own *corev1.Pod) error {
	if c.DrainctlImageFrom == "" {
		return nil
	}
	for _, cs := range [][]corev1.Container{own.Spec.InitContainers, own.Spec.Containers} {
		for _, ctr := range cs {
			if ctr.Name == c.DrainctlImageFrom {
				if ctr.Image == "" {
					return fmt.Errorf("--drainctl-image-from-container=%s: the container has no image", c.DrainctlImageFrom)
				}
				c.DrainctlImage = ctr.Image
				return nil
			}
		}
	}
	return fmt.Errorf("--drainctl-image-from-container=%s: pod %s/%s has no such container", c.DrainctlImageFrom, own.Namespace, own.Name)
}

// Error is a bad parameter: it names the annotation and the accepted form.
type Error struct {
	Annotation string
	Value      string
	Problem    string
}

func (e *Error) Error() string {
	if e.Value == "" && e.Annotation != "" {
		return fmt.Sprintf("annotation %s: %s", e.Annotation, e.Problem)
	}
	if e.Annotation == "" {
		return e.Problem
	}
	return fmt.Sprintf("annotation %s=%.80q: %s", e.Annotation, e.Value, e.Problem)
}

// Namespace is what Inject reads of the pod's Namespace.
type Namespace struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

// Result is what Inject did to a pod.
type Result struct {
	Reason Reason
	// Warnings are legal settings that are probably not what the user
	// meant, each naming the annotation or field and the fix: the
	// admission response's warnings, which kubectl prints.
	Warnings []string
}

// Inject adds the drain to pod in place. Its Reason is ReasonInjected when
// it changed the pod, another when it left it alone (ReasonDryRun: it only
// set AnnotationDryRun), and ReasonInvalid with an *Error (or several,
// joined) when a parameter is bad.
func Inject(pod *corev1.Pod, ns Namespace, cfg Config) (Result, error) {
	mode, why, err := Scope(pod, ns, cfg)
	if why == ReasonPodOptInNotAllowed {
		return Result{Reason: why, Warnings: []string{fmt.Sprintf(
			"stickydrain: this pod opts in by its label %s=%s, but the operator lets pods opt in by label only in Namespaces %s: it gets no drain; label Namespace %s instead, or ask the operator (the webhook's --pod-opt-in-namespaces)",
			api.OptInLabel, pod.Labels[api.OptInLabel], strings.Join(cfg.PodOptInNamespaces, ", "), ns.Name)}}, nil
	}
	if err != nil || mode == Skip {
		return Result{Reason: why}, err
	}
	if pod.Annotations[api.AnnotationStatus] == api.StatusInjected || carriesDrain(&pod.Spec) {
		return Result{Reason: ReasonAlreadyInjected}, nil
	}
	get := func(key string) (string, bool) {
		if v, ok := pod.Annotations[key]; ok {
			return v, true
		}
		if v, ok := ns.Annotations[key]; ok {
			return v, true
		}
		if key == api.AnnotationDrainctl && cfg.DrainctlDelivery != "" {
			return cfg.DrainctlDelivery, true
		}
		return "", false
	}
	get, capped := ceilMaxWait(get, cfg.MaxWaitCeiling)
	target := pod
	if mode == DryRun {
		target = pod.DeepCopy()
	}
	plan, err := Resolve(&target.Spec, get)
	if err == nil && capped != "" {
		plan.Warnings = append([]string{capped}, plan.Warnings...)
	}
	if err == nil {
		err = apply(target, plan, cfg)
	}
	if mode == DryRun {
		setAnnotation(pod, api.AnnotationDryRun, truncate(dryRunSummary(pod, target, plan, err), api.MaxDryRunSummaryBytes-1))
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[api.DryRunPodLabel] = api.DryRunPodValue
		var warnings []string
		if err == nil {
			warnings = plan.Warnings
		}
		return Result{Reason: ReasonDryRun, Warnings: warnings}, nil
	}
	if err != nil {
		return Result{Reason: ReasonInvalid}, err
	}
	setAnnotation(pod, api.AnnotationStatus, api.StatusInjected)
	return Result{Reason: ReasonInjected, Warnings: plan.Warnings}, nil
}

// ceilMaxWait returns get with max-wait held to ceiling (none when 0): a
// pod asking for more, or the default when the ceiling is below it, gets
// the ceiling, and the warning that says so. A max-wait that does not
// parse is left to Resolve, which names it.
func ceilMaxWait(get func(string) (string, bool), ceiling time.Duration) (func(string) (string, bool), string) {
	if ceiling <= 0 {
		return get, ""
	}
	asked := api.DefaultMaxWait
	v, ok := get(api.AnnotationMaxWait)
	if ok {
		w := params.NewWait()
		if err := w.FlagSet().Set(api.ParamMaxWait, v); err != nil {
			return get, ""
		}
		asked = w.MaxWait
	}
	if asked <= ceiling {
		return get, ""
	}
	what := "the default max-wait"
	if ok {
		what = "annotation " + api.AnnotationMaxWait
	}
	warning := fmt.Sprintf("stickydrain: %s (%s) is above the operator's ceiling (%s, the webhook's --max-wait-ceiling): each pod drains for %s at most",
		what, asked, ceiling, ceiling)
	return func(key string) (string, bool) {
		if key == api.AnnotationMaxWait {
			return ceiling.String(), true
		}
		return get(key)
	}, warning
}

func setAnnotation(pod *corev1.Pod, key, value string) {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[key] = value
}

// dryRunSummary says, in one line, what a dry run would have done.
// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func dryRunSummary(orig, injected *corev1.Pod, plan *Plan, err error) string {
	if err != nil {
		return "would refuse the pod: " + strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	c := injected.Spec.Containers[plan.Container]
	grace := ptr.Deref(orig.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds)
	s := fmt.Sprintf("would hook container %s with preStop %q; terminationGracePeriodSeconds %d -> %d",
		c.Name, strings.Join(c.Lifecycle.PreStop.Exec.Command, " "), grace,
		ptr.Deref(injected.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds))
	switch {
	case plan.ImageVolume:
		s += "; an image volume mounts drainctl from " + imageVolumes(injected)
	case plan.InjectBin:
		s += "; an init container copies drainctl from " + strings.Join(initImages(injected), ",")
	}
	return s
}

func imageVolumes(p *corev1.Pod) string {
	var out []string
	for _, v := range p.Spec.Volumes {
		if strings.HasPrefix(v.Name, BinVolume) && v.Image != nil {
			out = append(out, v.Image.Reference)
		}
	}
	return strings.Join(out, ",")
}

func initImages(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Spec.InitContainers {
		if strings.HasPrefix(c.Name, InitContainer) {
			out = append(out, c.Image)
		}
	}
	return out
}

// Plan is what the parameters resolve to for one pod spec.
type Plan struct {
	Container int // index in spec.Containers
	// InjectBin: stickydrain delivers drainctl at BinDir, by an init
	// container's copy or, with ImageVolume, by mounting the image.
	InjectBin   bool
	ImageVolume bool
	DrainctlBin string
	WaitArgs    []string
	Keep        []string // an existing exec preStop to run first
	Grace       int64    // the least terminationGracePeriodSeconds
	Warnings    []string // legal but probably not meant (see warnings)
}

// Resolve reads the parameters (get looks one up: the pod's annotation,
// else its Namespace's) and checks them against the spec. Every problem is
// reported, each naming its annotation.
func Resolve(spec *corev1.PodSpec, get func(string) (string, bool)) (*Plan, error) {
	var errs []error
	bad := func(key, val, problem string) {
		errs = append(errs, &Error{Annotation: key, Value: val, Problem: problem})
	}

	w := params.NewWait()
	fs := w.FlagSet()
	for _, p := range api.AnnotatedParams() {
		f, key := p.Name, p.Annotation()
		if v, ok := get(key); ok {
			if err := fs.Set(f, v); err != nil {
				// drainctl's own message, without pflag's "invalid
				// argument … for --flag": the annotation is named instead.
				var iv *pflag.InvalidValueError
				if errors.As(err, &iv) {
					err = iv.Unwrap()
				}
				bad(key, "", err.Error())
			}
		}
	}
	if err := fs.Set(api.ParamPodinfo, PodinfoFile); err != nil {
		return nil, err
	}
	if len(errs) == 0 {
		if err := w.Validate(); err != nil {
			// The combination messages name flags; name the annotations.
			msg := flagRE.ReplaceAllStringFunc(err.Error(), func(f string) string {
				if p, ok := api.Lookup(f[2:]); ok && p.Annotated {
					return p.Annotation()
				}
				return f
			})
			for _, line := range strings.Split(msg, "\n") {
				errs = append(errs, &Error{Problem: "annotations: " + line})
			}
		}
	}

	plan := &Plan{InjectBin: true, DrainctlBin: BinDir + "/drainctl"}
	switch v, _ := get(api.AnnotationDrainctl); v {
	case "", api.DeliveryInject:
	case api.DeliveryImageVolume:
		plan.ImageVolume = true
	case api.DeliveryImage:
		plan.InjectBin = false
		plan.DrainctlBin = DefaultImageBin
		if p, ok := get(api.AnnotationDrainctlPath); ok {
			if !strings.HasPrefix(p, "/") {
				bad(api.AnnotationDrainctlPath, p, "want an absolute path, e.g. /usr/local/bin/drainctl")
			} else {
				plan.DrainctlBin = p
			}
		}
	default:
		bad(api.AnnotationDrainctl, v, `want "inject" (an init container copies drainctl), "image-volume" (the drainctl image mounted read-only: Kubernetes 1.35+ on containerd 2.1+ or CRI-O 1.31+) or "image" (it is in the image)`)
	}

	margin := DefaultShutdownMargin
	if v, ok := get(api.AnnotationShutdownMargin); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > api.MaxDuration {
			bad(api.AnnotationShutdownMargin, v, "want a duration of 0 or more, at most "+api.MaxDuration.String()+", e.g. 30s")
		} else {
			margin = d
		}
	}
	keep := false
	if v, ok := get(api.AnnotationKeepPreStop); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad(api.AnnotationKeepPreStop, v, `want "true" or "false"`)
		}
		keep = b
	}

	plan.Container = -1
	if len(spec.Containers) == 0 {
		errs = append(errs, &Error{Problem: "the pod has no containers"})
	} else if name, ok := get(api.AnnotationContainer); ok {
		for i, c := range spec.Containers {
			if c.Name == name {
				plan.Container = i
			}
		}
		if plan.Container < 0 {
			bad(api.AnnotationContainer, name, "no container of that name; want one of "+containerNames(spec))
		}
	} else {
		plan.Container = 0
		if name, ok := get(api.DefaultContainerAnnotation); ok {
			for i, c := range spec.Containers {
				if c.Name == name {
					plan.Container = i
				}
			}
		}
	}

	var preWait time.Duration // the pod's own hook's time, before the drain
	if plan.Container >= 0 {
		c := spec.Containers[plan.Container]
		if h := preStop(c); h != nil && !plan.ours(h) {
			switch {
			case h.Sleep != nil && h.Sleep.Seconds <= 0:
				// A zero-second sleep is no hook.
			case h.Sleep != nil && h.Sleep.Seconds > int64(api.MaxDuration/time.Second):
				errs = append(errs, &Error{Problem: fmt.Sprintf("container %q: its preStop sleep of %d seconds is longer than %s, the longest stickydrain keeps", c.Name, h.Sleep.Seconds, api.MaxDuration)})
			case h.Sleep != nil:
				// Kept, without asking: it runs first, then the drain.
				preWait = time.Duration(h.Sleep.Seconds) * time.Second
				if err := fs.Set(api.ParamPreSleep, preWait.String()); err != nil {
					return nil, err
				}
			case h.HTTPGet != nil:
				u, headers, err := hookURL(c, h.HTTPGet)
				if err != nil {
					errs = append(errs, &Error{Problem: fmt.Sprintf("container %q: its preStop httpGet cannot be kept: %v", c.Name, err)})
					break
				}
				preWait = api.PreHTTPGetTimeout
				if err := fs.Set(api.ParamPreHTTPGet, u); err != nil {
					return nil, err
				}
				for _, hd := range headers {
					if err := fs.Set(api.ParamPreHTTPHeader, hd); err != nil {
						return nil, err
					}
				}
			case !keep:
				errs = append(errs, &Error{Annotation: api.AnnotationKeepPreStop, Problem: fmt.Sprintf(
					"container %q already has a preStop hook; stickydrain will not replace it: remove it, or set %s=true to run it (exec hooks only) before the drain", c.Name, api.AnnotationKeepPreStop)})
			case h.Exec == nil || len(h.Exec.Command) == 0:
				errs = append(errs, &Error{Annotation: api.AnnotationKeepPreStop, Value: "true", Problem: fmt.Sprintf(
					"container %q has a preStop hook that is not exec; only an exec hook can be kept (drainctl runs it first)", c.Name)})
			default:
				plan.Keep = append([]string(nil), h.Exec.Command...)
			}
		}
		ours := []string{PodinfoDir}
		if plan.InjectBin {
			ours = append(ours, BinDir)
		}
		for _, m := range c.VolumeMounts {
			for _, dir := range ours {
				if overlaps(m.MountPath, dir) {
					errs = append(errs, &Error{Problem: fmt.Sprintf("container %q mounts volume %s at %s, inside %s where stickydrain mounts its own", c.Name, m.Name, m.MountPath, dir)})
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	plan.WaitArgs = params.Args(fs)
	plan.Grace = int64((preWait + w.MaxWait + w.MinWait + margin + time.Second - 1) / time.Second)
	plan.Warnings = warnings(spec, plan, w, get)
	return plan, nil
}

// hookURL is the URL and headers drainctl calls for a container's
// httpGet preStop, as the kubelet would call it: the scheme, the host
// (default localhost: drainctl runs in the pod), the port by number or by
// the container's port name, the path.
func hookURL(c corev1.Container, h *corev1.HTTPGetAction) (string, []string, error) {
	port := h.Port.IntValue()
	if h.Port.Type == intstr.String {
		port = 0
		for _, p := range c.Ports {
			if p.Name == h.Port.StrVal {
				port = int(p.ContainerPort)
			}
		}
		if port == 0 {
			return "", nil, fmt.Errorf("port %q is not a port name of the container", h.Port.StrVal)
		}
	}
	if port < 1 || port > 65535 {
		return "", nil, fmt.Errorf("port %s is not 1-65535", h.Port.String())
	}
	scheme := "http"
	if h.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	host := h.Host
	if host == "" {
		host = "localhost"
	}
	p := h.Path
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	var headers []string
	for _, hd := range h.HTTPHeaders {
		headers = append(headers, hd.Name+": "+hd.Value)
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + p, headers, nil
}

func (p *Plan) ours(h *corev1.LifecycleHandler) bool {
	return h.Exec != nil && len(h.Exec.Command) >= 2 && h.Exec.Command[0] == p.DrainctlBin && h.Exec.Command[1] == "wait"
}

// carriesDrain recognises a pod mutated before even when its status
// annotation was lost: a container whose preStop is `drainctl wait` with
// stickydrain's podinfo mount.
func carriesDrain(spec *corev1.PodSpec) bool {
	for _, c := range spec.Containers {
		h := preStop(c)
		if h == nil || h.Exec == nil || len(h.Exec.Command) < 2 || path.Base(h.Exec.Command[0]) != "drainctl" || h.Exec.Command[1] != "wait" {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.MountPath == PodinfoDir {
				return true
			}
		}
	}
	return false
}

// overlaps reports whether the user's mount path is ours or lies below
// it (a mount above ours is fine: ours nests inside it).
func overlaps(user, ours string) bool {
	return strings.HasPrefix(strings.TrimSuffix(user, "/")+"/", strings.TrimSuffix(ours, "/")+"/")
}

var flagRE = regexp.MustCompile(`--[a-z][a-z-]*`)

func preStop(c corev1.Container) *corev1.LifecycleHandler {
	if c.Lifecycle == nil {
		return nil
	}
	return c.Lifecycle.PreStop
}

func containerNames(spec *corev1.PodSpec) string {
	var names []string
	for _, c := range spec.Containers {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// apply changes the pod as the plan says. Additions are append-if-absent.
func apply(pod *corev1.Pod, plan *Plan, cfg Config) error {
	spec := &pod.Spec
	binVol := uniqueVolume(spec, BinVolume)
	podinfoVol := uniqueVolume(spec, PodinfoVolume)

	switch {
	case plan.InjectBin && cfg.DrainctlImage == "":
		return errors.New("the webhook has no --drainctl-image")
	case plan.ImageVolume:
		// The image's root is the volume: /drainctl lands at BinDir/drainctl,
		// where the init container would have copied it.
		addVolume(spec, corev1.Volume{Name: binVol, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
			Reference: cfg.DrainctlImage, PullPolicy: corev1.PullIfNotPresent,
		}}})
	case plan.InjectBin:
		addVolume(spec, corev1.Volume{Name: binVol, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: ptr.To(resource.MustParse("32Mi")),
		}}})
		initName := uniqueContainer(spec, InitContainer)
		spec.InitContainers = append(spec.InitContainers, corev1.Container{
			Name:            initName,
			Image:           cfg.DrainctlImage,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Command:         []string{InstallerPath, "install", BinDir},
			VolumeMounts:    []corev1.VolumeMount{{Name: binVol, MountPath: BinDir}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
			},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				RunAsNonRoot:             ptr.To(true),
				RunAsUser:                ptr.To[int64](65532),
				RunAsGroup:               ptr.To[int64](65532),
				ReadOnlyRootFilesystem:   ptr.To(true),
				SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		})
	}
	addVolume(spec, corev1.Volume{Name: podinfoVol, VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations"}}},
	}}})

	c := &spec.Containers[plan.Container]
	if plan.InjectBin {
		addMount(c, corev1.VolumeMount{Name: binVol, MountPath: BinDir, ReadOnly: true})
	}
	addMount(c, corev1.VolumeMount{Name: podinfoVol, MountPath: PodinfoDir, ReadOnly: true})
	cmd := append([]string{plan.DrainctlBin, "wait"}, plan.WaitArgs...)
	if len(plan.Keep) > 0 {
		cmd = append(append(cmd, "--"), plan.Keep...)
	}
	if c.Lifecycle == nil {
		c.Lifecycle = &corev1.Lifecycle{}
	}
	c.Lifecycle.PreStop = &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}

	if cur := ptr.Deref(spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds); cur < plan.Grace {
		spec.TerminationGracePeriodSeconds = ptr.To(plan.Grace)
	}
	return nil
}

func uniqueVolume(spec *corev1.PodSpec, base string) string {
	taken := map[string]bool{}
	for _, v := range spec.Volumes {
		taken[v.Name] = true
	}
	return unique(base, taken)
}

func uniqueContainer(spec *corev1.PodSpec, base string) string {
	taken := map[string]bool{}
	for _, c := range spec.Containers {
		taken[c.Name] = true
	}
	for _, c := range spec.InitContainers {
		taken[c.Name] = true
	}
	for _, c := range spec.EphemeralContainers {
		taken[c.Name] = true
	}
	return unique(base, taken)
}

func unique(base string, taken map[string]bool) string {
	name := base
	for i := 2; taken[name]; i++ {
		name = fmt.Sprintf("%s-%d", base, i)
	}
	return name
}

func addVolume(spec *corev1.PodSpec, v corev1.Volume) {
	for _, x := range spec.Volumes {
		if x.Name == v.Name {
			return
		}
	}
	spec.Volumes = append(spec.Volumes, v)
}

func addMount(c *corev1.Container, m corev1.VolumeMount) {
	for _, x := range c.VolumeMounts {
		if x.MountPath == m.MountPath {
			return
		}
	}
	c.VolumeMounts = append(c.VolumeMounts, m)
}
