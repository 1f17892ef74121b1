package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/stickydrain/stickydrain/test/cluster"
)

// MetricsToken is the token of a ServiceAccount bound to the shipped
// ClusterRole stickydrain-metrics-reader (manifests/base), as a Prometheus
// would be: what a scrape of the secured metrics endpoints presents.
func MetricsToken(ctx context.Context, c *cluster.Cluster) (string, error) {
	return token(ctx, c, "metrics-scraper", true)
}

// UnauthorizedToken is a valid token of a ServiceAccount with no right to
// read metrics.
func UnauthorizedToken(ctx context.Context, c *cluster.Cluster) (string, error) {
	return token(ctx, c, "nosy-neighbour", false)
}

func token(ctx context.Context, c *cluster.Cluster, name string, reader bool) (string, error) {
	const ns = "stickydrain-system"
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if err := c.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if reader {
		raw, err := os.ReadFile(filepath.Join(RepoRoot(), "manifests", "common", "metrics-reader.yaml"))
		if err != nil {
			return "", err
		}
		var role unstructured.Unstructured
		if err := yaml.Unmarshal(raw, &role.Object); err != nil {
			return "", err
		}
		if err := c.Client.Create(ctx, &role); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("manifests/common/metrics-reader.yaml: %w", err)
		}
		if err := c.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.GetName()},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
	}
	tr, err := c.Clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// Scrape GETs https://127.0.0.1:port/metrics (the certificate is
// self-signed) with token as bearer, "" for none. It returns the status,
// the body and the protocol the server chose (ALPN offers h2 first).
func Scrape(ctx context.Context, port int, token string) (status int, body, proto string, err error) {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return 0, "", "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Proto, err
}

// ScrapeGuarded checks that the metrics endpoint on port is guarded as
// shipped — no answer to plain HTTP, 401 without a token, 403 for a token
// without the right, no HTTP/2 — and returns what a reader scrapes.
func ScrapeGuarded(ctx context.Context, c *cluster.Cluster, port int) (string, error) {
	reader, err := MetricsToken(ctx, c)
	if err != nil {
		return "", err
	}
	nosy, err := UnauthorizedToken(ctx, c)
	if err != nil {
		return "", err
	}
	if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return "", fmt.Errorf("plain HTTP scrape answered 200 (%d bytes of metrics)", len(b))
		}
	}
	for _, tc := range []struct {
		who, token string
		want       int
	}{{"no token", "", http.StatusUnauthorized}, {"a token without the right to GET /metrics", nosy, http.StatusForbidden}} {
		status, body, _, err := Scrape(ctx, port, tc.token)
		if err != nil {
			return "", fmt.Errorf("scrape with %s: %w", tc.who, err)
		}
		if status != tc.want {
			return "", fmt.Errorf("scrape with %s: status %d, want %d (%.200s)", tc.who, status, tc.want, body)
		}
	}
	status, body, proto, err := Scrape(ctx, port, reader)
	if err != nil {
		return "", fmt.Errorf("scrape as stickydrain-metrics-reader: %w", err)
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("scrape as stickydrain-metrics-reader: status %d (%.200s)", status, body)
	}
	if proto != "HTTP/1.1" {
		return "", fmt.Errorf("the metrics server spoke %s to a client offering h2; want HTTP/1.1 (HTTP/2 is off unless --enable-http2)", proto)
	}
	return body, nil
}
