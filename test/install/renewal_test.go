package install_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// renewUnderPodCreation renews the webhook's certificate as `cmctl renew`
// does (the Issuing condition set on the Certificate) while pods of the
// opted-in namespace are created, every 200 ms, until both webhook pods
// serve the renewed certificate (the kubelet refreshes a Secret volume a
// minute or more after it changes, and the webhook reloads it) and 20 s
// more: not one creation may be refused, and each must be injected; and
// at each step a new TLS connection to each webhook pod, trusting only the
// caBundle configured at that moment, must verify. With
// the leaf trusted on its own (a self-signed certificate as the CA bundle)
// the API server trusts only the new one from the moment cainjector
// writes it, and refuses pods until the webhook serves it.
func (e *env) renewUnderPodCreation(t *testing.T, ctx context.Context) {
	t.Helper()
	var before corev1.Secret
	if err := e.c.Client.Get(ctx, types.NamespacedName{Namespace: system, Name: "stickydrain-webhook-tls"}, &before); err != nil {
		t.Fatal(err)
	}
	oldSerial, err := serial(before.Data["tls.crt"])
	if err != nil {
		t.Fatal(err)
	}
	crt := &unstructured.Unstructured{}
	crt.SetAPIVersion("cert-manager.io/v1")
	crt.SetKind("Certificate")
	if err := e.c.Client.Get(ctx, types.NamespacedName{Namespace: system, Name: "stickydrain-webhook"}, crt); err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(crt.Object, "status", "conditions")
	conds = append(conds, map[string]any{
		"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
		"message": "renewal triggered by the test", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	})
	if err := unstructured.SetNestedSlice(crt.Object, conds, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Client.Status().Update(ctx, crt); err != nil {
		t.Fatalf("triggering the renewal: %v", err)
	}
	start := time.Now()
	t.Logf("renewal of stickydrain-webhook triggered (serial %s); creating pods until both webhook pods serve the new one", oldSerial)

	var created, refused, untrusted int
	var lastBundle string
	var servedAt time.Time
	for i := 0; ; i++ {
		if ctx.Err() != nil {
			t.Fatalf("the webhook pods did not serve the renewed certificate: %v", ctx.Err())
		}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: fmt.Sprintf("renewal-%d", i), Labels: map[string]string{"stickydrain.io/drain": "enabled"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: e.imgs["sessionapp"].Ref}}},
		}
		// A dry run: admission runs as for a real pod (the webhook
		// declares no side effects), nothing is scheduled.
		if err := e.c.Client.Create(ctx, p, client.DryRunAll); err != nil {
			refused++
			t.Errorf("%v after the renewal: pod creation refused: %v", time.Since(start).Round(time.Millisecond), err)
		} else {
			created++
			if p.Annotations["stickydrain.io/status"] != "injected" {
				t.Errorf("pod %s not injected: %v", p.Name, p.Annotations)
			}
		}
		// What a new connection of the API server would see: the bundle
		// the webhook configuration holds now must verify what each
		// webhook pod serves now (kept-alive connections hide a gap from
		// the pod creations above).
		allNew, bundle, errs := e.checkServed(ctx, oldSerial)
		if bundle != lastBundle {
			t.Logf("%v after the renewal: the webhook configurations trust %s", time.Since(start).Round(time.Millisecond), bundle)
			lastBundle = bundle
		}
		for _, err := range errs {
			untrusted++
			t.Errorf("%v after the renewal: %v", time.Since(start).Round(time.Millisecond), err)
		}
		if servedAt.IsZero() && allNew {
			servedAt = time.Now()
			t.Logf("both webhook pods serve the renewed certificate %v after the renewal", servedAt.Sub(start).Round(time.Second))
		}
		if !servedAt.IsZero() && time.Since(servedAt) > 20*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("during the renewal: %d pods created, %d refused; %d handshakes the configured CA bundle did not verify", created, refused, untrusted)
}

// checkServed dials every webhook pod as the API server would on a new
// connection — the Service's DNS name, the caBundle the mutating webhook
// configuration holds at that moment as the only root — and reports
// whether each serves a certificate other than oldSerial, and each
// handshake that did not verify.
func (e *env) checkServed(ctx context.Context, oldSerial string) (allNew bool, bundle string, errs []error) {
	var m admissionv1.MutatingWebhookConfiguration
	if err := e.c.Client.Get(ctx, types.NamespacedName{Name: "stickydrain"}, &m); err != nil || len(m.Webhooks) == 0 {
		return false, "", []error{fmt.Errorf("reading the webhook configuration: %v", err)}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(m.Webhooks[0].ClientConfig.CABundle) {
		return false, "", []error{fmt.Errorf("the webhook configuration's caBundle holds no certificate")}
	}
	bundle, _ = serial(m.Webhooks[0].ClientConfig.CABundle)
	var pods corev1.PodList
	if err := e.c.Client.List(ctx, &pods, client.InNamespace(system), client.MatchingLabels{"app.kubernetes.io/name": "stickydrain-webhook"}); err != nil || len(pods.Items) == 0 {
		return false, bundle, nil
	}
	allNew = true
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil || !ready(&p) {
			allNew = false
			continue
		}
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: &tls.Config{RootCAs: roots, ServerName: "stickydrain-webhook." + system + ".svc"}}
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.Status.PodIP, "9443"))
		if err != nil {
			allNew = false
			errs = append(errs, fmt.Errorf("webhook pod %s: a new connection with the configured CA bundle fails: %w", p.Name, err))
			continue
		}
		certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
		conn.Close()
		if len(certs) == 0 || certs[0].SerialNumber.String() == oldSerial {
			allNew = false
		}
	}
	return allNew, bundle, errs
}

func serial(pemBytes []byte) (string, error) {
	b, _ := pem.Decode(bytes.TrimSpace(pemBytes))
	if b == nil {
		return "", fmt.Errorf("no PEM block in tls.crt")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "", err
	}
	return c.SerialNumber.String(), nil
}
