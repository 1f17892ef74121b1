package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/drainctl/drain"
)

// TestRunBefore: the pod's own preStop command runs to its end, whatever
// it prints and whatever it leaves behind, and drainctl keeps a bounded
// part of its output for the log.
func TestRunBefore(t *testing.T) {
	tests := []struct {
		name    string
		argv    []string
		logHas  []string
		maxLog  int
		maxTook time.Duration
	}{
		{
			name:    "logs a short output whole",
			argv:    []string{"/bin/sh", "-c", "echo stopping; echo done >&2"},
			logHas:  []string{"original preStop output: stopping\ndone"},
			maxLog:  4 << 10,
			maxTook: 10 * time.Second,
		},
		{
			name:    "keeps the first 64 KiB of a flood of output and says how much it dropped",
			argv:    []string{"/bin/sh", "-c", "yes | head -c 10000000; echo fine >&2"},
			logHas:  []string{"original preStop output (the first 65536 of 10000005 bytes):", "y\ny\n"},
			maxLog:  maxHookOutput + 4<<10,
			maxTook: 30 * time.Second,
		},
		{
			name:    "does not wait for a background process that holds the output open",
			argv:    []string{"/bin/sh", "-c", "echo started; sleep 20 &"},
			logHas:  []string{"original preStop output: started", "left its output open"},
			maxLog:  4 << 10,
			maxTook: 10 * time.Second,
		},
		{
			name:    "logs a failure and goes on",
			argv:    []string{"/bin/sh", "-c", "echo broken; exit 3"},
			logHas:  []string{"original preStop output: broken", "original preStop command failed: exit status 3; draining anyway"},
			maxLog:  4 << 10,
			maxTook: 10 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			start := time.Now()
			runBefore(context.Background(), tt.argv, drain.NewLogger(&log, false))
			if took := time.Since(start); took > tt.maxTook {
				t.Errorf("runBefore took %v, want at most %v", took, tt.maxTook)
			}
			if log.Len() > tt.maxLog {
				t.Errorf("the log holds %d bytes, want at most %d", log.Len(), tt.maxLog)
			}
			got := log.String()
			for _, want := range tt.logHas {
				if !strings.Contains(got, want) {
					t.Errorf("log lacks %q:\n%.2000s", want, got)
				}
			}
		})
	}
}

// TestPreHTTPGet: the pod's own httpGet hook is called as the kubelet
// calls it: a redirect on the same host is followed, one to another host
// is not (the kubelet's lifecycle client takes the redirect as the
// answer), so that the hook's headers reach no other host.
func TestPreHTTPGet(t *testing.T) {
	var mu sync.Mutex
	var got []string
	record := func(who string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = append(got, who+" "+r.URL.Path+" X-Drain="+r.Header.Get("X-Drain"))
			mu.Unlock()
			fmt.Fprint(w, "ok")
		}
	}
	other := httptest.NewServer(record("other"))
	defer other.Close()
	mux := http.NewServeMux()
	mux.Handle("/pre-stop", record("app"))
	mux.Handle("/moved", http.RedirectHandler("/pre-stop", http.StatusFound))
	mux.Handle("/away", http.RedirectHandler(other.URL+"/pre-stop", http.StatusFound))
	app := httptest.NewServer(mux)
	defer app.Close()
	// Another host name for the same server: the kubelet's redirect check
	// compares host names.
	appByName := strings.Replace(app.URL, "127.0.0.1", "localhost", 1)

	tests := []struct {
		name   string
		url    string
		want   []string
		logHas string
	}{
		{"follows a redirect on the same host with the headers", appByName + "/moved", []string{"app /pre-stop X-Drain=yes"}, "answered 200 OK"},
		{"does not follow a redirect to another host", appByName + "/away", nil, "answered 302 Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			got = nil
			mu.Unlock()
			var log bytes.Buffer
			preHTTPGet(context.Background(), tt.url, []string{"X-Drain: yes"}, drain.NewLogger(&log, false))
			mu.Lock()
			defer mu.Unlock()
			if strings.Join(got, "; ") != strings.Join(tt.want, "; ") {
				t.Errorf("requests %q, want %q", got, tt.want)
			}
			if !strings.Contains(log.String(), tt.logHas) {
				t.Errorf("log lacks %q:\n%s", tt.logHas, log.String())
			}
		})
	}
}
