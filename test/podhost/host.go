package podhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Options configure a Host.
type Options struct {
	Clientset kubernetes.Interface
	// Nodes the host runs pods for; unscheduled pods are bound to them in
	// turn. They must be registered (test/cluster does).
	Nodes []string
	// Images maps an image name, as in a container's image field, to the
	// executable on this machine that is its entrypoint.
	Images map[string]string
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
}

// Step names a point in a pod's life in the timeline.
type Step string

// Steps recorded in the timeline.
const (
	StepBound            Step = "bound"
	StepSandbox          Step = "sandbox-ready"
	StepInitStarted      Step = "init-started"
	StepInitExited       Step = "init-exited"
	StepStarted          Step = "started"
	StepReady            Step = "ready"
	StepUnready          Step = "unready"
	StepExited           Step = "exited"
	StepRestarting       Step = "restarting"
	StepFailed           Step = "failed"
	StepDeletionSeen     Step = "deletion-seen"
	StepPreStopStarted   Step = "prestop-started"
	StepPreStopFinished  Step = "prestop-finished"
	StepPreStopTimedOut  Step = "prestop-timed-out"
	StepSIGTERM          Step = "sigterm"
	StepSIGKILL          Step = "sigkill"
	StepDeleted          Step = "deleted"
	StepAnnotationsWrote Step = "downward-api-updated"
)

// Event is one timeline entry.
type Event struct {
	Time      time.Time
	Namespace string
	Pod       string
	Container string
	Step      Step
	// ExitCode is the exit status of a container or a hook; -1 when not
	// applicable.
	ExitCode int
	Detail   string
}

func (e Event) String() string {
	s := fmt.Sprintf("%s %s/%s", e.Time.Format("15:04:05.000"), e.Namespace, e.Pod)
	if e.Container != "" {
		s += "[" + e.Container + "]"
	}
	s += " " + string(e.Step)
	if e.ExitCode >= 0 {
		s += " exit=" + strconv.Itoa(e.ExitCode)
	}
	if e.Detail != "" {
		s += " " + e.Detail
	}
	return s
}

// Host runs pods. Create it with Start.
type Host struct {
	opts   Options
	net    *network
	dir    string // run directory
	state  string // state directory the watchdog reads
	logf   func(string, ...any)
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	pods      map[types.UID]*pod
	events    []Event
	notify    chan struct{} // closed and replaced on each event
	nextNode  int
	nextNetns int
	mounts    *mountUser // this host's hold on the machine's mount points
	watchdog  *exec.Cmd
	stopOnce  sync.Once
	stopErr   error
}

// Start checks what the host needs, creates its bridge and starts running
// pods. Stop undoes everything.
func Start(ctx context.Context, opts Options) (*Host, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("podhost needs root for network namespaces and bind mounts; run the tests as root")
	}
	for _, c := range []string{"ip", "nsenter", "unshare", "mount"} {
		if _, err := exec.LookPath(c); err != nil {
			return nil, fmt.Errorf("podhost needs %s (iproute2, util-linux; test/deps.sh installs them): %w", c, err)
		}
	}
	if opts.Clientset == nil || len(opts.Nodes) == 0 {
		return nil, errors.New("podhost: Options.Clientset and Options.Nodes are required")
	}
	logf := opts.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	reapStale(logf)
	n, err := newNetwork()
	if err != nil {
		return nil, err
	}
	h := &Host{opts: opts, net: n, logf: logf, pods: map[types.UID]*pod{}, notify: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			_ = h.Stop()
		}
	}()
	if h.mounts, err = useMountPoints(); err != nil {
		return nil, err
	}
	if h.dir, err = os.MkdirTemp("", "stickydrain-podhost-"+n.id+"-"); err != nil {
		return nil, fmt.Errorf("creating run directory: %w", err)
	}
	h.state = filepath.Join(lockDir, "host-"+n.id)
	if err := os.MkdirAll(h.state, 0o755); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	for name, content := range map[string]string{"owner": strconv.Itoa(os.Getpid()), "bridge": n.bridge, "dir": h.dir} {
		if err := os.WriteFile(filepath.Join(h.state, name), []byte(content), 0o644); err != nil {
			return nil, fmt.Errorf("writing state: %w", err)
		}
	}
	if err := h.startWatchdog(); err != nil {
		return nil, err
	}
	logf("podhost: bridge %s, pods in %s, nodes %s", n.bridge, n.prefix, strings.Join(opts.Nodes, ","))

	ctx, h.cancel = context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(opts.Clientset, 0)
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { h.onPod(ctx, o) },
		UpdateFunc: func(_, o any) { h.onPod(ctx, o) },
		DeleteFunc: func(o any) { h.onDelete(o) },
	}); err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, errors.New("podhost: pod informer did not sync")
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		<-ctx.Done()
		factory.Shutdown()
	}()
	ok = true
	return h, nil
}

func (h *Host) ours(p *corev1.Pod) bool {
	if p.Spec.NodeName == "" {
		return p.Spec.SchedulerName == "" || p.Spec.SchedulerName == corev1.DefaultSchedulerName
	}
	return slices.Contains(h.opts.Nodes, p.Spec.NodeName)
}

func (h *Host) onPod(ctx context.Context, o any) {
	obj, ok := o.(*corev1.Pod)
	if !ok || !h.ours(obj) {
		return
	}
	h.mu.Lock()
	p := h.pods[obj.UID]
	if p == nil {
		if obj.Status.Phase == corev1.PodSucceeded || obj.Status.Phase == corev1.PodFailed || obj.DeletionTimestamp != nil && obj.Spec.NodeName == "" {
			h.mu.Unlock()
			return
		}
		p = newPod(h, obj)
		h.pods[obj.UID] = p
		h.wg.Add(1)
		h.mu.Unlock()
		go func() {
			defer h.wg.Done()
			p.run(ctx)
			h.mu.Lock()
			delete(h.pods, obj.UID)
			h.mu.Unlock()
		}()
		return
	}
	h.mu.Unlock()
	p.update(obj)
}

func (h *Host) onDelete(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	obj, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	h.mu.Lock()
	p := h.pods[obj.UID]
	h.mu.Unlock()
	if p != nil {
		p.markGone()
	}
}

func (h *Host) record(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	h.mu.Lock()
	h.events = append(h.events, e)
	close(h.notify)
	h.notify = make(chan struct{})
	h.mu.Unlock()
	h.logf("podhost: %s", e)
}

// Timeline returns the recorded events of one pod (all pods when name is
// empty), in order.
func (h *Host) Timeline(namespace, name string) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Event
	for _, e := range h.events {
		if e.Namespace == namespace && (name == "" || e.Pod == name) {
			out = append(out, e)
		}
	}
	return out
}

// WaitFor waits until the pod's timeline has an event of step (for
// container, when not empty) and returns it.
func (h *Host) WaitFor(ctx context.Context, namespace, name, container string, step Step) (Event, error) {
	for {
		h.mu.Lock()
		ch := h.notify
		for _, e := range h.events {
			if e.Namespace == namespace && e.Pod == name && e.Step == step && (container == "" || e.Container == container) {
				h.mu.Unlock()
				return e, nil
			}
		}
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Event{}, fmt.Errorf("waiting for %s/%s %s %s: %w", namespace, name, container, step, ctx.Err())
		}
	}
}

// Bridge is the name of the bridge this host made; its network namespaces
// are named sd<id>p<n> with the same <id> as the bridge's sdbr<id>.
func (h *Host) Bridge() string { return h.net.bridge }

// Logs returns what a container of a running or finished pod wrote to its
// stdout and stderr.
func (h *Host) Logs(namespace, name, container string) string {
	b, _ := os.ReadFile(filepath.Join(h.dir, "logs", namespace+"_"+name, container+".log"))
	return string(b)
}

func (h *Host) pickNode() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.opts.Nodes[h.nextNode%len(h.opts.Nodes)]
	h.nextNode++
	return n
}

func (h *Host) netnsName() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextNetns++
	name := fmt.Sprintf("sd%sp%d", h.net.id, h.nextNetns)
	f, err := os.OpenFile(filepath.Join(h.state, "netns"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintln(f, name)
		f.Close()
	}
	return name
}

// ensureMountPoint creates target on the host filesystem when missing (a
// bind mount needs one) and records what it made machine-wide, for the last
// host to stop to remove (mountpoints.go says why not at this host's Stop).
func (h *Host) ensureMountPoint(target string, dir bool) error {
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	top := target
	for {
		parent := filepath.Dir(top)
		if _, err := os.Lstat(parent); err == nil || parent == top {
			break
		}
		top = parent
	}
	if dir {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	}
	return h.mounts.record(top)
}

// Stop kills every pod's processes (without running hooks), removes their
// namespaces, the bridge and its directories, and — if it is the last pod
// host running on the machine — the mount points the hosts made.
func (h *Host) Stop() error {
	h.stopOnce.Do(func() {
		if h.cancel != nil {
			h.cancel()
		}
		h.mu.Lock()
		pods := make([]*pod, 0, len(h.pods))
		for _, p := range h.pods {
			pods = append(pods, p)
		}
		h.mu.Unlock()
		for _, p := range pods {
			p.markGone()
		}
		h.wg.Wait()
		var errs []error
		if _, err := h.mounts.release(); err != nil {
			errs = append(errs, err)
		}
		if err := h.net.close(); err != nil {
			errs = append(errs, fmt.Errorf("removing bridge: %w", err))
		}
		if h.dir != "" {
			if err := os.RemoveAll(h.dir); err != nil {
				errs = append(errs, err)
			}
		}
		if h.state != "" {
			_ = os.RemoveAll(h.state)
		}
		if h.watchdog != nil && h.watchdog.Process != nil {
			_ = h.watchdog.Process.Kill()
			_ = h.watchdog.Wait()
		}
		h.stopErr = errors.Join(errs...)
	})
	return h.stopErr
}

// cleanupScript undoes a host from its state directory, for the watchdog
// and for reaping a host whose process died.
const cleanupScript = `dir="$1"
[ -f "$dir/netns" ] && for ns in $(cat "$dir/netns"); do ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL; ip netns delete "$ns" 2>/dev/null; done
[ -f "$dir/bridge" ] && ip link delete "$(cat "$dir/bridge")" 2>/dev/null
` + cleanupMountsScript + `
[ -f "$dir/dir" ] && rm -rf "$(cat "$dir/dir")"
rm -rf "$dir"`

func (h *Host) startWatchdog() error {
	script := `owner="$1"; shift
while kill -0 "$owner" 2>/dev/null; do sleep 1; done
` + cleanupScript
	cmd := exec.Command("/bin/sh", "-c", script, "stickydrain-podhost-watchdog", strconv.Itoa(os.Getpid()), h.state)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting podhost watchdog: %w", err)
	}
	h.watchdog = cmd
	return nil
}

// reapStale cleans up after hosts whose process and watchdog both died.
func reapStale(logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(lockDir, "host-*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || syscall.Kill(pid, 0) == nil {
			continue
		}
		logf("podhost: cleaning up after dead host %s", d)
		_ = exec.Command("/bin/sh", "-c", cleanupScript, "reap", d).Run()
	}
}
