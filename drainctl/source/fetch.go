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
	"net/http"
	"os"
	"strings"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
)

// Client fetches and parses the session count.
type Client struct {
	src  params.Source
	http *http.Client
	// header is built once: credentials come from files or environment
	// variables read at start, so a bad file fails fast as a usage error.
	header http.Header
}

// New returns a Client for src, reading its credentials now.
func New(src params.Source) (*Client, error) {
	h, err := credentials(src, os.ReadFile, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// The endpoint is the pod itself: never go through a proxy.
	tr.Proxy = nil
	if src.InsecureTLS {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for with --insecure-skip-tls-verify
	}
	return &Client{
		src:    src,
		http:   &http.Client{Transport: tr, Timeout: src.RequestTimeout},
		header: h,
	}, nil
}

// Count fetches the endpoint once and parses the count. Refused
// connections, timeouts, non-2xx statuses, oversized and unparsable bodies
// are all errors: to drainctl, each means the app cannot answer.
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
		return nil, fmt.Errorf("GET %s: %w", c.src.URL, err)
	}
	defer resp.Body.Close()
	limit := c.src.MaxBodyBytes
	if limit <= 0 {
		limit = api.DefaultMaxBodyBytes
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading body: %w", c.src.URL, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("GET %s: status %s", c.src.URL, resp.Status)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("GET %s: body larger than --%s %d", c.src.URL, api.ParamMaxBodyBytes, limit)
	}
	return body, nil
}

// credentials builds the request headers from the credential sources.
func credentials(src params.Source, readFile func(string) ([]byte, error), lookupEnv func(string) (string, bool)) (http.Header, error) {
	h := http.Header{}
	secret := func(file, env, fileFlag, envFlag string) (string, error) {
		switch {
		case file != "":
			b, err := readFile(file)
			if err != nil {
				return "", fmt.Errorf("--%s: %w", fileFlag, err)
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
			return nil, fmt.Errorf("--%s: %w", api.ParamHeaderFile, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
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
	}
	return h, nil
}
