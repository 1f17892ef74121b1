package source

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
)

// Client fetches and parses the session count.
type Client struct {
	src     params.Source
	http    *http.Client
	timeout time.Duration
	// header is built once: credentials come from files or environment
	// variables read at start, so a bad file fails fast as a usage error.
	header http.Header
}

// New returns a Client for src, reading its credentials now.
func New(src params.Source) (*Client, error) {
	h, err := credentials(src, readCredentialFile, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	timeout := src.RequestTimeout
	if timeout <= 0 {
		timeout = api.DefaultRequestTimeout
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// The endpoint is the pod itself: never go through a proxy.
	tr.Proxy = nil
	if src.InsecureTLS {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for with --insecure-skip-tls-verify
	}
	return &Client{
		src: src,
		// http.Client.Timeout runs until the body is read to its end or
		// closed: a body that trickles in is cut at --request-timeout, as
		// an app that never answers is.
		http:    &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: sameOrigin},
		timeout: timeout,
		header:  h,
	}, nil
}

// maxRedirects is Go's own default, which a CheckRedirect replaces.
const maxRedirects = 10

// sameOrigin follows a redirect only to the scheme, host and port of
// --url (the first request). Go's client drops Authorization and Cookie
// on a redirect to another host name, but keeps them for another port of
// the same host, and keeps every other header everywhere: --header-file's
// headers (an API key, a tenant) would reach a host nobody named. The
// count endpoint is the pod's own; a redirect away from it is a mistake
// or an attack, and is refused before anything is sent there.
func sameOrigin(req *http.Request, via []*http.Request) error {
	if origin(req.URL) != origin(via[0].URL) {
		return &crossOriginRedirect{to: req.URL.Redacted()}
	}
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	return nil
}

// origin is scheme://host:port, the port explicit and host and scheme in
// lower case, so that http://App and http://app:80 are one origin.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	switch {
	case port != "":
	case scheme == "https":
		port = "443"
	default:
		port = "80"
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

type crossOriginRedirect struct{ to string }

func (e *crossOriginRedirect) Error() string {
	return fmt.Sprintf("redirect to %s refused: drainctl follows redirects only on the same host (scheme, host and port)", e.to)
}

// Count fetches the endpoint once and parses the count. Refused
// connections, timeouts, non-2xx statuses, redirects to another host,
// oversized and unparsable bodies are all errors: to drainctl, each means
// the app cannot answer. --request-timeout bounds the request from the
// connection to the body's last byte; parsing, bounded by
// --max-body-bytes, follows.
func (c *Client) Count(ctx context.Context) (Reading, error) {
	body, err := c.fetch(ctx)
	if err != nil {
		return Reading{}, err
	}
	return Parse(body, c.src)
}

func (c *Client) fetch(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.src.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "text/plain, application/json;q=0.9, */*;q=0.5")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var redirect *crossOriginRedirect
		if errors.As(err, &redirect) {
			return nil, fmt.Errorf("--%s %s: %w", api.ParamURL, c.src.URL, redirect)
		}
		return nil, fmt.Errorf("GET %s: %w", c.src.URL, c.timedOut(err))
	}
	defer resp.Body.Close()
	limit := c.src.MaxBodyBytes
	if limit <= 0 {
		limit = api.DefaultMaxBodyBytes
	}
	// One byte past the limit tells a body of exactly the limit from a
	// larger one; at the largest int64 no body can be larger, and limit+1
	// would wrap to a negative limit that reads nothing.
	read := limit
	if read < math.MaxInt64 {
		read++
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, read))
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading body: %w", c.src.URL, c.timedOut(err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("GET %s: status %s", c.src.URL, resp.Status)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("GET %s: body larger than --%s %d", c.src.URL, api.ParamMaxBodyBytes, limit)
	}
	return body, nil
}

// timedOut names --request-timeout in err when it is a timeout.
func (c *Client) timedOut(err error) error {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("no complete answer within --%s %s: %w", api.ParamRequestTimeout, c.timeout, err)
	}
	return err
}

// maxCredentialFile bounds --basic-auth-file, --bearer-token-file and
// --header-file: a secret or a few headers, read whole at start. A larger
// file (a device, a log named by mistake) is refused rather than read.
const maxCredentialFile = 64 << 10

func readCredentialFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, withoutPath(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCredentialFile+1))
	if err != nil {
		return nil, withoutPath(err)
	}
	if len(b) > maxCredentialFile {
		return nil, fmt.Errorf("larger than %d bytes", maxCredentialFile)
	}
	return b, nil
}

// withoutPath drops the path of a *fs.PathError: the callers name it.
func withoutPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// credentials builds the request headers from the credential sources.
func credentials(src params.Source, readFile func(string) ([]byte, error), lookupEnv func(string) (string, bool)) (http.Header, error) {
	h := http.Header{}
	secret := func(file, env, fileFlag, envFlag string) (string, error) {
		switch {
		case file != "":
			b, err := readFile(file)
			if err != nil {
				return "", fmt.Errorf("--%s %s: %w", fileFlag, file, err)
			}
			return strings.TrimRight(string(b), "\r\n"), nil
		case env != "":
			v, ok := lookupEnv(env)
			if !ok {
				return "", fmt.Errorf("--%s: environment variable %s is not set", envFlag, env)
			}
			return v, nil
		}
		return "", nil
	}
	basic, err := secret(src.BasicAuthFile, src.BasicAuthEnv, api.ParamBasicAuthFile, api.ParamBasicAuthEnv)
	if err != nil {
		return nil, err
	}
	if basic != "" {
		if !strings.Contains(basic, ":") {
			return nil, errors.New("basic-auth credentials must be user:password")
		}
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(basic)))
	}
	token, err := secret(src.BearerTokenFile, src.BearerTokenEnv, api.ParamBearerTokenFile, api.ParamBearerTokenEnv)
	if err != nil {
		return nil, err
	}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	if src.HeaderFile != "" {
		b, err := readFile(src.HeaderFile)
		if err != nil {
			return nil, fmt.Errorf("--%s %s: %w", api.ParamHeaderFile, src.HeaderFile, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		// A line may be as long as the file: bufio's default of 64 KiB
		// would end the scan early, and drop the headers after it.
		sc.Buffer(make([]byte, 0, 4096), len(b)+1)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, value, ok := strings.Cut(line, ":")
			name = strings.TrimSpace(name)
			if !ok || name == "" || strings.ContainsAny(name, " \t") {
				return nil, fmt.Errorf("--%s %s line %d: want 'Name: value'", api.ParamHeaderFile, src.HeaderFile, n)
			}
			h.Add(name, strings.TrimSpace(value))
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("--%s %s: %w", api.ParamHeaderFile, src.HeaderFile, err)
		}
	}
	return h, nil
}
