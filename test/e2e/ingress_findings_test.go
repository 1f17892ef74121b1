package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/controller/plan"
	"github.com/stickydrain/stickydrain/test/must"
)

// ingressFindings are what each ingress does in the cases that decide
// whether sessions survive behind it, asserted as found (docs/ingress.md
// says the same): a change upstream fails here first.
type ingressFindings struct {
	// CookieAcrossReplicas: a cookie one replica of the proxy set leads to
	// the same pod through another replica.
	CookieAcrossReplicas bool
	// KeepsUnreadyServing: a pod whose readiness fails while it is not
	// terminating still gets its cookie holders.
	KeepsUnreadyServing bool
	// KeepsUnreadyTerminating: a terminating pod whose readiness fails
	// during its drain (EndpointSlice serving=false) still gets its cookie
	// holders.
	KeepsUnreadyTerminating bool
}

var wantFindings = map[Ingress]ingressFindings{
	// haproxy-ingress's dynamic cookie is a hash of its key (the same
	// default on every replica) and the server's address; drain-support
	// keeps a pod that is not ready in drain — terminating or not.
	HAProxyIngress: {CookieAcrossReplicas: true, KeepsUnreadyServing: true, KeepsUnreadyTerminating: true},
	// Traefik's sticky cookie is a hash of the server's URL; its Ingress
	// provider keeps only serving endpoints, fenced when terminating.
	Traefik: {CookieAcrossReplicas: true, KeepsUnreadyServing: false, KeepsUnreadyTerminating: false},
}

// TestIngressFindings finds, on each ingress, whether a session survives a
// second proxy replica, a readiness failure, and a readiness failure
// during a drain.
func TestIngressFindings(t *testing.T) {
	for _, kind := range []Ingress{HAProxyIngress, Traefik} {
		t.Run(string(kind), func(t *testing.T) {
			got := findIngressFacts(t, kind)
			t.Logf("%s: %+v", kind, got)
			if want := wantFindings[kind]; got != want {
				t.Errorf("%s behaves otherwise than docs/ingress.md says:\n got %+v\nwant %+v", kind, got, want)
			}
		})
	}
}

func findIngressFacts(t *testing.T, kind Ingress) ingressFindings {
	ctx, env := startEnv(t, Options{Ingress: kind})
	// Sessions outlive the test's steps.
	if err := env.Deploy(ctx, 3, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	must.Eventually(t, ctx, 300*time.Millisecond, "3 ready pods active on the ingress", func() bool { return env.Serving(ctx, "v1", 3) })
	pods := env.Pods(ctx)
	a, b := pods[0], pods[1]
	base := env.Front.URL()
	var f ingressFindings

	// A second replica of the proxy.
	r2, err := env.AddIngressReplica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	userA := loginOn(t, ctx, base, a.Name)
	must.Eventually(t, ctx, 300*time.Millisecond, "the second replica routing", func() bool { _, code := whoAnswers(userA, r2.URL()); return code == 200 })
	f.CookieAcrossReplicas = answersAll(userA, r2.URL(), a.Name)

	// A pod whose readiness fails, not terminating.
	userB := loginOn(t, ctx, base, b.Name)
	setReady(t, b.IP, false)
	must.Eventually(t, ctx, 300*time.Millisecond, b.Name+" not ready in its EndpointSlice", func() bool { return endpointIs(ctx, env, b.IP, "ready", false) })
	time.Sleep(2 * time.Second) // the proxy's reaction
	f.KeepsUnreadyServing = answersAll(userB, base, b.Name)
	setReady(t, b.IP, true)

	// A terminating pod, drained by the webhook's preStop (it holds
	// userA's session), whose readiness fails during the drain.
	if err := env.Cluster.Clientset.CoreV1().Pods(Namespace).Delete(ctx, a.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort(a.IP + ":8080")
	must.Eventually(t, ctx, 300*time.Millisecond, a.Name+" draining on the ingress", func() bool {
		v, err := env.ingressView(ctx)
		return err == nil && v[ap] == plan.Draining
	})
	if !answersAll(userA, base, a.Name) {
		t.Fatalf("%s: a draining pod's cookie holder went elsewhere before any readiness failure", kind)
	}
	setReady(t, a.IP, false)
	must.Eventually(t, ctx, 300*time.Millisecond, a.Name+" not serving in its EndpointSlice", func() bool { return endpointIs(ctx, env, a.IP, "serving", false) })
	time.Sleep(2 * time.Second)
	f.KeepsUnreadyTerminating = answersAll(userA, base, a.Name)
	return f
}

// loginOn logs a new user in through base until its session lands on pod.
func loginOn(t *testing.T, ctx context.Context, base, pod string) *http.Client {
	t.Helper()
	for i := 0; ctx.Err() == nil; i++ {
		jar, _ := cookiejar.New(nil)
		hc := &http.Client{Jar: jar, Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		code, r, _, err := call(hc, "POST", fmt.Sprintf("%s/login?user=finder-%d", base, i))
		if err == nil && code == 200 && r.Pod == pod {
			return hc
		}
		if err == nil && code == 200 {
			_, _, _, _ = call(hc, "POST", base+"/logout")
		}
	}
	t.Fatalf("no session landed on %s", pod)
	return nil
}

// whoAnswers sends the user's next request through base.
func whoAnswers(hc *http.Client, base string) (string, int) {
	code, r, _, err := call(hc, "GET", base+"/app/cart")
	if err != nil {
		return "", 0
	}
	return r.Pod, code
}

// answersAll reports whether 5 requests of the user through base all
// reached pod and found the session there.
func answersAll(hc *http.Client, base, pod string) bool {
	for range 5 {
		if who, code := whoAnswers(hc, base); who != pod || code != 200 {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

func setReady(t *testing.T, ip string, ready bool) {
	t.Helper()
	resp, err := http.Post(fmt.Sprintf("http://%s:8080/admin/ready?ready=%t", ip, ready), "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// endpointIs reports whether the app's EndpointSlices list ip with the
// condition (ready or serving) as want.
func endpointIs(ctx context.Context, env *Env, ip, condition string, want bool) bool {
	var slices discoveryv1.EndpointSliceList
	if err := env.Cluster.Client.List(ctx, &slices, client.InNamespace(Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: "web"}); err != nil {
		return false
	}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			for _, addr := range ep.Addresses {
				if addr != ip {
					continue
				}
				c := ep.Conditions.Ready
				if condition == "serving" {
					c = ep.Conditions.Serving
				}
				return ptr.Deref(c, true) == want
			}
		}
	}
	return false
}
