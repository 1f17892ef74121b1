package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptrace"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/nginxplus"
	"github.com/stickydrain/stickydrain/test/sessionapp"
	"github.com/stickydrain/stickydrain/test/tcpfront"
)

// Namespace is where the scenario's application runs, opted in.
const Namespace = "shop"

// Deploy creates the opted-in Namespace (drain parameters on it), the
// Service mapped onto the HAProxy backend, and a Deployment of the
// session app at version v1.
// The drain parameters the scenario's Namespace carries.
const (
	PollInterval = 500 * time.Millisecond
	MinWait      = 3 * time.Second
)

// minWait is the scenario Namespace's min-wait: MinWait, or behind an
// ingress the webhook's default, which a webhook-only install relies on
// to outlast the proxy's own reaction (and its short partitions from the
// API server).
func (e *Env) minWait() time.Duration {
	if e.ingressKind != "" {
		return api.DefaultMinWait
	}
	return MinWait
}

func (e *Env) Deploy(ctx context.Context, replicas int32, idle time.Duration) error {
	k := e.Cluster.Client
	nsAnnotations := map[string]string{
		"stickydrain.io/url": "http://localhost:8080/sessions", "stickydrain.io/format": "number",
		"stickydrain.io/interval": PollInterval.String(), "stickydrain.io/min-wait": e.minWait().String(), "stickydrain.io/max-wait": "5m",
	}
	if e.drainctlDelivery != "" {
		nsAnnotations["stickydrain.io/drainctl"] = e.drainctlDelivery
	}
	if e.tomcat {
		// The manager's session list of the ROOT application, as
		// manifests/samples/tomcat reads its /shop.
		nsAnnotations["stickydrain.io/url"] = "http://localhost:8080/manager/text/list"
		nsAnnotations["stickydrain.io/format"] = "tomcat-list"
		nsAnnotations["stickydrain.io/context"] = "/"
		nsAnnotations["stickydrain.io/basic-auth-env"] = "TOMCAT_MANAGER_CREDENTIALS"
	}
	if err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:        Namespace,
		Labels:      map[string]string{"stickydrain.io/drain": "enabled"},
		Annotations: nsAnnotations,
	}}); err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: Namespace, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	if e.ingressKind != "" {
		// No stickydrain controller: the ingress routes by itself.
		if err := k.Create(ctx, e.ingressObjects(svc)); err != nil {
			return err
		}
	} else {
		upstreams := "edge/shop"
		if len(e.NGINXPlus) > 0 {
			upstreams += ",plus/shop"
		}
		svc.Annotations["stickydrain.io/upstreams"] = upstreams
	}
	if err := k.Create(ctx, svc); err != nil {
		return err
	}
	container := corev1.Container{
		Name: "app", Image: e.appImage,
		Args:  []string{"--listen=:8080", "--pod=$(POD_NAME)", "--version=v1", "--idle-timeout=" + idle.String()},
		Env:   []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		// A readiness blip takes a pod out of rotation (not ready, not
		// terminating: not routed), which ends its sticky sessions; give
		// the probe the slack a busy node needs.
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 5, ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
	}
	var volumes []corev1.Volume
	if e.tomcat {
		var err error
		if volumes, err = e.tomcatManager(ctx, &container, idle); err != nil {
			return err
		}
	}
	return k.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{container}, Volumes: volumes},
			},
		},
	})
}

// Rollout changes the Deployment's version, which rolls every pod.
func (e *Env) Rollout(ctx context.Context, version string) error {
	return e.updateDeployment(ctx, func(d *appsv1.Deployment) {
		c := &d.Spec.Template.Spec.Containers[0]
		for i, a := range c.Args {
			if strings.HasPrefix(a, "--version=") {
				c.Args[i] = "--version=" + version
			}
		}
		for i := range c.Env {
			if c.Env[i].Name == "VERSION" {
				c.Env[i].Value = version
			}
		}
	})
}

// tomcatManager makes container Tomcat's (the tomcat image's: the session
// app's paths as a JSP, version and idle timeout from its environment) and
// gives it the manager's user as manifests/samples/tomcat does: a Secret
// holding tomcat-users.xml (mounted where the image's server.xml reads it)
// and the same user:password for drainctl, in TOMCAT_MANAGER_CREDENTIALS.
// It returns the pod's volumes.
func (e *Env) tomcatManager(ctx context.Context, container *corev1.Container, idle time.Duration) ([]corev1.Volume, error) {
	const user, password = "drain", "e2e-only-manager-password"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tomcat-manager", Namespace: Namespace}, StringData: map[string]string{
		"credentials": user + ":" + password,
		"tomcat-users.xml": `<?xml version="1.0" encoding="UTF-8"?>
<tomcat-users xmlns="http://tomcat.apache.org/xml" version="1.0">
  <role rolename="manager-script"/>
  <user username="` + user + `" password="` + password + `" roles="manager-script"/>
</tomcat-users>
`}}
	if err := e.Cluster.Client.Create(ctx, secret); err != nil {
		return nil, err
	}
	container.Args = nil
	container.Env = append(container.Env,
		corev1.EnvVar{Name: "VERSION", Value: "v1"},
		corev1.EnvVar{Name: "IDLE_SECONDS", Value: strconv.Itoa(int(idle.Seconds()))},
		corev1.EnvVar{Name: "TOMCAT_MANAGER_CREDENTIALS", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret.Name}, Key: "credentials"}}})
	container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: "tomcat-users", MountPath: "/tomcat/users", ReadOnly: true})
	return []corev1.Volume{{Name: "tomcat-users", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: secret.Name, Items: []corev1.KeyToPath{{Key: "tomcat-users.xml", Path: "tomcat-users.xml"}}}}}}, nil
}

// ScaleTo sets the Deployment's replicas.
func (e *Env) ScaleTo(ctx context.Context, replicas int32) error {
	return e.updateDeployment(ctx, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(replicas) })
}

// updateDeployment applies change to the Deployment, read again and
// retried when another writer (a scale, a rollout) got there first.
func (e *Env) updateDeployment(ctx context.Context, change func(*appsv1.Deployment)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var d appsv1.Deployment
		if err := e.Cluster.Client.Get(ctx, types.NamespacedName{Namespace: Namespace, Name: "web"}, &d); err != nil {
			return err
		}
		change(&d)
		return e.Cluster.Client.Update(ctx, &d)
	})
}

// PodView is one pod as the demo shows it.
type PodView struct {
	Name, Version, IP  string
	Ready, Terminating bool
	Sessions           int // -1 when it cannot be read
	LB                 []string
}

// Pods reads every pod of the Deployment, its sessions and its server's
// state on each HAProxy.
func (e *Env) Pods(ctx context.Context) []PodView {
	var pods corev1.PodList
	if err := e.Cluster.Client.List(ctx, &pods, client.InNamespace(Namespace), client.MatchingLabels{"app": "web"}); err != nil {
		return nil
	}
	states := e.views(ctx, false)
	var out []PodView
	for _, p := range pods.Items {
		v := PodView{Name: p.Name, IP: p.Status.PodIP, Terminating: p.DeletionTimestamp != nil, Sessions: -1}
		for _, a := range p.Spec.Containers[0].Args {
			if s, ok := strings.CutPrefix(a, "--version="); ok {
				v.Version = s
			}
		}
		for _, ev := range p.Spec.Containers[0].Env {
			if ev.Name == "VERSION" {
				v.Version = ev.Value // Tomcat's
			}
		}
		v.Ready = podReady(&p)
		if v.IP != "" {
			c := http.Client{Timeout: 300 * time.Millisecond}
			if resp, err := c.Get("http://" + v.IP + ":8080/sessions"); err == nil {
				_, _ = fmt.Fscan(resp.Body, &v.Sessions)
				resp.Body.Close()
			}
			for _, s := range states {
				st := "-"
				if ap, err := netip.ParseAddrPort(v.IP + ":8080"); err == nil {
					if x, ok := s.states[ap]; ok {
						st = x.String()
					}
				}
				v.LB = append(v.LB, st)
			}
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// describePod is one pod's state as the API server and every HAProxy
// instance (by front address, with the front's view of its readiness)
// have it now: what a misroute is set beside.
func (e *Env) describePod(ctx context.Context, name string) string {
	for _, v := range e.Pods(ctx) {
		if v.Name != name {
			continue
		}
		var lbs []string
		for i, st := range v.LB {
			if i < len(e.haproxies()) {
				lbs = append(lbs, fmt.Sprintf("%s=%s (in rotation %v)", frontAddr(e.haproxies()[i].Port), st, e.InstanceReady(i)))
			}
		}
		return fmt.Sprintf("%s (%s) now: ready %v, terminating %v, sessions %d, servers %s", name, v.IP, v.Ready, v.Terminating, v.Sessions, strings.Join(lbs, ", "))
	}
	return name + " now: gone from the API server"
}

// Stats are what the clients saw.
type Stats struct {
	Requests, Errors, Misrouted int
	// MisroutedAfterLoss counts, of Misrouted, the requests of a session
	// already lost: once a request was sent elsewhere the proxy's answer
	// re-points the cookie, so every later one follows. A session is lost
	// at its first misroute, which alone is timed (MisrouteTimes).
	MisroutedAfterLoss     int
	Sessions, SessionsKept int // sessions ended, and those ended with every request on their pod
	StartedAfterRollout    int
	OnNewVersion           int // of those, sessions on the new version
	// NewOnDraining counts sessions that started on a pod already draining
	// on the instance (or ingress replica) that served the login, or on
	// every one when the front cannot say which served it: there must be
	// none.
	NewOnDraining int
	// NewOnTerminating counts sessions that started on a pod already
	// deleted but not drained yet: what the load balancer's reaction time
	// lets through. Measured, not a failure (the pod's preStop still waits
	// for them).
	NewOnTerminating int
	// Relogins counts logouts on a draining pod followed by a login; each
	// must land on another pod (ReloginsOnDraining counts those that did not).
	Relogins, ReloginsOnDraining int
	// InFlightAtKill counts requests that failed while a process in their
	// path was killed (SIGKILL) during them: counted apart from Errors, and
	// their session is not counted lost for it.
	InFlightAtKill int
	// LostToUnheardPod counts, behind an ingress proxy (the webhook-only
	// install), the sessions lost because the replica that answered had
	// not heard of their pod: a pod Ready and not terminating, yet no
	// server on that replica when read right after the misroute (a replica
	// restarted, or its watch behind the API server's). That is the
	// proxy's own routing of new pods, which no drain changes
	// (docs/ingress.md); MisroutedToUnheardPod counts those sessions'
	// misrouted requests. Counted in Misrouted and lost sessions too.
	LostToUnheardPod, MisroutedToUnheardPod int
}

// Clients are simulated users: each logs in through the front (the
// health-checking balancer before the HAProxy instances), each request on
// a new connection so that it may reach any ready instance (the dynamic
// cookie is the same on every one), then logs out or lets the session idle
// out, and starts again.
type Clients struct {
	env      *Env
	mu       sync.Mutex
	stats    Stats
	rollout  time.Time
	obs      *Observer
	stopNew  chan struct{}
	wg       sync.WaitGroup
	idle     time.Duration
	problems []string
	probAt   []time.Time          // when each problem (misroute, error) was seen
	misAt    []time.Time          // when each session was lost to a misroute (but to a pod unheard of)
	unheard  []string             // the sessions lost to a pod the replica had not heard of
	lastEnd  map[string]time.Time // pod → when its latest session ended
}

// StartClients runs n users until StopNewSessions and their last session
// ends.
func (e *Env) StartClients(ctx context.Context, n int, idle time.Duration, obs *Observer) *Clients {
	c := &Clients{env: e, stopNew: make(chan struct{}), idle: idle, obs: obs, lastEnd: map[string]time.Time{}}
	for i := 0; i < n; i++ {
		c.wg.Add(1)
		go c.user(ctx, i)
	}
	return c
}

// RolloutStarted marks the moment after which new sessions must land on
// the new version.
func (c *Clients) RolloutStarted() {
	c.mu.Lock()
	c.rollout = time.Now()
	c.mu.Unlock()
}

// StopNewSessions lets every user finish its session and stop; it waits.
func (c *Clients) StopNewSessions() {
	close(c.stopNew)
	c.wg.Wait()
}

// Stats returns the counters so far.
func (c *Clients) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// LastSessionEnd is when the last session the clients held on pod ended:
// its logout's reply, or its last request's reply plus the idle timeout
// (the app expires a session idle timeout after the request it last saw,
// so the true end is no later).
func (c *Clients) LastSessionEnd(pod string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastEnd[pod]
}

func (c *Clients) ended(pod string, at time.Time) {
	c.mu.Lock()
	if at.After(c.lastEnd[pod]) {
		c.lastEnd[pod] = at
	}
	c.mu.Unlock()
}

// Problems lists the misroutes and errors seen, for the verdict.
func (c *Clients) Problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.problems...)
}

func (c *Clients) note(f func(*Stats)) {
	c.mu.Lock()
	f(&c.stats)
	c.mu.Unlock()
}

// MisrouteTimes are when each session was lost to a misrouted request (its
// first; MisroutedAfterLoss counts the rest), but those lost to a pod the
// answering ingress replica had not heard of (Stats.LostToUnheardPod).
func (c *Clients) MisrouteTimes() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.misAt...)
}

// session is one user's session as the clients track it.
type session struct {
	owner   string
	kept    bool // every request so far answered by owner
	unheard bool // lost on an ingress replica that had not heard of owner
}

// lost counts a misrouted request of a session; the first of the session
// (still kept) is the moment it was lost, timed and reported with where
// the owner stood. Behind an ingress, the replica that answered (via) is
// read first: one that lists no server for a Ready owner had not heard of
// it.
func (c *Clients) lost(ctx context.Context, s *session, via, format string, args ...any) {
	first := s.kept
	s.kept = false
	if first && c.env.ingressKind != "" {
		s.unheard = c.env.unheardOf(ctx, via, s.owner)
	}
	c.note(func(st *Stats) {
		st.Misrouted++
		if !first {
			st.MisroutedAfterLoss++
		}
		if s.unheard {
			st.MisroutedToUnheardPod++
		}
	})
	if !first {
		return
	}
	where := fmt.Sprintf(" via %s; %s", via, c.env.describePod(ctx, s.owner))
	if s.unheard {
		where += "; that replica had not heard of it"
	}
	if s.unheard {
		c.mu.Lock()
		c.unheard = append(c.unheard, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format+"%s", append(args, where)...))
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	c.misAt = append(c.misAt, time.Now())
	c.mu.Unlock()
	c.problem(format+"%s", append(args, where)...)
}

// Unheard lists the sessions lost on a pod the answering ingress replica
// had not heard of (Stats.LostToUnheardPod), as Problems lists the rest.
func (c *Clients) Unheard() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.unheard...)
}

// unheardOf reports whether the ingress replica at front address via lists
// no server for pod, a pod Ready and not terminating: a new pod the
// replica has not heard of yet. The replica is read first, right after the
// misroute; one that has heard of the pod by then makes the loss count as
// any other (the stricter side). The pod is read from the API server,
// which a fault may have down for some seconds.
func (e *Env) unheardOf(ctx context.Context, via, pod string) bool {
	var listed map[netip.AddrPort]plan.State
	for _, ip := range e.ingressReplicas() {
		if ip.frontAddr() == via {
			v, err := ip.view(ctx)
			if err != nil {
				return false
			}
			listed = v
		}
	}
	if listed == nil {
		return false
	}
	var p corev1.Pod
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := e.Cluster.Client.Get(ctx, types.NamespacedName{Namespace: Namespace, Name: pod}, &p)
		if err == nil {
			break
		}
		if apierrors.IsNotFound(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	ap, err := netip.ParseAddrPort(p.Status.PodIP + ":8080")
	if err != nil || p.DeletionTimestamp != nil || !podReady(&p) {
		return false
	}
	_, ok := listed[ap]
	return !ok
}

// ProblemTimes are when each misroute or error was seen.
func (c *Clients) ProblemTimes() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.probAt...)
}

func (c *Clients) problem(format string, args ...any) {
	c.mu.Lock()
	c.probAt = append(c.probAt, time.Now())
	if len(c.problems) < 50 {
		c.problems = append(c.problems, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
	}
	c.mu.Unlock()
}

func (c *Clients) user(ctx context.Context, id int) {
	defer c.wg.Done()
	rng := rand.New(rand.NewPCG(uint64(id), 7))
	base := c.env.Front.URL()
	lastLogoutDraining := false
	for n := 0; ; n++ {
		select {
		case <-c.stopNew:
			return
		case <-ctx.Done():
			return
		default:
		}
		jar, _ := cookiejar.New(nil)
		hc := &http.Client{Jar: jar, Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		started := time.Now()
		code, r, via, err := call(hc, "POST", base+fmt.Sprintf("/login?user=u%d-%d", id, n))
		if err != nil && c.env.killedDuring(started, time.Now()) {
			c.note(func(s *Stats) { s.Requests++; s.InFlightAtKill++ })
			continue
		}
		if err != nil || code != 200 {
			c.note(func(s *Stats) { s.Requests++; s.Errors++ })
			c.problem("user %d: login via %s: %v status %d", id, base, err, code)
			time.Sleep(500 * time.Millisecond)
			continue
		}
		owner, version := r.Pod, r.Version
		onDraining := c.obs.DrainedBefore(owner, started, c.env.served(via))
		c.mu.Lock()
		c.stats.Requests++
		if !c.rollout.IsZero() && started.After(c.rollout) {
			c.stats.StartedAfterRollout++
			if version != "v1" {
				c.stats.OnNewVersion++
			}
		}
		if !onDraining && c.obs.TerminatingBefore(owner, started) {
			c.stats.NewOnTerminating++
		}
		if onDraining {
			c.stats.NewOnDraining++
			c.problems = append(c.problems, fmt.Sprintf("user %d: a new session landed on %s, already draining", id, owner))
		}
		if lastLogoutDraining {
			c.stats.Relogins++
			if onDraining {
				c.stats.ReloginsOnDraining++
			}
		}
		c.mu.Unlock()
		sess := &session{owner: owner, kept: true}
		lastReply := time.Now()
		length := time.Duration(4+rng.IntN(8)) * time.Second
		for time.Since(started) < length {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(200+rng.IntN(300)) * time.Millisecond):
			}
			sent := time.Now()
			code, r, via, err := call(hc, "GET", base+"/app/cart")
			if err == nil && code == 200 && r.Pod == owner {
				lastReply = time.Now()
			}
			c.note(func(s *Stats) { s.Requests++ })
			switch {
			case err != nil && c.env.killedDuring(sent, time.Now()):
				c.note(func(s *Stats) { s.InFlightAtKill++ })
			case err != nil || (code != 200 && code != 401):
				sess.kept = false
				c.note(func(s *Stats) { s.Errors++ })
				c.problem("user %d: request via %s: %v status %d", id, base, err, code)
			case code == 401 || r.Pod != owner:
				// The first misroute of a session says where it went and
				// what the owner looked like everywhere at that moment.
				c.lost(ctx, sess, c.env.served(via), "user %d: session of %s answered by %s (status %d)", id, owner, r.Pod, code)
			}
		}
		// Two in three log out; the others walk away and let it idle out.
		lastLogoutDraining = false
		if rng.IntN(3) > 0 {
			loggedOut := time.Now()
			code, r, via, err := call(hc, "POST", base+"/logout")
			c.note(func(s *Stats) { s.Requests++ })
			inFlight := err != nil && c.env.killedDuring(loggedOut, time.Now())
			switch {
			case inFlight:
				// The logout never reached the pod: the session idles out.
				c.note(func(s *Stats) { s.InFlightAtKill++ })
			case err != nil || code != 200 || r.Pod != owner:
				c.lost(ctx, sess, c.env.served(via), "user %d: logout of %s answered by %s (status %d, %v)", id, owner, r.Pod, code, err)
			}
			lastLogoutDraining = !inFlight && c.obs.DrainedBefore(owner, loggedOut, c.env.served(via))
			if err == nil && code == 200 && r.Pod == owner {
				c.ended(owner, time.Now())
			} else {
				c.ended(owner, lastReply.Add(c.idle))
			}
		} else {
			c.ended(owner, lastReply.Add(c.idle))
		}
		c.note(func(s *Stats) {
			s.Sessions++
			switch {
			case sess.kept:
				s.SessionsKept++
			case sess.unheard:
				s.LostToUnheardPod++
			}
		})
	}
}

// call sends one request and returns the answer and the client's side of
// the connection that carried it (for Env.served).
func call(hc *http.Client, method, url string) (int, sessionapp.Reply, string, error) {
	var local string
	req, _ := http.NewRequest(method, url, nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(ci httptrace.GotConnInfo) { local = ci.Conn.LocalAddr().String() },
	}))
	resp, err := hc.Do(req)
	if err != nil {
		return 0, sessionapp.Reply{}, local, err
	}
	defer resp.Body.Close()
	var r sessionapp.Reply
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r, local, nil
}

// served is the instance or ingress replica (its front address) that the
// front sent the connection from local to; "" when it cannot say.
func (e *Env) served(local string) string {
	if local == "" {
		return ""
	}
	via, _ := e.Front.TargetOf(local)
	return via
}

// DrainRecord is one old pod's drain, as observed.
type DrainRecord struct {
	Pod string
	// Deleted is the delete request's time as the API server records it
	// (deletionTimestamp less the grace period: whole seconds); Seen is
	// when this observer, sampling every interval, first saw the pod
	// terminating; Drained, when it first saw it draining on every
	// HAProxy instance (behind an ingress: on every replica that lists
	// it); DrainedOn, when on each instance or replica, by its front
	// address.
	Deleted, Seen, Drained time.Time
	DrainedOn              map[string]time.Time
	Gone, RemovedFromLB    time.Time
	ServerDroppedEarly     bool // its server left an instance while the pod still existed
	Undrained              bool // its server was active again on an instance after it drained everywhere
	// ServedTerminating: the pod was seen Ready while terminating, so its
	// endpoint was serving and its server must drain. A pod deleted before
	// it was ever ready (a rollout overtaking the last one) is terminating
	// and not serving: the controller takes its server down, and no user
	// has a session there.
	ServedTerminating bool
	// With NGINX Plus emulators: when it was first seen with drain: true on
	// every emulator, whether its server left one while the pod existed,
	// and when it was gone from all.
	PlusDrained      time.Time
	PlusDroppedEarly bool
	PlusRemoved      time.Time
}

// Observer samples pods and HAProxy every interval and records each
// terminating pod's drain.
type Observer struct {
	mu      sync.Mutex
	records map[string]*DrainRecord
	ips     map[string]string
}

// Observe samples until ctx ends.
func (e *Env) Observe(ctx context.Context, every time.Duration) *Observer {
	o := &Observer{records: map[string]*DrainRecord{}, ips: map[string]string{}}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			o.sample(ctx, e)
		}
	}()
	return o
}

func (o *Observer) sample(ctx context.Context, e *Env) {
	// The load balancers first, the pods second: a pod still listed after
	// the read was there during it (pods do not come back), so a server
	// missing from that read while its pod is listed was dropped early — not
	// a pod deleted, and its server removed, between the two reads.
	//
	// Only instances that take traffic count: one that is restarting, or
	// not filled yet, answers its readiness check 503 and gets no user (a
	// sample during which an instance was killed is left out).
	began := time.Now()
	states := e.views(ctx, true)
	if states == nil {
		return
	}
	if len(states) == 0 {
		return
	}
	plus := make([][]nginxplus.Server, len(e.NGINXPlus))
	for i, em := range e.NGINXPlus {
		plus[i] = em.Servers(false, "shop")
	}
	var pods corev1.PodList
	if err := e.Cluster.Client.List(ctx, &pods, client.InNamespace(Namespace), client.MatchingLabels{"app": "web"}); err != nil {
		return
	}
	now := time.Now()
	if e.killedDuring(began, now) {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	present := map[string]bool{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			// Its containers have all exited: the EndpointSlice controller
			// has dropped (or is dropping) its endpoint, as with a kubelet,
			// before the Pod object goes. Gone, for the load balancers.
			continue
		}
		present[p.Name] = true
		if p.Status.PodIP != "" {
			o.ips[p.Name] = p.Status.PodIP
		}
		if p.DeletionTimestamp == nil {
			continue
		}
		r := o.records[p.Name]
		if r == nil {
			// deletionTimestamp is when the grace period ends; the delete
			// request came a grace period before.
			grace := time.Duration(ptr.Deref(p.DeletionGracePeriodSeconds, 0)) * time.Second
			r = &DrainRecord{Pod: p.Name, Deleted: p.DeletionTimestamp.Add(-grace), Seen: now, DrainedOn: map[string]time.Time{}}
			o.records[p.Name] = r
		}
		if podReady(&p) {
			r.ServedTerminating = true
		}
		ap, err := netip.ParseAddrPort(o.ips[p.Name] + ":8080")
		if err != nil {
			continue
		}
		// Every HAProxy instance in rotation must list a terminating pod's
		// server until the pod is gone. An ingress replica started during
		// a drain may not list it (its users' requests say whether that
		// matters): each replica is judged on what it listed.
		perReplica := e.ingressKind != ""
		all, listed := true, 0
		for _, s := range states {
			st, ok := s.states[ap]
			if st == plan.Draining && r.DrainedOn[s.via].IsZero() {
				r.DrainedOn[s.via] = now
			}
			drained := !r.Drained.IsZero()
			if perReplica {
				drained = !r.DrainedOn[s.via].IsZero()
			}
			if !ok && drained {
				r.ServerDroppedEarly = true
			}
			if ok {
				listed++
			}
			if st != plan.Draining && (ok || !perReplica) {
				all = false
			}
			if ok && st == plan.Active && drained {
				r.Undrained = true
			}
		}
		if all && listed > 0 && r.Drained.IsZero() {
			r.Drained = now
		}
		if len(e.NGINXPlus) > 0 {
			allPlus := true
			for _, servers := range plus {
				srv, ok := findServer(servers, ap.String())
				if !ok && !r.PlusDrained.IsZero() {
					r.PlusDroppedEarly = true
				}
				if !ok || !srv.Drain {
					allPlus = false
				}
			}
			if allPlus && r.PlusDrained.IsZero() {
				r.PlusDrained = now
			}
		}
	}
	for name, r := range o.records {
		if present[name] {
			continue
		}
		if r.Gone.IsZero() {
			r.Gone = now
		}
		ap, err := netip.ParseAddrPort(o.ips[name] + ":8080")
		if err != nil {
			continue
		}
		if r.RemovedFromLB.IsZero() {
			in := false
			for _, s := range states {
				if _, ok := s.states[ap]; ok {
					in = true
				}
			}
			if !in {
				r.RemovedFromLB = now
			}
		}
		if len(e.NGINXPlus) > 0 && r.PlusRemoved.IsZero() {
			inPlus := false
			for _, servers := range plus {
				if _, ok := findServer(servers, ap.String()); ok {
					inPlus = true
				}
			}
			if !inPlus {
				r.PlusRemoved = now
			}
		}
	}
}

// podReady reports whether p's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ready reports whether an instance's readiness check passes.
func ready(url string) bool { return tcpfront.Ready(context.Background(), url) }

func plusServer(em *nginxplus.Emulator, addr string) (nginxplus.Server, bool) {
	return findServer(em.Servers(false, "shop"), addr)
}

func findServer(servers []nginxplus.Server, addr string) (nginxplus.Server, bool) {
	for _, s := range servers {
		if s.Server == addr {
			return s, true
		}
	}
	return nginxplus.Server{}, false
}

// AwaitRemovals gives the observer up to 10 s to see the last old pod's server
// leave the load balancers (the controller removes it milliseconds after
// the pod goes, the observer samples every 100 ms); the assertions that
// follow decide. plus: wait for the NGINX Plus emulators too.
func AwaitRemovals(ctx context.Context, obs *Observer, plus bool) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		done := true
		for _, r := range obs.Records() {
			if r.Gone.IsZero() || r.RemovedFromLB.IsZero() || (plus && r.PlusRemoved.IsZero()) {
				done = false
			}
		}
		if done {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a last sample
}

// DrainedBefore reports whether pod was draining before t on the instance
// or ingress replica via (its front address), or on every one when via is
// "".
func (o *Observer) DrainedBefore(pod string, t time.Time, via string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.records[pod]
	if r == nil {
		return false
	}
	at := r.Drained
	if via != "" {
		at = r.DrainedOn[via]
	}
	return !at.IsZero() && at.Before(t)
}

// TerminatingBefore reports whether pod was seen terminating (deleted)
// before t, drained or not.
func (o *Observer) TerminatingBefore(pod string, t time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.records[pod]
	return r != nil && r.Seen.Before(t)
}

// AnyDraining reports whether a pod is draining now: drained and not
// gone yet.
func (o *Observer) AnyDraining() bool {
	for _, r := range o.Records() {
		if !r.Drained.IsZero() && r.Gone.IsZero() {
			return true
		}
	}
	return false
}

// Records returns the drains observed, by deletion time.
func (o *Observer) Records() []DrainRecord {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []DrainRecord
	for _, r := range o.records {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Deleted.Before(out[j].Deleted) })
	return out
}

// view is one load balancer's view of the app's servers: an HAProxy
// instance's or an ingress replica's, named by the address the front
// sends users to (via). states is nil when it cannot be read.
type view struct {
	via    string
	states map[netip.AddrPort]plan.State
}

// views are the load balancers' views of the app's servers, one per
// HAProxy instance or ingress replica (serving: only those that take
// traffic now, and nil if one of those cannot be read).
func (e *Env) views(ctx context.Context, serving bool) []view {
	if e.ingressKind != "" {
		var out []view
		for _, ip := range e.ingressReplicas() {
			v, err := ip.view(ctx)
			if err != nil && serving {
				return nil
			}
			out = append(out, view{via: ip.frontAddr(), states: v})
		}
		return out
	}
	var out []view
	for _, h := range e.haproxies() {
		// Only instances that take traffic count: one that is restarting,
		// or not filled yet, answers its readiness check 503 and gets no
		// user.
		if serving && !ready(h.ReadyURL()) {
			continue
		}
		inst, _ := haproxy.New(h.Address(), time.Second)
		st, err := backend.Read(ctx, inst, "shop")
		if err != nil && serving {
			return nil
		}
		out = append(out, view{via: frontAddr(h.Port), states: st})
	}
	return out
}

// frontAddr is the address the front sends users to for a proxy
// listening on port.
func frontAddr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// RolloutDone reports whether every pod runs version and is ready, and
// no old pod is left.
func (e *Env) RolloutDone(ctx context.Context, version string, replicas int) bool {
	pods := e.Pods(ctx)
	if len(pods) != replicas {
		return false
	}
	for _, p := range pods {
		if p.Version != version || !p.Ready || p.Terminating {
			return false
		}
	}
	return true
}

// Serving reports whether the rollout to version is done (RolloutDone),
// every pod is active on every HAProxy instance (or on the ingress), and
// every instance is in the front's rotation: what users need before their
// first request.
func (e *Env) Serving(ctx context.Context, version string, replicas int) bool {
	if !e.RolloutDone(ctx, version, replicas) {
		return false
	}
	n := len(e.ingressReplicas())
	if e.ingressKind == "" {
		n = len(e.haproxies())
		for i := range n {
			if !e.InstanceReady(i) {
				return false
			}
		}
	}
	for _, p := range e.Pods(ctx) {
		if len(p.LB) != n {
			return false
		}
		for _, st := range p.LB {
			if st != "active" {
				return false
			}
		}
	}
	return true
}
