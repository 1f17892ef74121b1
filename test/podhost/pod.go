package podhost

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// minGracePeriod is what the kubelet still gives a container after a
// preStop hook used up (or overran) the grace period.
const minGracePeriod = 2 * time.Second

type pod struct {
	h    *Host
	name string
	ns   string

	mu       sync.Mutex
	obj      *corev1.Pod
	deleting chan struct{}
	gone     chan struct{}
	delOnce  sync.Once
	goneOnce sync.Once

	netns   string
	ip      netip.Addr
	vols    *volumes
	logDir  string
	started time.Time

	initDone   bool
	initStatus []corev1.ContainerStatus
	ctrs       []*ctr
	phase      corev1.PodPhase
	message    string
	exits      chan *ctr
	probes     chan probeResult
	restarts   chan *ctr
}

// probeResult is a readiness change, applied by the pod's own goroutine.
type probeResult struct {
	c     *ctr
	ready bool
}

type ctr struct {
	spec      corev1.Container
	proc      *proc
	ready     bool
	restarts  int32
	startedAt time.Time
	term      *corev1.ContainerStateTerminated
	lastTerm  *corev1.ContainerStateTerminated
	waiting   string
	stopProbe context.CancelFunc
}

func newPod(h *Host, obj *corev1.Pod) *pod {
	return &pod{
		h: h, name: obj.Name, ns: obj.Namespace, obj: obj.DeepCopy(),
		deleting: make(chan struct{}), gone: make(chan struct{}),
		phase: corev1.PodPending, exits: make(chan *ctr, 16), probes: make(chan probeResult, 16), restarts: make(chan *ctr, 16),
	}
}

func (p *pod) event(container string, step Step, code int, detail string) {
	p.h.record(Event{Namespace: p.ns, Pod: p.name, Container: container, Step: step, ExitCode: code, Detail: detail})
}

func (p *pod) current() *corev1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.obj.DeepCopy()
}

// update takes a newer Pod from the watch.
func (p *pod) update(obj *corev1.Pod) {
	p.mu.Lock()
	old := p.obj
	p.obj = obj.DeepCopy()
	vols := p.vols
	p.mu.Unlock()
	if vols != nil && (!mapsEqual(old.Labels, obj.Labels) || !mapsEqual(old.Annotations, obj.Annotations)) {
		if err := vols.refresh(obj); err != nil {
			p.h.logf("podhost: %s/%s: refreshing downward API: %v", p.ns, p.name, err)
		} else if len(vols.dapi) > 0 {
			p.event("", StepAnnotationsWrote, -1, "")
		}
	}
	if obj.DeletionTimestamp != nil {
		p.delOnce.Do(func() {
			p.event("", StepDeletionSeen, -1, fmt.Sprintf("grace %ds", ptr.Deref(obj.DeletionGracePeriodSeconds, 0)))
			close(p.deleting)
		})
	}
}

func (p *pod) markGone() { p.goneOnce.Do(func() { close(p.gone) }) }

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// run is the pod's whole life on this host.
func (p *pod) run(ctx context.Context) {
	defer p.cleanup()
	obj := p.current()
	if obj.Spec.NodeName == "" {
		node := p.h.pickNode()
		err := p.h.opts.Clientset.CoreV1().Pods(p.ns).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns, UID: obj.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}, metav1.CreateOptions{})
		if err != nil {
			p.h.logf("podhost: binding %s/%s: %v", p.ns, p.name, err)
			return
		}
		p.mu.Lock()
		p.obj.Spec.NodeName = node
		p.mu.Unlock()
		p.event("", StepBound, -1, node)
	}
	p.started = time.Now()

	// The sandbox: a network namespace with the pod's IP.
	ip, err := p.h.net.alloc()
	if err != nil {
		p.fail(ctx, err.Error())
		return
	}
	p.ip = ip
	p.netns = p.h.netnsName()
	if err := p.h.net.sandbox(p.netns, ip); err != nil {
		p.fail(ctx, "creating the pod network: "+err.Error())
		return
	}
	p.event("", StepSandbox, -1, ip.String())
	root := filepath.Join(p.h.dir, "pods", string(obj.UID))
	p.logDir = filepath.Join(p.h.dir, "logs", p.ns+"_"+p.name)
	if err := os.MkdirAll(p.logDir, 0o755); err != nil {
		p.fail(ctx, err.Error())
		return
	}
	vols, err := newVolumes(filepath.Join(root, "volumes"), obj)
	if err != nil {
		p.fail(ctx, err.Error())
		return
	}
	p.mu.Lock()
	p.vols = vols
	p.mu.Unlock()
	for _, c := range obj.Spec.Containers {
		p.ctrs = append(p.ctrs, &ctr{spec: c, waiting: "PodInitializing"})
	}
	for _, c := range obj.Spec.InitContainers {
		p.initStatus = append(p.initStatus, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}})
	}
	p.pushStatus(ctx)

	if !p.runInit(ctx, obj) {
		return
	}
	p.initDone = true
	p.phase = corev1.PodRunning
	for _, c := range p.ctrs {
		p.startCtr(ctx, c)
	}
	p.pushStatus(ctx)

	for {
		select {
		case <-p.gone:
			return
		case <-ctx.Done():
			return
		case <-p.deleting:
			p.terminate(ctx)
			return
		case c := <-p.exits:
			p.exited(ctx, c)
		case c := <-p.restarts:
			p.restart(ctx, c)
		case r := <-p.probes:
			r.c.ready = r.ready
			p.pushStatus(ctx)
		}
	}
}

// fail leaves the pod Pending with a message (as the kubelet does for
// config errors) until it is deleted.
func (p *pod) fail(ctx context.Context, msg string) {
	p.message = "podhost: " + msg
	p.event("", StepFailed, -1, msg)
	p.pushStatus(ctx)
	select {
	case <-p.deleting:
		p.deletePod(ctx)
	case <-p.gone:
	case <-ctx.Done():
	}
}

func (p *pod) runInit(ctx context.Context, obj *corev1.Pod) bool {
	for i := range obj.Spec.InitContainers {
		spec := obj.Spec.InitContainers[i]
		backoff := time.Second
		for {
			c := &ctr{spec: spec}
			if err := p.launch(c); err != nil {
				p.initStatus[i].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerError", Message: err.Error()}}
				p.message = err.Error()
				p.pushStatus(ctx)
				p.event(spec.Name, StepFailed, -1, err.Error())
				p.waitDeletion(ctx)
				return false
			}
			p.event(spec.Name, StepInitStarted, -1, "")
			p.initStatus[i].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}}
			p.pushStatus(ctx)
			select {
			case <-c.proc.done:
			case <-p.deleting:
				c.proc.kill()
				<-c.proc.done
				p.deletePod(ctx)
				return false
			case <-p.gone:
				c.proc.kill()
				<-c.proc.done
				return false
			}
			code := c.proc.exit
			p.event(spec.Name, StepInitExited, code, "")
			p.initStatus[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: int32(code), Reason: reason(code), StartedAt: metav1.NewTime(c.startedAt), FinishedAt: metav1.Now()}}
			if code == 0 {
				p.initStatus[i].Ready = true
				break
			}
			p.initStatus[i].RestartCount++
			if obj.Spec.RestartPolicy == corev1.RestartPolicyNever {
				p.phase = corev1.PodFailed
				p.pushStatus(ctx)
				p.waitDeletion(ctx)
				return false
			}
			p.pushStatus(ctx)
			p.event(spec.Name, StepRestarting, -1, backoff.String())
			select {
			case <-time.After(backoff):
			case <-p.deleting:
				p.deletePod(ctx)
				return false
			case <-p.gone:
				return false
			}
			backoff = min(2*backoff, 10*time.Second)
		}
	}
	return true
}

func (p *pod) waitDeletion(ctx context.Context) {
	select {
	case <-p.deleting:
		p.deletePod(ctx)
	case <-p.gone:
	case <-ctx.Done():
	}
}

// launch starts one container process.
func (p *pod) launch(c *ctr) error {
	obj := p.current()
	obj.Status.PodIP = p.ip.String()
	obj.Status.HostIP = p.h.net.gateway.String()
	env, vars, err := containerEnv(obj, &c.spec)
	if err != nil {
		return err
	}
	exe, ok := p.h.opts.Images[c.spec.Image]
	if !ok {
		return fmt.Errorf("image %q is not in the pod host's image registry", c.spec.Image)
	}
	var argv []string
	if len(c.spec.Command) > 0 {
		for _, a := range c.spec.Command {
			argv = append(argv, expand(a, vars))
		}
		// The image's entrypoint named by its path inside the image.
		if filepath.Base(argv[0]) == filepath.Base(exe) {
			if _, err := os.Stat(argv[0]); err != nil {
				argv[0] = exe
			}
		}
	} else {
		argv = []string{exe}
	}
	for _, a := range c.spec.Args {
		argv = append(argv, expand(a, vars))
	}
	var mounts []mount
	for _, vm := range c.spec.VolumeMounts {
		src, ok := p.vols.paths[vm.Name]
		if !ok {
			return fmt.Errorf("volume mount %s: no volume %q in the pod", vm.MountPath, vm.Name)
		}
		if vm.SubPath != "" {
			src = filepath.Join(src, vm.SubPath)
		}
		fi, err := os.Stat(src)
		if err != nil {
			if err := os.MkdirAll(src, 0o755); err != nil {
				return err
			}
			fi, _ = os.Stat(src)
		}
		if err := p.h.ensureMountPoint(vm.MountPath, fi.IsDir()); err != nil {
			return fmt.Errorf("mount point %s: %w", vm.MountPath, err)
		}
		mounts = append(mounts, mount{Source: src, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
	}
	logFile, err := os.OpenFile(filepath.Join(p.logDir, c.spec.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	proc, err := startContainer(p.netns, mounts, env, c.spec.WorkingDir, argv, logFile)
	if err != nil {
		logFile.Close()
		return err
	}
	go func() { <-proc.done; logFile.Close() }()
	c.proc, c.startedAt = proc, time.Now()
	return nil
}

func (p *pod) startCtr(ctx context.Context, c *ctr) {
	if err := p.launch(c); err != nil {
		c.waiting = "CreateContainerError"
		p.message = err.Error()
		p.event(c.spec.Name, StepFailed, -1, err.Error())
		return
	}
	c.waiting, c.term = "", nil
	p.event(c.spec.Name, StepStarted, -1, "")
	pctx, cancel := context.WithCancel(ctx)
	c.stopProbe = cancel
	proc := c.proc
	go func() {
		<-proc.done
		cancel()
		select {
		case p.exits <- c:
		case <-ctx.Done():
		}
	}()
	if c.spec.ReadinessProbe == nil {
		c.ready = true
		p.event(c.spec.Name, StepReady, -1, "no readiness probe")
		return
	}
	go p.probeLoop(pctx, c, proc)
}

// exited handles a container that ended while the pod is not terminating.
func (p *pod) exited(ctx context.Context, c *ctr) {
	code := c.proc.exit
	p.event(c.spec.Name, StepExited, code, "")
	c.ready = false
	c.term = &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: reason(code),
		StartedAt: metav1.NewTime(c.startedAt), FinishedAt: metav1.Now()}
	policy := p.current().Spec.RestartPolicy
	restart := policy == corev1.RestartPolicyAlways || policy == "" || (policy == corev1.RestartPolicyOnFailure && code != 0)
	if !restart {
		done, failed := true, false
		for _, x := range p.ctrs {
			if x.term == nil {
				done = false
			} else if x.term.ExitCode != 0 {
				failed = true
			}
		}
		if done {
			p.phase = corev1.PodSucceeded
			if failed {
				p.phase = corev1.PodFailed
			}
		}
		p.pushStatus(ctx)
		return
	}
	p.pushStatus(ctx)
	// The back-off runs beside the pod's loop, which goes on applying
	// probe results and watching for deletion meanwhile.
	backoff := min(time.Duration(1<<min(c.restarts, 4))*time.Second, 10*time.Second)
	p.event(c.spec.Name, StepRestarting, -1, backoff.String())
	go func() {
		select {
		case <-time.After(backoff):
			select {
			case p.restarts <- c:
			case <-p.deleting:
			case <-p.gone:
			case <-ctx.Done():
			}
		case <-p.deleting:
		case <-p.gone:
		case <-ctx.Done():
		}
	}()
}

func (p *pod) restart(ctx context.Context, c *ctr) {
	c.restarts++
	c.lastTerm, c.term = c.term, nil
	p.startCtr(ctx, c)
	p.pushStatus(ctx)
}

// terminate is the kubelet's graceful kill of every container, then the
// Pod's final deletion.
func (p *pod) terminate(ctx context.Context) {
	obj := p.current()
	grace := time.Duration(ptr.Deref(obj.DeletionGracePeriodSeconds, ptr.Deref(obj.Spec.TerminationGracePeriodSeconds, 30))) * time.Second
	var wg sync.WaitGroup
	for _, c := range p.ctrs {
		if c.proc == nil || c.proc.exited() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.killCtr(ctx, c, grace)
		}()
	}
	// Status goes on while containers stop (readiness turns serving off).
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case r := <-p.probes:
			if r.c.term == nil {
				r.c.ready = r.ready
			}
			p.pushStatus(ctx)
		case c := <-p.exits:
			c.ready = false
			c.term = &corev1.ContainerStateTerminated{ExitCode: int32(c.proc.exit), Reason: reason(c.proc.exit),
				StartedAt: metav1.NewTime(c.startedAt), FinishedAt: metav1.Now()}
			p.pushStatus(ctx)
		case <-p.gone:
			for _, c := range p.ctrs {
				if c.proc != nil {
					c.proc.kill()
				}
			}
			<-done
			return
		}
	}
	failed := false
	for _, c := range p.ctrs {
		c.ready = false
		if c.proc != nil && c.term == nil {
			c.term = &corev1.ContainerStateTerminated{ExitCode: int32(c.proc.exit), Reason: reason(c.proc.exit),
				StartedAt: metav1.NewTime(c.startedAt), FinishedAt: metav1.Now()}
		}
		if c.term != nil && c.term.ExitCode != 0 {
			failed = true
		}
	}
	p.phase = corev1.PodSucceeded
	if failed {
		p.phase = corev1.PodFailed
	}
	p.pushStatus(ctx)
	p.deletePod(ctx)
}

// killCtr follows the kubelet's killContainer: the preStop hook bounded by
// the grace period, then SIGTERM, then SIGKILL when the rest of the grace
// period (at least minGracePeriod) has passed.
func (p *pod) killCtr(ctx context.Context, c *ctr, grace time.Duration) {
	start := time.Now()
	if c.spec.Lifecycle != nil && c.spec.Lifecycle.PreStop != nil {
		p.event(c.spec.Name, StepPreStopStarted, -1, "")
		hctx, cancel := context.WithTimeout(ctx, grace)
		code, out := p.runHandler(hctx, c, c.spec.Lifecycle.PreStop)
		timedOut := hctx.Err() == context.DeadlineExceeded
		cancel()
		if timedOut {
			p.event(c.spec.Name, StepPreStopTimedOut, code, fmt.Sprintf("killed at the grace period %s", grace))
		} else {
			p.event(c.spec.Name, StepPreStopFinished, code, strings.TrimSpace(out))
		}
	}
	rest := grace - time.Since(start)
	if rest < minGracePeriod {
		rest = minGracePeriod
	}
	if c.proc.exited() {
		return
	}
	p.event(c.spec.Name, StepSIGTERM, -1, fmt.Sprintf("SIGKILL in %s", rest.Round(time.Millisecond)))
	c.proc.signal(syscall.SIGTERM)
	select {
	case <-c.proc.done:
	case <-time.After(rest):
		p.event(c.spec.Name, StepSIGKILL, -1, "")
		c.proc.kill()
		<-c.proc.done
	}
	p.event(c.spec.Name, StepExited, c.proc.exit, "")
}

// runHandler runs a lifecycle handler: exec inside the container, or an
// HTTP GET from the host to the pod. It returns an exit code (for httpGet
// 0 on 2xx/3xx, 1 otherwise) and the output.
func (p *pod) runHandler(ctx context.Context, c *ctr, h *corev1.LifecycleHandler) (int, string) {
	switch {
	case h.Exec != nil:
		return c.proc.execIn(ctx, c.proc.env, c.proc.workdir, h.Exec.Command)
	case h.HTTPGet != nil:
		ok, msg := p.httpGet(ctx, c, h.HTTPGet)
		if ok {
			return 0, msg
		}
		return 1, msg
	case h.Sleep != nil:
		select {
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
			return 0, ""
		case <-ctx.Done():
			return -1, "interrupted"
		}
	}
	return -1, "podhost: unsupported handler"
}

func (p *pod) httpGet(ctx context.Context, c *ctr, g *corev1.HTTPGetAction) (bool, string) {
	port, err := resolvePort(g.Port, &c.spec)
	if err != nil {
		return false, err.Error()
	}
	host := g.Host
	if host == "" {
		host = p.ip.String()
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), g.Path), nil)
	if err != nil {
		return false, err.Error()
	}
	for _, hd := range g.HTTPHeaders {
		req.Header.Add(hd.Name, hd.Value)
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return false, err.Error()
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400, resp.Status
}

func resolvePort(port intstr.IntOrString, c *corev1.Container) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no container port named %q", port.StrVal)
}

// probeLoop runs a readiness probe and reports changes on p.probes.
func (p *pod) probeLoop(ctx context.Context, c *ctr, proc *proc) {
	pr := c.spec.ReadinessProbe
	period := time.Duration(max(pr.PeriodSeconds, 1)) * time.Second
	timeout := time.Duration(max(pr.TimeoutSeconds, 1)) * time.Second
	successes, failures := int32(0), int32(0)
	ready := false
	needOK, needFail := max(pr.SuccessThreshold, 1), max(pr.FailureThreshold, 1)
	select {
	case <-time.After(time.Duration(pr.InitialDelaySeconds) * time.Second):
	case <-ctx.Done():
		return
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		ok := p.probeOnce(pctx, c, proc, pr)
		cancel()
		if ctx.Err() != nil {
			return
		}
		change := false
		if ok {
			successes, failures = successes+1, 0
			if !ready && successes >= needOK {
				ready, change = true, true
				p.event(c.spec.Name, StepReady, -1, "")
			}
		} else {
			failures, successes = failures+1, 0
			if ready && failures >= needFail {
				ready, change = false, true
				p.event(c.spec.Name, StepUnready, -1, "")
			}
		}
		if change {
			select {
			case p.probes <- probeResult{c, ready}:
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-time.After(period):
		case <-ctx.Done():
			return
		}
	}
}

func (p *pod) probeOnce(ctx context.Context, c *ctr, proc *proc, pr *corev1.Probe) bool {
	switch {
	case pr.HTTPGet != nil:
		ok, _ := p.httpGet(ctx, c, pr.HTTPGet)
		return ok
	case pr.TCPSocket != nil:
		port, err := resolvePort(pr.TCPSocket.Port, &c.spec)
		if err != nil {
			return false
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.ip.String(), strconv.Itoa(port)))
		if err != nil {
			return false
		}
		conn.Close()
		return true
	case pr.Exec != nil:
		code, _ := proc.execIn(ctx, proc.env, proc.workdir, pr.Exec.Command)
		return code == 0
	}
	return false
}

// deletePod ends the graceful deletion, as the kubelet does once every
// container has stopped.
func (p *pod) deletePod(ctx context.Context) {
	obj := p.current()
	// Tried again while the API server cannot be reached, as pushStatus.
	for deadline := time.Now().Add(time.Minute); ; {
		err := p.h.opts.Clientset.CoreV1().Pods(p.ns).Delete(ctx, p.name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: &obj.UID},
		})
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) || ctx.Err() != nil {
			break
		}
		if time.Now().After(deadline) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			p.h.logf("podhost: deleting %s/%s: %v", p.ns, p.name, err)
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	p.event("", StepDeleted, -1, "")
}

func (p *pod) cleanup() {
	for _, c := range p.ctrs {
		if c.proc != nil {
			c.proc.kill()
			<-c.proc.done
		}
		if c.stopProbe != nil {
			c.stopProbe()
		}
	}
	if p.netns != "" {
		if err := removeSandbox(p.netns); err != nil {
			p.h.logf("podhost: %v", err)
		}
	}
	if p.ip.IsValid() {
		p.h.net.release(p.ip)
	}
	if p.vols != nil {
		_ = os.RemoveAll(filepath.Dir(p.vols.dir))
	}
}

func reason(code int) string {
	switch {
	case code == 0:
		return "Completed"
	case code == 137:
		return "Error" // the kubelet reports SIGKILL from grace expiry as Error
	default:
		return "Error"
	}
}

// pushStatus writes the pod's status to the API server.
// pushStatus writes the pod's status. While the API server cannot be
// reached (a control-plane restart) it tries again every half second for
// up to a minute, as the kubelet's status manager keeps the latest status
// until it lands: a readiness change must not be lost to an outage. It
// blocks the pod's own loop meanwhile, which a kubelet would not.
func (p *pod) pushStatus(ctx context.Context) {
	deadline := time.Now().Add(time.Minute)
	for {
		status := p.buildStatus()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := p.h.opts.Clientset.CoreV1().Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status = status
			_, err = p.h.opts.Clientset.CoreV1().Pods(p.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err == nil || apierrors.IsNotFound(err) || ctx.Err() != nil {
			return
		}
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || time.Now().After(deadline) {
			p.h.logf("podhost: status of %s/%s: %v", p.ns, p.name, err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (p *pod) buildStatus() corev1.PodStatus {
	now := metav1.Now()
	cond := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s, reason = corev1.ConditionTrue, ""
		}
		return corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now}
	}
	allReady := len(p.ctrs) > 0
	var statuses []corev1.ContainerStatus
	for _, c := range p.ctrs {
		st := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, ImageID: "podhost://" + c.spec.Image,
			Ready: c.ready, RestartCount: c.restarts, Started: ptr.To(c.proc != nil && c.term == nil)}
		switch {
		case c.term != nil:
			st.State.Terminated = c.term
		case c.proc != nil:
			st.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
			st.ContainerID = fmt.Sprintf("podhost://%d", c.proc.initPid)
		default:
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: c.waiting, Message: p.message}
		}
		if c.lastTerm != nil {
			st.LastTerminationState.Terminated = c.lastTerm
		}
		if !c.ready {
			allReady = false
		}
		statuses = append(statuses, st)
	}
	s := corev1.PodStatus{
		Phase:   p.phase,
		Message: p.message,
		HostIP:  p.h.net.gateway.String(),
		HostIPs: []corev1.HostIP{{IP: p.h.net.gateway.String()}},
		Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, true, ""),
			cond(corev1.PodInitialized, p.initDone, "ContainersNotInitialized"),
			cond(corev1.ContainersReady, allReady, "ContainersNotReady"),
			cond(corev1.PodReady, allReady, "ContainersNotReady"),
		},
		ContainerStatuses:     statuses,
		InitContainerStatuses: p.initStatus,
		StartTime:             &metav1.Time{Time: p.started},
	}
	if p.ip.IsValid() {
		s.PodIP = p.ip.String()
		s.PodIPs = []corev1.PodIP{{IP: p.ip.String()}}
	}
	return s
}
