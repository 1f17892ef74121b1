package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
)

const probeSynopsis = `drainctl probe --get URL [--requests N] [flags]

Tells whether a probe creates sessions: reads the session count, sends N
cookie-less GETs to URL as the kubelet's httpGet probe sends them (its
User-Agent, the certificate not verified, redirects on the same host
followed), and reads the count again. Prints on stdout how many sessions
the count gained, and a sentence on stderr. A gain of N or more means each
request made a session: a readiness probe (or a load balancer's health
check) on that path keeps the count above zero, and every drain runs to
max-wait. Users logging in meanwhile add to the gain: run it again to be
sure. Exit status 0, 2 usage error, 4 the count or the probe's URL failed.

Example:
  drainctl probe --get http://localhost:8080/shop/ \
      --url http://localhost:8080/manager/text/list --context /shop --basic-auth-env MANAGER
`

// maxProbeRequests bounds --requests.
const maxProbeRequests = 100

func runProbe(ctx context.Context, args []string, env Env) int {
	w := params.NewWait()
	fs := newFlagSet("probe", env, probeSynopsis)
	w.BindSource(fs)
	get := fs.String("get", "", "the probe's `URL` (http or https, normally http://localhost:PORT/PATH)")
	headers := fs.StringArray("get-header", nil, "a `header` of the probe, 'Name: value' (repeatable)")
	n := fs.Int("requests", 3, fmt.Sprintf("how many requests to send (1 to %d)", maxProbeRequests))
	if status, ok := parse(fs, args, env); !ok {
		return status
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(env.Stderr, "drainctl probe: unexpected argument %q\n", fs.Arg(0))
		return api.ExitUsage
	case *get == "" || !(strings.HasPrefix(*get, "http://") || strings.HasPrefix(*get, "https://")):
		fmt.Fprintf(env.Stderr, "drainctl probe: --get %q: want the probe's http:// or https:// URL (e.g. --get http://localhost:8080/healthz)\n", *get)
		return api.ExitUsage
	case *n < 1 || *n > maxProbeRequests:
		fmt.Fprintf(env.Stderr, "drainctl probe: --requests %d: want 1 to %d\n", *n, maxProbeRequests)
		return api.ExitUsage
	case w.URL == "":
		fmt.Fprintln(env.Stderr, "drainctl probe: --url is required: the session count to read before and after (e.g. --url http://localhost:8080/sessions)")
		return api.ExitUsage
	}
	c, ok := sourceClient("probe", w, env)
	if !ok {
		return api.ExitUsage
	}
	count := func() (float64, error) {
		ctx, cancel := context.WithTimeout(ctx, w.RequestTimeout)
		defer cancel()
		r, err := c.Count(ctx)
		return r.Count, err
	}
	before, err := count()
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl probe: the count before: %v\n", err)
		return api.ExitUnreachable
	}
	for i := 0; i < *n; i++ {
		if err := probeOnce(ctx, *get, *headers, w.RequestTimeout); err != nil {
			fmt.Fprintf(env.Stderr, "drainctl probe: %v\n", err)
			return api.ExitUnreachable
		}
	}
	after, err := count()
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl probe: the count after: %v\n", err)
		return api.ExitUnreachable
	}
	gain := after - before
	fmt.Fprintln(env.Stdout, countText(max(gain, 0)))
	if gain >= float64(*n) {
		fmt.Fprintf(env.Stderr, "%d requests to %s added %s sessions (%s → %s): each one made a session; probe a path that creates none\n",
			*n, *get, countText(gain), countText(before), countText(after))
	} else {
		fmt.Fprintf(env.Stderr, "%d requests to %s added %s sessions (%s → %s)\n", *n, *get, countText(max(gain, 0)), countText(before), countText(after))
	}
	return 0
}

// probeOnce sends one GET as the kubelet's httpGet probe does: no cookie,
// its User-Agent, the certificate not verified, redirects followed on the
// same host only; the body read (bounded) and thrown away.
func probeOnce(ctx context.Context, url string, headers []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("--get %q: %w", url, err)
	}
	req.Header.Set("User-Agent", "kube-probe/drainctl")
	req.Header.Set("Accept", "*/*")
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return fmt.Errorf("--get-header %q: want 'Name: value'", h)
		}
		req.Header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	hc := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}, //nolint:gosec // as the kubelet's probe
		CheckRedirect: sameHostName,
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("the probe's GET %s (timeout %s): %w", url, timeout, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return nil
}
