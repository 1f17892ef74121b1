package main

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/haproxytest"
)

const (
	scaleNS     = "scale"
	scalePerSvc = 100 // one full EndpointSlice per Service
)

func scaleIP(n int) string {
	a := netip.MustParseAddr("198.18.0.1").As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
}

func scaleSlice(svc, k int, terminating int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svcName(svc) + "-synthetic", Namespace: scaleNS, Labels: map[string]string{
			discoveryv1.LabelServiceName: svcName(svc), discoveryv1.LabelManagedBy: "bench.stickydrain.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
	}
	for e := range k {
		term := e < terminating
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{scaleIP(svc*scalePerSvc + e)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(!term), Serving: ptr.To(true), Terminating: ptr.To(term)},
		})
	}
	return s
}

func scale(ctx context.Context, dir string, logf func(string, ...any), ctlRun controllerRun, sz size) (string, error) {
	c, err := cluster.Start(ctx, cluster.Options{Log: logf, OwnSignals: true})
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

	maxSvcs := sz.ScaleServices[len(sz.ScaleServices)-1]
	var backends []haproxytest.Backend
	for i := range maxSvcs {
		backends = append(backends, haproxytest.Backend{Name: svcName(i), Slots: scalePerSvc + 4})
	}
	h, err := haproxytest.Run(dir, 0, "bench-key", backends...)
	if err != nil {
		return "", err
	}
	defer h.Stop()
	j := newJournal()
	sock := filepath.Join(dir, "recorder.sock")
	if err := runtimeProxy(runCtx, j, "haproxy-0", sock, h.Socket); err != nil {
		return "", err
	}
	ctl, err := startController(ctx, c, ctlRun, dir,
		fmt.Sprintf("loadBalancers:\n  - {name: edge, type: haproxy, haproxy: {readyMap: %q}, instances: {static: [%q]}, allowedNamespaces: {all: true}, listedUpstreamsOnly: false, allowEndpointsWithoutPods: true, allowedCIDRs: [198.18.0.0/15]}\nresync: 30s\n", h.ReadyMap, "unix://"+sock))
	if err != nil {
		return "", err
	}
	defer ctl.Stop()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNS}}, metav1.CreateOptions{}); err != nil {
		return "", err
	}

	t := table{head: []string{"endpoints", "Services", "initial sync", "controller CPU for it", "RSS after (peak)", fmt.Sprintf("idle CPU over %v (%d resyncs)", sz.ScaleIdle, int(sz.ScaleIdle/(30*time.Second))), "liveness requests/s at idle (probe + heartbeat)"}}
	g := table{head: []string{"endpoints", "endpoints turning terminating (one per Service)", "update sent → drained: p50", "p99", "max", "controller CPU", "per change", "Runtime API connections per change", "tries"}}
	terminating := make([]int, maxSvcs) // per Service: endpoints made terminating so far
	// round turns one more endpoint terminating in each of the first n
	// Services at once and measures until HAProxy has drained them all.
	// A round in which another Service's pass ran (a resync) is done
	// again, so that the CPU is the changes' alone.
	round := func(total, n int) error {
		mine := map[string]bool{}
		for i := range n {
			mine[svcName(i)] = true
		}
		for try := 1; ; try++ {
			j.reset()
			before, err := procUsage(ctl.Pid())
			if err != nil {
				return err
			}
			changed := make([]time.Time, n)
			if err := parallel(n, 16, func(i int) error {
				terminating[i]++
				s := scaleSlice(i, scalePerSvc, terminating[i])
				cur, err := cs.DiscoveryV1().EndpointSlices(scaleNS).Get(ctx, s.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				s.ResourceVersion = cur.ResourceVersion
				changed[i] = time.Now()
				_, err = cs.DiscoveryV1().EndpointSlices(scaleNS).Update(ctx, s, metav1.UpdateOptions{})
				return err
			}); err != nil {
				return err
			}
			var lat []time.Duration
			deadline := time.Now().Add(2 * time.Minute)
			for i := 0; i < n; {
				if at, ok := j.firstDrain(svcName(i))["haproxy-0"]; ok {
					lat = append(lat, at.Sub(changed[i]))
					i++
					continue
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("scale: the drain of %s was not applied within 2 minutes (controller log %s)", svcName(i), ctl.Log)
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(time.Second) // anything that follows a drain is counted too
			after, err := procUsage(ctl.Pid())
			if err != nil {
				return err
			}
			if j.readOther(func(u string) bool { return mine[u] }) && try < 10 {
				logf("scale: a resync fell in the round of %d changes; again", n)
				continue
			}
			cpu := after.CPU - before.CPU
			reqs, _ := j.counts("haproxy")
			d := summarise(lat)
			g.add(endpoints(total), fmt.Sprint(n), ms(d.P50), ms(d.P99), ms(d.Max),
				cpu.String(), (cpu / time.Duration(n)).Round(10*time.Microsecond).String(),
				fmt.Sprintf("%.2f", float64(reqs)/float64(n)), fmt.Sprint(try))
			return nil
		}
	}
	created := 0
	for _, nSvc := range sz.ScaleServices {
		logf("scale: %d Services × %d endpoints", nSvc, scalePerSvc)
		before, err := procUsage(ctl.Pid())
		if err != nil {
			return "", err
		}
		start := time.Now()
		if err := parallel(nSvc-created, 16, func(k int) error {
			i := created + k
			if _, err := cs.CoreV1().Services(scaleNS).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: svcName(i), Annotations: map[string]string{"stickydrain.io/upstreams": "edge/" + svcName(i)}},
				Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
			}, metav1.CreateOptions{}); err != nil {
				return err
			}
			_, err := cs.DiscoveryV1().EndpointSlices(scaleNS).Create(ctx, scaleSlice(i, scalePerSvc, 0), metav1.CreateOptions{})
			return err
		}); err != nil {
			return "", err
		}
		created = nSvc
		want := nSvc * scalePerSvc
		for {
			n, err := activeHAProxyServers(h.Socket)
			if err != nil {
				return "", err
			}
			if n == want {
				break
			}
			if time.Since(start) > 20*time.Minute {
				return "", fmt.Errorf("after 20 minutes %d of %d servers are on HAProxy (controller log %s)", n, want, ctl.Log)
			}
			time.Sleep(time.Second)
		}
		synced := time.Since(start)
		afterSync, err := procUsage(ctl.Pid())
		if err != nil {
			return "", err
		}
		logf("scale: %d servers on HAProxy after %v; idling %v", want, synced.Round(time.Second), sz.ScaleIdle)
		j.reset()
		time.Sleep(sz.ScaleIdle)
		live, _ := j.counts("liveness:haproxy-0")
		afterIdle, err := procUsage(ctl.Pid())
		if err != nil {
			return "", err
		}
		idle := afterIdle.CPU - afterSync.CPU
		t.add(endpoints(want), fmt.Sprint(nSvc), synced.Round(100*time.Millisecond).String(),
			(afterSync.CPU - before.CPU).String(), fmt.Sprintf("%s (%s)", mib(afterSync.RSS), mib(afterSync.HWM)),
			fmt.Sprintf("%v (%.1f %% of a core)", idle, 100*float64(idle)/float64(sz.ScaleIdle)),
			fmt.Sprintf("%.2f", float64(live)/sz.ScaleIdle.Seconds()))
		for _, n := range []int{10, 100, 1000} {
			if n > nSvc {
				break
			}
			logf("scale: %d endpoints turn terminating at %d", n, want)
			if err := round(want, n); err != nil {
				return "", err
			}
		}
	}
	return fmt.Sprintf(`## Scale

Synthetic EndpointSlices (one slice of %d ready endpoints per selector-less Service, as another
controller would publish them) on the real API server, mapped onto one real HAProxy 2.6 with
%d backends of %d slots; the controller binary as its shipped ServiceAccount with the default
resync (30 s). Services in steps of %v, each of %d endpoints. CPU from /proc (10 ms ticks).

%s
Goal: controller under 150 MiB RSS at 10k endpoints.

How a change's cost grows: at each size, one endpoint in each of the first 10, 100, then 1,000
Services turns terminating at once (slice updates). The delay runs from an update's send (so it
includes the API server's write and watch) to HAProxy confirming that drain; the CPU is the
controller's over the round, watch decoding included. A round in which any other Service's
backend was read (a resync pass) is measured again ("tries"), so the CPU is the changes' alone;
at 10 changes it is within a few 10 ms ticks. A reconcile reads its own Service's slices and its
own backend, so the cost per change should stay flat as the total grows and the total should
grow with the changes.

%s
`, scalePerSvc, maxSvcs, scalePerSvc+4, sz.ScaleServices, scalePerSvc, t.String(), g.String()), nil
}

// endpoints writes a count as the tables do: 10k, or 500 below a thousand.
func endpoints(n int) string {
	if n < 1000 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%dk", n/1000)
}
