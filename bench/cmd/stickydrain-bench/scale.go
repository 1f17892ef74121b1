package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/test/cluster"
	"github.com/stickydrain/stickydrain/test/e2e"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/proc"
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

func scale(ctx context.Context, logf func(string, ...any), controllerBin string) (string, error) {
	c, err := cluster.Start(ctx, cluster.Options{Log: logf, OwnSignals: true})
	if err != nil {
		return "", err
	}
	defer c.Stop()
	cs, err := fastClient(c.Config)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "stickydrain-bench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	const maxSvcs = 1000
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
	bin, cleanup, err := controllerBinary(controllerBin)
	if err != nil {
		return "", err
	}
	defer cleanup()
	kubeconfig, err := e2e.ServiceAccount(ctx, c, "controller")
	if err != nil {
		return "", err
	}
	cfgPath := filepath.Join(dir, "controller.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf("loadBalancers:\n  - {name: edge, type: haproxy, instances: {static: [%q]}}\nresync: 30s\n", "unix://"+sock)), 0o644); err != nil {
		return "", err
	}
	ports, err := proc.FreePorts(2)
	if err != nil {
		return "", err
	}
	ctl, err := proc.Start(filepath.Join(dir, "controller.log"), bin, "--config", cfgPath, "--kubeconfig", kubeconfig,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	if err != nil {
		return "", err
	}
	defer ctl.Stop()
	if err := proc.WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]), time.Minute); err != nil {
		return "", fmt.Errorf("controller: %w", err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNS}}, metav1.CreateOptions{}); err != nil {
		return "", err
	}

	t := table{head: []string{"endpoints", "Services", "initial sync", "controller CPU for it", "RSS after (peak)", "idle CPU over 60 s (2 resyncs)", "100 endpoints turn terminating: drained p50", "p99", "controller CPU per change", "Runtime API connections per change"}}
	created := 0
	for _, nSvc := range []int{100, maxSvcs} {
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
		logf("scale: %d servers on HAProxy after %v; idling 60 s", want, synced.Round(time.Second))
		time.Sleep(60 * time.Second)
		afterIdle, err := procUsage(ctl.Pid())
		if err != nil {
			return "", err
		}
		// 100 endpoints, one in each of 100 Services, turn terminating.
		j.reset()
		changed := make([]time.Time, 100)
		term := nSvc / 100 // a different endpoint in each round
		if err := parallel(100, 16, func(i int) error {
			s := scaleSlice(i, scalePerSvc, term)
			cur, err := cs.DiscoveryV1().EndpointSlices(scaleNS).Get(ctx, s.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.ResourceVersion = cur.ResourceVersion
			changed[i] = time.Now()
			_, err = cs.DiscoveryV1().EndpointSlices(scaleNS).Update(ctx, s, metav1.UpdateOptions{})
			return err
		}); err != nil {
			return "", err
		}
		var lat []time.Duration
		deadline := time.Now().Add(2 * time.Minute)
		for i := 0; i < 100; {
			fd := j.firstDrain(svcName(i))
			if at, ok := fd["haproxy-0"]; ok {
				lat = append(lat, at.Sub(changed[i]))
				i++
				continue
			}
			if time.Now().After(deadline) {
				return "", fmt.Errorf("scale: the drain of %s was not applied within 2 minutes", svcName(i))
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		afterChange, err := procUsage(ctl.Pid())
		if err != nil {
			return "", err
		}
		reqs, _ := j.counts("haproxy")
		d := summarise(lat)
		t.add(fmt.Sprintf("%dk", want/1000), fmt.Sprint(nSvc), synced.Round(100*time.Millisecond).String(),
			(afterSync.CPU - before.CPU).String(), fmt.Sprintf("%s (%s)", mib(afterSync.RSS), mib(afterSync.HWM)),
			fmt.Sprintf("%v (%.1f %% of a core)", afterIdle.CPU-afterSync.CPU, 100*float64(afterIdle.CPU-afterSync.CPU)/float64(60*time.Second)),
			ms(d.P50), ms(d.P99), ((afterChange.CPU - afterIdle.CPU) / 100).String(), fmt.Sprintf("%.2f", float64(reqs)/100))
	}
	return fmt.Sprintf(`## Scale

Synthetic EndpointSlices (one slice of %d ready endpoints per selector-less Service, as another
controller would publish them) on the real API server, mapped onto one real HAProxy 2.6 with
1,000 backends of 104 slots; the controller binary as its shipped ServiceAccount with the default
resync (30 s). First 100 Services (10k endpoints), then 900 more (100k). Then one endpoint in each
of 100 Services turns terminating (a slice update): the delay is from the update's send to
HAProxy confirming the drain; CPU per change includes the API-server watch traffic it decodes.
CPU from /proc (10 ms ticks).

%s
Goal: controller under 150 MiB RSS at 10k endpoints.
`, scalePerSvc, t.String()), nil
}
