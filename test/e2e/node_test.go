package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/test/haproxytest"
)

// TestRealNodeKeepsEverySession runs the rollout, the eviction and the
// scale-down on a real node (test/node: the kubelet on containerd and runc)
// instead of podhost: the session app from its image (no shell in it),
// drainctl copied by the injected init container from the drainctl image,
// the preStop hook run by the kubelet; the users behind the HAProxy
// instances outside the cluster, as everywhere else, on the newest HAProxy
// in slot mode (the sample's). The same assertions as on podhost, and the
// preStop's timing from the kubelet's own log; and the rollout once more
// with the webhook and the controller installed as pods.
func TestRealNodeKeepsEverySession(t *testing.T) {
	vs := haproxytest.Versions(t)
	opts := Options{Node: true, HAProxy: haproxytest.Flavour{Version: vs[len(vs)-1]}}
	t.Run("rollout", func(t *testing.T) { rollingUpdate(t, opts) })
	for _, tc := range disruptions {
		t.Run(tc.name, func(t *testing.T) { disruptOne(t, opts, tc.disrupt) })
	}
	// The same rollout with stickydrain installed as a user does it
	// (test/install): cert-manager's certificate, the webhook and the
	// controller as pods of manifests/default from the stickydrain image,
	// the controller draining the HAProxy instances through their Runtime
	// API on TCP.
	// Its pods take drainctl as an image volume (the drainctl image
	// mounted read-only; no init container), and drain with it.
	installed := opts
	installed.Install = true
	installed.DrainctlDelivery = "image-volume"
	t.Run("rollout-installed", func(t *testing.T) { rollingUpdate(t, installed) })
	// kubectl stickydrain on a pod draining a user's session.
	t.Run("kubectl-plugin", func(t *testing.T) { pluginOnARealDrain(t, opts) })
	// The rollout of a real Tomcat: Debian's Tomcat 10.1 in an image built
	// here from Debian's files, the users' sessions Tomcat's own, counted
	// by the manager with credentials from a Secret; a probe that creates
	// no session. Each old pod goes within a poll interval (and Tomcat's
	// expiry sweep) of its last user's logout or timeout, not at max-wait.
	tomcat := opts
	tomcat.Tomcat = true
	t.Run("rollout-tomcat", func(t *testing.T) { rollingUpdate(t, tomcat) })
}

// drainctlCameFromItsImage asserts that every pod of the app got drainctl
// from the drainctl image: as an image volume when the scenario asks for
// it, else it ran the
// injected init container from the drainctl image, to its end (exit 0),
// before its app container: what the webhook promises a pod whose image has
// no drainctl (nor a shell to copy it with).
func drainctlCameFromItsImage(ctx context.Context, t *testing.T, env *Env) {
	t.Helper()
	var pods corev1.PodList
	if err := env.Cluster.Client.List(ctx, &pods, client.InNamespace(Namespace), client.MatchingLabels{"app": "web"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if env.drainctlDelivery == "image-volume" {
			n := 0
			for _, v := range p.Spec.Volumes {
				if v.Image != nil && v.Image.Reference == env.drainctlImage {
					n++
				}
			}
			if n != 1 || len(p.Spec.InitContainers) != 0 {
				t.Errorf("%s: want the drainctl image %s as one image volume and no init container: volumes %+v, init containers %+v", p.Name, env.drainctlImage, p.Spec.Volumes, p.Spec.InitContainers)
			}
			continue
		}
		if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Image != env.drainctlImage {
			t.Errorf("%s: no init container from %s: %+v", p.Name, env.drainctlImage, p.Spec.InitContainers)
			continue
		}
		st := p.Status.InitContainerStatuses
		if len(st) == 0 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 0 {
			t.Errorf("%s: the drainctl init container did not end with exit 0: %+v", p.Name, st)
		}
	}
}
