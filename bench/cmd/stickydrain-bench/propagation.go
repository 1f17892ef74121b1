package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/nginxplus"
)

const (
	propNS     = "prop"
	propPerSvc = 10
)

// size is how big a run is: the figures' (full) or a smoke run's, which
// only shows that every mode still works end to end.
type size struct {
	// PropServices is the propagation run's Services (× propPerSvc pods);
	// a tenth of them each take the burst and the trickle of deletions.
	PropServices int
	// ScaleServices are the scale run's steps, in Services of scalePerSvc
	// endpoints each; ScaleIdle how long each step idles (the controller
	// resyncs every 30 s).
	ScaleServices []int
	ScaleIdle     time.Duration
	// AdmissionRun is how long each fixed-rate admission run lasts, and
	// AdmissionCreates how many pods are created through the API server.
	AdmissionRun     time.Duration
	AdmissionCreates int
}

var (
	fullSize  = size{PropServices: 1000, ScaleServices: []int{100, 1000}, ScaleIdle: 60 * time.Second, AdmissionRun: 10 * time.Second, AdmissionCreates: 300}
	smokeSize = size{PropServices: 20, ScaleServices: []int{2, 5}, ScaleIdle: 2 * time.Second, AdmissionRun: 200 * time.Millisecond, AdmissionCreates: 10}
)

func svcName(i int) string { return fmt.Sprintf("svc-%d", i) }

func podIP(n int) string { return fmt.Sprintf("198.18.%d.%d", n/250, n%250+1) }

// fastClient is a clientset without client-side throttling, for setting
// up thousands of objects.
func fastClient(cfg *rest.Config) (*kubernetes.Clientset, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = 5000, 10000
	return kubernetes.NewForConfig(c)
}

// parallel runs f(0..n-1) on w workers and returns the first error.
func parallel(n, w int, f func(i int) error) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	next := make(chan int)
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

func propagation(ctx context.Context, dir string, logf func(string, ...any), ctlRun controllerRun, sz size, pprofAddr string) (string, error) {
	if pprofAddr != "" {
		ctlRun.Args = append(ctlRun.Args, "--pprof-bind-address", pprofAddr)
	}
	propServices := sz.PropServices
	c, err := cluster.Start(ctx, cluster.Options{Log: logf, OwnSignals: true,
		// The EndpointSlice controller unthrottled, as large clusters run it
		// (the default 20 requests/s would dominate a burst of 100).
		ControllerManagerArgs: []string{"--kube-api-qps=500", "--kube-api-burst=1000"}})
	if err != nil {
		return "", err
	}
	defer c.Stop()
	cs, err := fastClient(c.Config)
	if err != nil {
		return "", err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Two HAProxy and two NGINX Plus API emulators, each behind a recorder.
	j := newJournal()
	var backends []haproxytest.Backend
	var ups []nginxplus.Upstream
	for i := range propServices {
		backends = append(backends, haproxytest.Backend{Name: svcName(i), Slots: propPerSvc + 4})
		ups = append(ups, nginxplus.Upstream{Name: svcName(i), Zone: svcName(i)})
	}
	var haAddrs, plusAddrs, recorders []string
	for i := range 2 {
		d := filepath.Join(dir, fmt.Sprintf("haproxy-%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
		h, err := haproxytest.Run(d, 0, "bench-key", backends...)
		if err != nil {
			return "", err
		}
		defer h.Stop()
		sock := filepath.Join(dir, fmt.Sprintf("recorder-%d.sock", i))
		if err := runtimeProxy(runCtx, j, fmt.Sprintf("haproxy-%d", i), sock, h.Socket); err != nil {
			return "", err
		}
		haAddrs = append(haAddrs, fmt.Sprintf("%q", "unix://"+sock))
		recorders = append(recorders, sock)
		em := nginxplus.New(nginxplus.Options{Upstreams: ups})
		u, err := emulatorServer(runCtx, j, fmt.Sprintf("plus-%d", i), em)
		if err != nil {
			return "", err
		}
		plusAddrs = append(plusAddrs, fmt.Sprintf("%q", u))
	}

	// The controller binary, as its shipped ServiceAccount.
	ctl, err := startController(ctx, c, ctlRun, dir, fmt.Sprintf(`loadBalancers:
  - {name: edge, type: haproxy, instances: {static: [%s]}, allowedNamespaces: {all: true}, listedUpstreamsOnly: false}
  - {name: plus, type: nginx-plus, instances: {static: [%s]}, allowedNamespaces: {all: true}, listedUpstreamsOnly: false}
resync: 10m
`, strings.Join(haAddrs, ", "), strings.Join(plusAddrs, ", ")))
	if err != nil {
		return "", err
	}
	defer ctl.Stop()

	// 1,000 Services × 10 ready pods, published by the real EndpointSlice
	// controller.
	logf("propagation: creating %d Services and %d pods", propServices, propServices*propPerSvc)
	setupStart := time.Now()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: propNS}}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	if err := parallel(propServices, 16, func(i int) error {
		_, err := cs.CoreV1().Services(propNS).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svcName(i), Annotations: map[string]string{"stickydrain.io/upstreams": "edge/" + svcName(i) + ",plus/" + svcName(i)}},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": svcName(i)},
				Ports: []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromString("http")}}},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return "", err
	}
	if err := parallel(propServices*propPerSvc, 32, func(n int) error {
		p, err := cs.CoreV1().Pods(propNS).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", svcName(n/propPerSvc), n%propPerSvc), Labels: map[string]string{"app": svcName(n / propPerSvc)}},
			Spec: corev1.PodSpec{NodeName: c.Nodes[0], Containers: []corev1.Container{{Name: "app", Image: "app",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP(n), PodIPs: []corev1.PodIP{{IP: podIP(n)}}, StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}}
		_, err = cs.CoreV1().Pods(propNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return "", err
	}
	logf("propagation: objects created in %v; waiting for every server on every instance", time.Since(setupStart).Round(time.Second))
	haStates := func() (int, error) {
		total := 0
		for i := range 2 {
			n, err := activeHAProxyServers(filepath.Join(dir, fmt.Sprintf("haproxy-%d", i), "admin.sock"))
			if err != nil {
				return 0, err
			}
			total += n
		}
		return total, nil
	}
	want := 2 * propServices * propPerSvc
	for {
		n, err := haStates()
		if err != nil {
			return "", err
		}
		if n == want {
			break
		}
		if time.Since(setupStart) > 15*time.Minute {
			return "", fmt.Errorf("after 15 minutes %d of %d servers are on the HAProxy instances (controller log %s)", n, want, ctl.Log)
		}
		time.Sleep(2 * time.Second)
	}
	converged := time.Since(setupStart)
	logf("propagation: %d servers on each instance after %v", propServices*propPerSvc, converged.Round(time.Second))
	if pprofAddr != "" {
		// What the controller holds after its initial sync (go tool pprof
		// -sample_index=inuse_space FILE).
		heapProfile(pprofAddr, "bench/controller-heap-propagation.prof")
	}
	ctlAfterSync, err := procUsage(ctl.Pid())
	if err != nil {
		return "", err
	}

	// Watch the EndpointSlices as the controller does: when each endpoint
	// is first seen terminating.
	seen := map[string]time.Time{} // pod IP → terminating seen
	var seenMu sync.Mutex
	inf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(propNS))
	si := inf.Discovery().V1().EndpointSlices().Informer()
	note := func(o any) {
		s, ok := o.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		now := time.Now()
		seenMu.Lock()
		for _, e := range s.Endpoints {
			if ptr.Deref(e.Conditions.Terminating, false) && len(e.Addresses) > 0 {
				if _, ok := seen[e.Addresses[0]]; !ok {
					seen[e.Addresses[0]] = now
				}
			}
		}
		seenMu.Unlock()
	}
	_, _ = si.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, o any) { note(o) }})
	inf.Start(runCtx.Done())
	inf.WaitForCacheSync(runCtx.Done())

	type result struct {
		label                string
		fromTerm, fromDelete map[string][]time.Duration // lb → delays
		requests, commands   map[string]int
		changes              int
		steal                float64 // the machine's CPU stolen by the host during the run
	}
	// measure deletes one pod of each of svcs (at once, or one every gap)
	// and waits until each drain is confirmed on the perLB instances of
	// each of lbs, as drained by who.
	measure := func(label string, svcs []int, gap time.Duration, lbs []string, perLB int, who string) (result, error) {
		j.reset()
		s0, err := readCPUStat()
		if err != nil {
			return result{}, err
		}
		r := result{label: label, fromTerm: map[string][]time.Duration{}, fromDelete: map[string][]time.Duration{}, requests: map[string]int{}, commands: map[string]int{}, changes: len(svcs)}
		deleted := make([]time.Time, len(svcs))
		var wg sync.WaitGroup
		for k, i := range svcs {
			del := func() {
				defer wg.Done()
				if err := cs.CoreV1().Pods(propNS).Delete(ctx, svcName(i)+"-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](3600)}); err != nil {
					logf("deleting %s-0: %v", svcName(i), err)
				}
				deleted[k] = time.Now()
			}
			wg.Add(1)
			if gap == 0 {
				go del()
			} else {
				del()
				time.Sleep(gap)
			}
		}
		wg.Wait()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			done := 0
			for _, i := range svcs {
				if len(j.firstDrain(svcName(i))) == perLB*len(lbs) {
					done++
				}
			}
			if done == len(svcs) {
				break
			}
			if time.Now().After(deadline) {
				return r, fmt.Errorf("%s: %d of %d drains applied on all %d instances after 2 minutes (%s)", label, done, len(svcs), perLB*len(lbs), who)
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second) // anything that follows a drain is counted too
		for k, i := range svcs {
			fd := j.firstDrain(svcName(i))
			seenMu.Lock()
			term, ok := seen[podIP(i*propPerSvc)]
			seenMu.Unlock()
			if !ok {
				return r, fmt.Errorf("%s: the endpoint of %s-0 was never seen terminating", label, svcName(i))
			}
			for _, lb := range lbs {
				var last time.Time
				for inst, t := range fd {
					if strings.HasPrefix(inst, lb) && t.After(last) {
						last = t
					}
				}
				r.fromTerm[lb] = append(r.fromTerm[lb], last.Sub(term))
				r.fromDelete[lb] = append(r.fromDelete[lb], last.Sub(deleted[k]))
			}
		}
		for _, lb := range lbs {
			r.requests[lb], r.commands[lb] = j.counts(lb)
		}
		s1, err := readCPUStat()
		if err != nil {
			return r, err
		}
		r.steal = s1.stealSince(s0)
		return r, nil
	}
	// Four tenths of the Services, a tenth for each run: the burst and the
	// trickle drained by the controller, then by the floor.
	tenth := propServices / 10
	tenthOf := func(k int) []int {
		var out []int
		for i := range tenth {
			out = append(out, k*tenth+i)
		}
		return out
	}
	both := []string{"haproxy", "plus"}
	ctlWho := "controller log " + ctl.Log
	burstLabel, trickleLabel := fmt.Sprintf("burst: %d pods deleted at once", tenth), "trickle: one pod deleted every 100 ms"
	if pprofAddr != "" {
		// The burst (a few seconds) and the trickle (tenth × 100 ms), with
		// the waits between them.
		go profile(pprofAddr, 8*time.Second+time.Duration(tenth)*100*time.Millisecond, "bench/controller-cpu-propagation.prof")
	}
	logf("propagation: burst of %d deletions", tenth)
	burst, err := measure(burstLabel, tenthOf(0), 0, both, 2, ctlWho)
	if err != nil {
		return "", err
	}
	logf("propagation: trickle of %d deletions, one every 100 ms", tenth)
	trickle, err := measure(trickleLabel, tenthOf(1), 100*time.Millisecond, both, 2, ctlWho)
	if err != nil {
		return "", err
	}
	ctlEnd, err := procUsage(ctl.Pid())
	if err != nil {
		return "", err
	}

	// The floor: the controller stopped, the minimal drainer on the same
	// watch and the same HAProxy instances (through the same recorders).
	ctl.Stop()
	floor, err := startFloorDrainer(ctl.Kubeconfig, dir, recorders)
	if err != nil {
		return "", err
	}
	defer floor.Stop()
	floorWho := "floor-drainer log " + floor.Log
	logf("propagation: the floor drainer, burst of %d deletions", tenth)
	floorBurst, err := measure(burstLabel, tenthOf(2), 0, []string{"haproxy"}, 2, floorWho)
	if err != nil {
		return "", err
	}
	logf("propagation: the floor drainer, trickle of %d deletions", tenth)
	floorTrickle, err := measure(trickleLabel, tenthOf(3), 100*time.Millisecond, []string{"haproxy"}, 2, floorWho)
	if err != nil {
		return "", err
	}

	// The peer: the floor stopped, haproxy-ingress (one replica, its own
	// defaults) serving every Service through an Ingress, on two more
	// tenths; its drains seen by polling its HAProxy.
	floor.Stop()
	logf("propagation: starting the peer, %s, with an Ingress for each of the %d Services", peerName, propServices)
	peerStart := time.Now()
	peer, err := startIngressPeer(ctx, c, cs, dir, logf, propServices)
	if err != nil {
		return "", err
	}
	defer peer.stop()
	peerSynced := time.Since(peerStart)
	peerWho := peerName + " log " + peer.log
	peerRun := func(label string, k int, gap time.Duration) (result, error) {
		wctx, stop := context.WithCancel(runCtx)
		defer stop()
		go peer.watchDrains(wctx, j, tenthOf(k))
		return measure(label, tenthOf(k), gap, []string{"ingress"}, 1, peerWho)
	}
	logf("propagation: %s %s holds every Service's pods after %v; burst of %d deletions", peerName, peer.Version, peerSynced.Round(time.Second), tenth)
	peerBurst, err := peerRun(burstLabel, 4, 0)
	if err != nil {
		return "", err
	}
	logf("propagation: %s, trickle of %d deletions", peerName, tenth)
	peerTrickle, err := peerRun(trickleLabel, 5, 100*time.Millisecond)
	if err != nil {
		return "", err
	}
	ratios := table{head: []string{"figure (HAProxy 2.6, 2 instances)", "stickydrain", "floor: minimal drainer", "ratio", "goal"}}
	for _, rr := range []struct {
		name       string
		ours, base result
		goal       float64
	}{{"burst", burst, floorBurst, 1.5}, {"trickle", trickle, floorTrickle, 1.2}} {
		o, b := summarise(rr.ours.fromTerm["haproxy"]), summarise(rr.base.fromTerm["haproxy"])
		ratios.add(rr.name+", endpoint terminating → drained on every instance, p50", ms(o.P50), ms(b.P50), ratio(o.P50, b.P50), fmt.Sprintf("≤ %.1f×", rr.goal))
		ratios.add(rr.name+", p99", ms(o.P99), ms(b.P99), ratio(o.P99, b.P99), fmt.Sprintf("≤ %.1f×", rr.goal))
	}
	peerRatios := table{head: []string{"figure", "stickydrain (HAProxy 2.6, 2 instances)", fmt.Sprintf("peer: %s %s (1 replica)", peerName, peer.Version), "ratio", "goal"}}
	for _, rr := range []struct {
		name       string
		ours, base result
	}{{"burst", burst, peerBurst}, {"trickle", trickle, peerTrickle}} {
		o, b := summarise(rr.ours.fromTerm["haproxy"]), summarise(rr.base.fromTerm["ingress"])
		peerRatios.add(rr.name+", endpoint terminating → drained on every instance, p50", ms(o.P50), ms(b.P50), ratio(o.P50, b.P50), "")
		peerRatios.add(rr.name+", p99", ms(o.P99), ms(b.P99), ratio(o.P99, b.P99), "≤ 0.5×")
	}

	t := table{head: []string{"run", "drained by", "load balancer", "endpoint terminating → drained on every instance: p50", "p99", "max", "pod deletion → drained: p50", "p99", "API requests per drain per instance", "CPU stolen by the host"}}
	for _, rr := range []struct {
		r      result
		by     string
		lbs    []string
		perLB  int
		polled bool
	}{
		{burst, "stickydrain", both, 2, false}, {trickle, "stickydrain", both, 2, false},
		{floorBurst, "floor", []string{"haproxy"}, 2, false}, {floorTrickle, "floor", []string{"haproxy"}, 2, false},
		{peerBurst, peerName + " " + peer.Version, []string{"ingress"}, 1, true}, {peerTrickle, peerName + " " + peer.Version, []string{"ingress"}, 1, true},
	} {
		r := rr.r
		for _, lb := range rr.lbs {
			a, b := summarise(r.fromTerm[lb]), summarise(r.fromDelete[lb])
			name := map[string]string{"haproxy": "HAProxy 2.6 (2 instances)", "plus": "NGINX Plus API **emulator** (2 instances)", "ingress": "its HAProxy 2.6 (1 replica)"}[lb]
			per := "n/a (polled)"
			if !rr.polled {
				per = fmt.Sprintf("%.2f", float64(r.requests[lb])/float64(rr.perLB*r.changes))
				if lb == "haproxy" {
					per += fmt.Sprintf(" connections (%.2f commands)", float64(r.commands[lb])/float64(rr.perLB*r.changes))
				}
			}
			t.add(r.label, rr.by, name, ms(a.P50), ms(a.P99), ms(a.Max), ms(b.P50), ms(b.P99), per, fmt.Sprintf("%.1f %%", 100*r.steal))
		}
	}
	var all []time.Duration
	for _, r := range []result{burst, trickle} {
		for _, lb := range both {
			all = append(all, r.fromTerm[lb]...)
		}
	}
	slices.Sort(all)
	return fmt.Sprintf(`## Drain propagation

Ratios to the floor, measured in this run: a minimal drainer (bench/cmd/floor-drainer) that
watches the same EndpointSlices through a client-go informer and sends one `+"`set server … state drain`"+`
per terminating endpoint to each HAProxy instance at once, on a connection of its own, with no
reconcile logic; after the controller's runs, the controller stopped, on other Services of the
same run and the same two HAProxy instances through the same recorders. The controller drains
the two NGINX Plus API emulators in the same passes; the floor does not.

%s
Ratios to the peer, measured in this run: %s %s (built from source, test/peers), the ingress
controller a user would pick instead to drain behind HAProxy, one replica with its drain support on
and its own defaults (it updates HAProxy at most every 2 s, --rate-limit-update=0.5, after
--wait-before-update=200ms), serving each of the %d Services through an Ingress of its own with
cookie affinity; after the floor, the floor stopped, on two more tenths of the Services. Its drain
(the pod's server at weight 0 or in drain) is seen by polling its HAProxy's Runtime API every
5 ms, so each of its figures is late by up to one poll (a few ms); it synced every Service's pods
%v after it started. The goal: ours at most half of its p99.

%s
%d Services × %d endpoints (%d pods made Running and Ready through the API; the real
EndpointSlice controller publishes them, run with --kube-api-qps=500), each Service mapped onto an
HAProxy backend and an NGINX Plus upstream; two HAProxy 2.6 instances and two NGINX Plus API
**emulators** (not NGINX Plus), each behind a recorder that timestamps each answer as it leaves
the instance and counts requests. The controller binary runs as its shipped ServiceAccount
(resync 10m, so none falls in the windows). Pods are deleted gracefully (grace period 1h), one
pod per Service; "terminating" is when a watch on the EndpointSlices first shows the endpoint
terminating.

Initial sync: every server on every instance %v after the objects were first created (objects
and EndpointSlice controller included); controller CPU %v, RSS %s (peak %s) after it.

%s
Goal: drain applied on every instance within 100 ms (p99) of the endpoint turning terminating,
at 10k endpoints. Over all four rows, p99 %s.

Controller at the end: CPU %v in total, RSS %s (peak %s).
`, ratios.String(), peerName, peer.Version, propServices, peerSynced.Round(time.Second), peerRatios.String(), propServices, propPerSvc, propServices*propPerSvc, converged.Round(time.Second), ctlAfterSync.CPU.Round(time.Millisecond), mib(ctlAfterSync.RSS), mib(ctlAfterSync.HWM),
		t.String(), ms(summarise(all).P99), ctlEnd.CPU.Round(time.Millisecond), mib(ctlEnd.RSS), mib(ctlEnd.HWM)), nil
}
