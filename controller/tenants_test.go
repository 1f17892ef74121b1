package main

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/test/must"
)

// tenants writes what namespace users write — Services mapped onto
// upstreams, pods of the session app — and reads the Warnings the
// controller gives them, for the tenancy scenarios.
type tenants struct {
	t   *testing.T
	ctx context.Context
	k   client.Client
}

// service creates Service ns/name mapped onto upstreams, selecting
// selector's pods (none: a selector-less Service).
func (n tenants) service(ns, name, upstreams string, selector map[string]string) {
	n.t.Helper()
	must.OK(n.t, n.k.Create(n.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{api.AnnotationUpstreams: upstreams}},
		Spec: corev1.ServiceSpec{Selector: selector,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}},
	}))
}

// pod creates a session-app pod labelled app=app and returns its address
// once it runs.
func (n tenants) pod(ns, name, app string) netip.Addr {
	n.t.Helper()
	must.OK(n.t, n.k.Create(n.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](1), Containers: []corev1.Container{{
			Name: "app", Image: "sessionapp", Args: []string{"--listen=:8080"},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}))
	var ip netip.Addr
	must.Eventually(n.t, n.ctx, 50*time.Millisecond, "pod "+ns+"/"+name+" running with an address", func() bool {
		var p corev1.Pod
		if n.k.Get(n.ctx, client.ObjectKey{Namespace: ns, Name: name}, &p) != nil || p.Status.PodIP == "" {
			return false
		}
		ip = netip.MustParseAddr(p.Status.PodIP)
		return true
	})
	return ip
}

// warned reports whether a Warning of reason, its note containing
// contains, was recorded on regarding in namespace ns.
func (n tenants) warned(ns, regarding, reason, contains string) bool {
	var evs eventsv1.EventList
	if n.k.List(n.ctx, &evs, client.InNamespace(ns)) != nil {
		return false
	}
	for _, e := range evs.Items {
		if e.Regarding.Name == regarding && e.Reason == reason && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, contains) {
			return true
		}
	}
	return false
}
