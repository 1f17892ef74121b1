package tcpfront

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func backend(t *testing.T, name string, ready *atomic.Bool) (*httptest.Server, Target) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ready" && !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, name)
	}))
	t.Cleanup(srv.Close)
	return srv, Target{Addr: strings.TrimPrefix(srv.URL, "http://"), Ready: srv.URL + "/ready"}
}

func who(t *testing.T, f *Front) string {
	t.Helper()
	req, _ := http.NewRequest("GET", f.URL()+"/", nil)
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestFrontSendsOnlyToReadyBackendsAndRetriesAFailedConnect(t *testing.T) {
	var aReady, bReady atomic.Bool
	aReady.Store(true)
	_, a := backend(t, "a", &aReady)
	bSrv, b := backend(t, "b", &bReady)
	f, err := Start([]Target{a, b}, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := 0; i < 6; i++ {
		if got := who(t, f); got != "a" {
			t.Fatalf("request %d went to %q while b is not ready", i, got)
		}
	}
	bReady.Store(true)
	time.Sleep(100 * time.Millisecond)
	seen := map[string]int{}
	for i := 0; i < 6; i++ {
		seen[who(t, f)]++
	}
	if seen["a"] == 0 || seen["b"] == 0 {
		t.Fatalf("with both ready, requests went %v; want both", seen)
	}
	// b dies between two checks: its connects fail and go to a.
	bSrv.Close()
	for i := 0; i < 6; i++ {
		if got := who(t, f); got != "a" {
			t.Fatalf("request %d after b died went to %q", i, got)
		}
	}
}

// TestTargetOfNamesTheBackendThatServed: the client's side of each
// connection names the backend the front chose for it.
func TestTargetOfNamesTheBackendThatServed(t *testing.T) {
	var aReady, bReady atomic.Bool
	aReady.Store(true)
	bReady.Store(true)
	_, a := backend(t, "a", &aReady)
	_, b := backend(t, "b", &bReady)
	f, err := Start([]Target{a, b}, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := map[string]string{"a": a.Addr, "b": b.Addr}
	seen := map[string]bool{}
	for i := 0; i < 8; i++ {
		var local string
		req, _ := http.NewRequest("GET", f.URL()+"/", nil)
		req.Close = true
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) { local = ci.Conn.LocalAddr().String() },
		}))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got, ok := f.TargetOf(local)
		if !ok || got != addr[string(body)] {
			t.Fatalf("request %d served by %s (%s); TargetOf(%s) = %q, %v", i, body, addr[string(body)], local, got, ok)
		}
		seen[string(body)] = true
	}
	if len(seen) != 2 {
		t.Fatalf("requests went only to %v; want both backends", seen)
	}
	if _, ok := f.TargetOf("127.0.0.1:1"); ok {
		t.Fatal("TargetOf names a backend for a connection the front never had")
	}
}
