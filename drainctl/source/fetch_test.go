package source

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
)

// TestRedirects: the app may redirect the count URL on its own origin
// (scheme, host and port), but a redirect elsewhere is refused before
// anything reaches the other host: Go's client keeps every header but
// Authorization and Cookie on a cross-host redirect, and --header-file's
// headers are credentials too.
func TestRedirects(t *testing.T) {
	var mu sync.Mutex
	var leaked []http.Header
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		leaked = append(leaked, r.Header.Clone())
		mu.Unlock()
		fmt.Fprint(w, "0")
	}))
	defer other.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/count", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Tenant") != "blue" || r.Header.Get("Authorization") == "" {
			http.Error(w, "no credentials", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "3")
	})
	mux.Handle("/moved", http.RedirectHandler("/count", http.StatusFound))
	mux.Handle("/away", http.RedirectHandler(other.URL+"/count", http.StatusFound))
	mux.Handle("/away-permanently", http.RedirectHandler(other.URL+"/count", http.StatusPermanentRedirect))
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	dir := t.TempDir()
	headers := filepath.Join(dir, "headers")
	token := filepath.Join(dir, "token")
	for p, content := range map[string]string{headers: "X-Tenant: blue\n", token: "tok-123\n"} {
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		name   string
		path   string
		want   Reading
		errHas string
	}{
		{name: "follows a redirect on the same host, with the credentials", path: "/moved", want: Reading{3, api.FormatNumber}},
		{name: "refuses a redirect to another host", path: "/away", errHas: "--url " + srv.URL + "/away: redirect to " + other.URL + "/count refused: drainctl follows redirects only on the same host"},
		{name: "refuses a permanent redirect to another host", path: "/away-permanently", errHas: "redirect to " + other.URL + "/count refused"},
		{name: "stops a redirect loop", path: "/loop", errHas: "stopped after 10 redirects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(params.Source{URL: srv.URL + tt.path, Format: api.FormatNumber, RequestTimeout: 2 * time.Second,
				HeaderFile: headers, BearerTokenFile: token})
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Count(context.Background())
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("Count() = %v, %v; want an error containing %q", got, err, tt.errHas)
				}
			} else if err != nil {
				t.Fatalf("Count(): %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Count() (-want +got):\n%s", diff)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for _, h := range leaked {
		t.Errorf("the other host got a request, with X-Tenant %q and Authorization %q", h.Get("X-Tenant"), h.Get("Authorization"))
	}
}

// TestRequestTimeoutCoversTheBody: --request-timeout bounds the whole
// poll, the body's bytes included, not only the wait for the headers.
func TestRequestTimeoutCoversTheBody(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusOK)
		for range 1000 {
			if _, err := w.Write([]byte("1")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-stop:
				return
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	defer srv.Close()
	defer close(stop)

	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"cuts a trickling body at --request-timeout", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"cuts a trickling body at --request-timeout within a longer deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Minute)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(params.Source{URL: srv.URL, Format: api.FormatNumber, RequestTimeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			got, err := c.Count(ctx)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), "--request-timeout 300ms") {
				t.Errorf("Count() = %v, %v; want an error naming --request-timeout 300ms", got, err)
			}
			if took > 3*time.Second {
				t.Errorf("Count() took %v; want about --request-timeout 300ms (the body trickles for 20s)", took)
			}
		})
	}
}

// TestMaxBodyBytes: the limit holds at each size, up to the largest a
// flag can give (math.MaxInt64: no limit, in effect).
func TestMaxBodyBytes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "12345")
	}))
	defer srv.Close()
	tests := []struct {
		name   string
		limit  int64
		errHas string
	}{
		{name: "reads a body of exactly the limit", limit: 5},
		{name: "refuses a body one byte over the limit", limit: 4, errHas: "body larger than --max-body-bytes 4"},
		{name: "reads a body under the largest limit", limit: math.MaxInt64},
		{name: "reads a body under the largest limit but one", limit: math.MaxInt64 - 1},
		{name: "takes no limit as the default", limit: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(params.Source{URL: srv.URL, Format: api.FormatNumber, RequestTimeout: 2 * time.Second, MaxBodyBytes: tt.limit})
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Count(context.Background())
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("Count() = %v, %v; want an error containing %q", got, err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("Count(): %v", err)
			}
			if diff := cmp.Diff(Reading{12345, api.FormatNumber}, got); diff != "" {
				t.Errorf("Count() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCredentialFilesAreBounded: a credential or header file larger than
// maxCredentialFile (a device, a log file named by mistake) is refused at
// start, naming the flag and the bound, rather than read whole.
func TestCredentialFilesAreBounded(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bound := fmt.Sprint(maxCredentialFile)
	longLine := "X-Big: " + strings.Repeat("a", maxCredentialFile-len("X-Big: "))
	tests := []struct {
		name    string
		src     params.Source
		errHas  string
		wantBig int // the length of X-Big received; 0: not checked
	}{
		{name: "refuses a header file over the bound", src: params.Source{HeaderFile: write("headers", strings.Repeat("X-A: a\n", maxCredentialFile/7+1))}, errHas: "--header-file " + filepath.Join(dir, "headers") + ": larger than " + bound + " bytes"},
		{name: "refuses a bearer token file over the bound", src: params.Source{BearerTokenFile: write("token", strings.Repeat("t", maxCredentialFile+1))}, errHas: "--bearer-token-file " + filepath.Join(dir, "token") + ": larger than " + bound + " bytes"},
		{name: "refuses a basic-auth file over the bound", src: params.Source{BasicAuthFile: write("basic", "u:"+strings.Repeat("p", maxCredentialFile))}, errHas: "--basic-auth-file " + filepath.Join(dir, "basic") + ": larger than " + bound + " bytes"},
		{name: "refuses an endless file", src: params.Source{HeaderFile: "/dev/zero"}, errHas: "--header-file /dev/zero: larger than " + bound + " bytes"},
		{name: "sends a header line as long as the bound", src: params.Source{HeaderFile: write("long", longLine)}, wantBig: len(longLine) - len("X-Big: ")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got int
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = len(r.Header.Get("X-Big"))
				fmt.Fprint(w, "0")
			}))
			defer srv.Close()
			src := tt.src
			src.URL, src.Format, src.RequestTimeout = srv.URL, api.FormatNumber, 2*time.Second
			c, err := New(src)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("New() error = %v, want one containing %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Count(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got != tt.wantBig {
				t.Errorf("X-Big arrived with %d bytes, want %d", got, tt.wantBig)
			}
		})
	}
}
