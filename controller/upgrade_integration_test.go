package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/haproxytest"
	"github.com/stickydrain/stickydrain/test/must"
)

// TestAnUpgradeKeepsServersOfUnlistedUpstreams: a controller from before
// listedUpstreamsOnly defaulted to true let a load balancer's
// allowedNamespaces cover every backend, and kept its configuration in
// the applied ConfigMap without a format. Upgraded onto the same file,
// which lists no upstream, the controller keeps the servers a live
// Service has in that upstream — held, with its Event and metric — then
// applies the file, and keeps it with today's format, once the operator
// lists the upstream. A restart after that changes nothing.
func TestAnUpgradeKeepsServersOfUnlistedUpstreams(t *testing.T) {
	c, _ := clusterWithPods(t)
	h := haproxytest.Start(t, "k", haproxytest.Backend{Name: "shop", Slots: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := c.Client
	tn := tenants{t: t, ctx: ctx, k: k}
	must.OK(t, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}))

	file := fmt.Sprintf(`loadBalancers:
  - name: edge
    type: haproxy
    instances: {static: [%q]}
    allowedNamespaces: {names: [shop]}
    allowedCIDRs: [198.18.0.0/15]
resync: 2s
`, h.Address())
	kubeconfig := asControllerServiceAccount(t, c)
	// What a controller from before kept: the file, and no format.
	applied := client.ObjectKey{Namespace: "stickydrain-system", Name: "stickydrain-controller-applied"}
	var cm corev1.ConfigMap
	switch err := k.Get(ctx, applied, &cm); {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: applied.Namespace, Name: applied.Name}, Data: map[string]string{appliedKey: file}}
		must.OK(t, k.Create(ctx, &cm))
	case err != nil:
		t.Fatal(err)
	default:
		cm.Data = map[string]string{appliedKey: file}
		must.OK(t, k.Update(ctx, &cm))
	}

	a, b := tn.pod("shop", "web-a", "web"), tn.pod("shop", "web-b", "web")
	tn.service("shop", "web", "edge/shop", map[string]string{"app": "web"})
	// The Service had servers when the controller was upgraded: its
	// endpoints are ready before the new one starts.
	must.Eventually(t, ctx, 50*time.Millisecond, "shop/web's two endpoints ready", func() bool {
		var sl discoveryv1.EndpointSliceList
		if k.List(ctx, &sl, client.InNamespace("shop"), client.MatchingLabels{discoveryv1.LabelServiceName: "web"}) != nil {
			return false
		}
		ready := 0
		for _, s := range sl.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready++
				}
			}
		}
		return ready == 2
	})
	ctl := startController(t, c, kubeconfig, file)
	edge, err := haproxy.New(h.Address(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	holds := func() bool {
		got, err := backend.Read(ctx, edge, "shop")
		return err == nil && len(got) == 2 && got[netip.AddrPortFrom(a, 8080)] == plan.Active && got[netip.AddrPortFrom(b, 8080)] == plan.Active
	}
	must.Eventually(t, ctx, 50*time.Millisecond, "shop/web's pods on edge/shop after the upgrade", holds)
	must.Eventually(t, ctx, 50*time.Millisecond, "ConfigurationChangeRefused on shop/web naming the unlisted upstream", func() bool {
		return tn.warned("shop", "web", api.ReasonConfigurationRefused, "upstream edge/shop is not listed")
	})
	time.Sleep(6 * time.Second) // the watcher checks every 5 s, the controller resyncs every 2 s: another look
	if !holds() {
		got, _ := backend.Read(ctx, edge, "shop")
		t.Fatalf("edge/shop holds %v after the upgrade; want both of shop's pods, held", got)
	}
	ctl.expectMetrics(t, `stickydrain_controller_config_held{reason="revoking"} 1`)
	must.OK(t, k.Get(ctx, applied, &cm))
	if _, ok := cm.Data[formatKey]; ok || cm.Data[appliedKey] != file {
		t.Errorf("the applied ConfigMap while the upgrade's change is held: %v; want the file as kept before, without %s", cm.Data, formatKey)
	}

	// The operator lists the upstream: the file applies as it is, and is
	// kept with today's format.
	listed := strings.Replace(file, "resync:", "    upstreams: [{name: shop}]\nresync:", 1)
	configPath := ctl.args[slices.Index(ctl.args, "--config")+1]
	must.OK(t, os.WriteFile(configPath, []byte(listed), 0o644))
	must.Eventually(t, ctx, 50*time.Millisecond, "the listing applied, nothing held", func() bool {
		var cm corev1.ConfigMap
		return k.Get(ctx, applied, &cm) == nil && cm.Data[formatKey] == appliedFormat && cm.Data[appliedKey] == listed
	})
	ctl.expectMetrics(t, `stickydrain_controller_config_held{reason="revoking"} 0`)
	if !holds() {
		t.Errorf("edge/shop lost shop's pods once the upstream was listed")
	}
	ctl.stop()
	ctl.start()
	time.Sleep(6 * time.Second)
	if !holds() {
		t.Errorf("edge/shop lost shop's pods at a restart on today's format")
	}
}
