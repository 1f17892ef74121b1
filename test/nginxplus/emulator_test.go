package nginxplus

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nginx/nginx-plus-go-client/v3/client"
	"k8s.io/utils/ptr"
)

// These tests drive the emulator with the real nginx-plus-go-client.

func start(t *testing.T, opts Options) (*Emulator, *client.NginxClient) {
	t.Helper()
	e := New(opts)
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	c, err := client.NewNginxClient(srv.URL+"/api", client.WithCheckAPI())
	if err != nil {
		t.Fatal(err)
	}
	return e, c
}

func code(err error) string {
	var se client.StatusError
	if errors.As(err, &se) {
		return se.Code()
	}
	return ""
}

func TestServerLifecycleWithTheRealClient(t *testing.T) {
	e, c := start(t, Options{Upstreams: []Upstream{{Name: "shop", Zone: "shop", Servers: []Server{{Server: "198.18.0.1:8080"}}}}})
	ctx := context.Background()
	must(t, c.AddHTTPServer(ctx, "shop", client.UpstreamServer{Server: "198.18.0.2:8080"}))
	servers, err := c.GetHTTPServers(ctx, "shop")
	must(t, err)
	if len(servers) != 2 || servers[1].ID != 1 || servers[1].Server != "198.18.0.2:8080" || *servers[1].Weight != 1 || servers[1].FailTimeout != "10s" {
		t.Fatalf("servers %+v", servers)
	}
	// drain, as the controller sends it.
	must(t, c.UpdateHTTPServer(ctx, "shop", client.UpstreamServer{ID: 1, Server: "198.18.0.2:8080", Drain: true}))
	ups, err := c.GetUpstreams(ctx)
	must(t, err)
	var states []string
	for _, p := range (*ups)["shop"].Peers {
		states = append(states, p.State)
	}
	if diff := cmp.Diff([]string{"up", "draining"}, states); diff != "" {
		t.Errorf("peer states (-want +got):\n%s", diff)
	}
	must(t, c.UpdateHTTPServer(ctx, "shop", client.UpstreamServer{ID: 0, Server: "198.18.0.1:8080", Down: ptr.To(true)}))
	if s := e.Servers(false, "shop"); !s[0].Down {
		t.Error("down not applied")
	}
	// IDs are never reused.
	must(t, c.DeleteHTTPServer(ctx, "shop", "198.18.0.2:8080"))
	must(t, c.AddHTTPServer(ctx, "shop", client.UpstreamServer{Server: "198.18.0.3:8080"}))
	if s := e.Servers(false, "shop"); s[len(s)-1].ID != 2 {
		t.Errorf("new server got ID %d, want 2 (1 was used)", s[len(s)-1].ID)
	}
	// The client refuses to add a server it already sees.
	if err := c.AddHTTPServer(ctx, "shop", client.UpstreamServer{Server: "198.18.0.3:8080"}); !errors.Is(err, client.ErrServerExists) {
		t.Errorf("second add: %v", err)
	}
}

func TestErrorsAsNGINXPlusAnswers(t *testing.T) {
	e, c := start(t, Options{Upstreams: []Upstream{{Name: "shop", Zone: "shop"}, {Name: "static"}, {Name: "tcp", Zone: "tcp", Stream: true}}})
	ctx := context.Background()
	if _, err := c.GetHTTPServers(ctx, "nope"); code(err) != "UpstreamNotFound" {
		t.Errorf("unknown upstream: %v", err)
	}
	if _, err := c.GetHTTPServers(ctx, "static"); code(err) != "UpstreamStatic" {
		t.Errorf("upstream without zone: %v", err)
	}
	if err := c.UpdateHTTPServer(ctx, "shop", client.UpstreamServer{ID: 7, Server: "x:1"}); code(err) != "UpstreamServerNotFound" {
		t.Errorf("unknown server: %v", err)
	}
	if err := c.AddHTTPServer(ctx, "shop", client.UpstreamServer{Server: "not an address"}); code(err) != "UpstreamBadAddress" {
		t.Errorf("bad address: %v", err)
	}
	e.SetWritable(false)
	if err := c.AddHTTPServer(ctx, "shop", client.UpstreamServer{Server: "198.18.0.9:80"}); code(err) != "MethodDisabled" {
		t.Errorf("write=off: %v", err)
	}
	e.SetWritable(true)
	// Stream servers have no drain.
	req, _ := http.NewRequest(http.MethodPost, "", strings.NewReader(`{"server":"198.18.0.9:80","drain":true}`))
	rec := httptest.NewRecorder()
	req.URL.Path = "/api/9/stream/upstreams/tcp/servers/"
	e.Handler().ServeHTTP(rec, req)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), `unknown parameter \"drain\"`) || !strings.Contains(rec.Body.String(), `"request_id"`) {
		t.Errorf("drain on a stream server: %d %s", rec.Code, rec.Body)
	}
	must(t, c.AddStreamServer(ctx, "tcp", client.StreamUpstreamServer{Server: "198.18.0.9:80", Down: ptr.To(true)}))
	e.FailNext(1, 502)
	if _, err := c.GetHTTPServers(ctx, "shop"); err == nil {
		t.Error("an injected fault did not fail the request")
	}
}

func TestRestartLosesRuntimeChanges(t *testing.T) {
	e, c := start(t, Options{Upstreams: []Upstream{{Name: "shop", Zone: "shop", Servers: []Server{{Server: "198.18.0.1:8080"}}}}})
	ctx := context.Background()
	before, err := c.GetNginxInfo(ctx)
	must(t, err)
	must(t, c.AddHTTPServer(ctx, "shop", client.UpstreamServer{Server: "198.18.0.2:8080"}))
	e.Restart()
	after, err := c.GetNginxInfo(ctx)
	must(t, err)
	if after.Generation != before.Generation+1 {
		t.Errorf("generation %d → %d, want +1", before.Generation, after.Generation)
	}
	servers, _ := c.GetHTTPServers(ctx, "shop")
	if len(servers) != 1 || servers[0].Server != "198.18.0.1:8080" {
		t.Errorf("after restart: %+v, want the configured server only", servers)
	}
}

func TestParseUpstreamFlag(t *testing.T) {
	name, s, err := ParseUpstreamFlag("legacy=127.0.0.1:9001 weight=2 max_fails=3 drain", false)
	must(t, err)
	if name != "legacy" || s.Server != "127.0.0.1:9001" || s.Weight != 2 || s.MaxFails != 3 || !s.Drain {
		t.Errorf("got %s %+v", name, s)
	}
	for _, bad := range []string{"", "=x", "a=x frobnicate", "a=x weight=-1"} {
		if _, _, err := ParseUpstreamFlag(bad, false); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, _, err := ParseUpstreamFlag("tcp=127.0.0.1:1 drain", true); err == nil {
		t.Error("drain accepted on a stream server")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
