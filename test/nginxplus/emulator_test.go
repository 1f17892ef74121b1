package nginxplus

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nginx/nginx-plus-go-client/v3/client"
	"k8s.io/utils/ptr"

	"github.com/stickydrain/stickydrain/test/must"
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
	must.OK(t, c.AddHTTPServer(ctx, "shop", client.UpstreamServer{Server: "198.18.0.2:8080"}))
	servers, err := c.GetHTTPServers(ctx, "shop")
	must.OK(t, err)
	if len(servers) != 2 || servers[1].ID != 1 || servers[1].Server != "198.18.0.2:8080" || *servers[1].Weight != 1 || servers[1].FailTimeout != "10s" {
		t.Fatalf("servers %+v", servers)
	}
	// drain, as the controller sends it.
	must.OK(t, c.UpdateHTTPServer(ctx, "shop", client.UpstreamServer{ID: 1, Server: "198.18.0.2:8080", Drain: true}))
	ups, err := c.GetUpstreams(ctx)
	must.OK(t, err)
	var states []string
	for _, p := range (*ups)["shop"].Peers {
		states = append(states, p.State)
	}
	if diff := cmp.Diff([]string{"up", "draining"}, states); diff != "" {
		t.Errorf("peer states (-want +got):\n%s", diff)
	}
	must.OK(t, c.UpdateHTTPServer(ctx, "shop", client.UpstreamServer{ID: 0, Server: "198.18.0.1:8080", Down: ptr.To(true)}))
	if s := e.Servers(false, "shop"); !s[0].Down {
		t.Error("down not applied")
	}
	// IDs are never reused.
	must.OK(t, c.DeleteHTTPServer(ctx, "shop", "198.18.0.2:8080"))
	must.OK(t, c.AddHTTPServer(ctx, "shop", client.UpstreamServer{Server: "198.18.0.3:8080"}))
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
	must.OK(t, c.AddStreamServer(ctx, "tcp", client.StreamUpstreamServer{Server: "198.18.0.9:80", Down: ptr.To(true)}))
	e.FailNext(1, 502)
	if _, err := c.GetHTTPServers(ctx, "shop"); err == nil {
		t.Error("an injected fault did not fail the request")
	}
}

func TestReloadAndRestartKeepOnlyWhatAStateFileKeeps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		state   bool
		restart bool
		want    []string // servers after, "addr drain"
		gen     func(before uint64) uint64
	}{
		{"a restart without state loses runtime changes", false, true, []string{"198.18.0.1:8080 false"}, func(uint64) uint64 { return 1 }},
		{"a reload without state loses runtime changes", false, false, []string{"198.18.0.1:8080 false"}, func(b uint64) uint64 { return b + 1 }},
		{"a restart with state keeps every server and its drain", true, true, []string{"198.18.0.1:8080 false", "198.18.0.2:8080 true"}, func(uint64) uint64 { return 1 }},
		{"a reload with state keeps every server and its drain", true, false, []string{"198.18.0.1:8080 false", "198.18.0.2:8080 true"}, func(b uint64) uint64 { return b + 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, c := start(t, Options{Upstreams: []Upstream{{Name: "shop", Zone: "shop", State: tc.state, Servers: []Server{{Server: "198.18.0.1:8080"}}}}})
			ctx := context.Background()
			must.OK(t, c.AddHTTPServer(ctx, "shop", client.UpstreamServer{Server: "198.18.0.2:8080"}))
			must.OK(t, c.AddHTTPServer(ctx, "shop", client.UpstreamServer{Server: "198.18.0.3:8080"}))
			e.Reload() // generation 2
			if tc.state {
				servers, err := c.GetHTTPServers(ctx, "shop")
				must.OK(t, err)
				for _, s := range servers {
					switch s.Server {
					case "198.18.0.2:8080":
						must.OK(t, c.UpdateHTTPServer(ctx, "shop", client.UpstreamServer{ID: s.ID, Server: s.Server, Drain: true}))
					case "198.18.0.3:8080":
						must.OK(t, c.DeleteHTTPServer(ctx, "shop", s.Server))
					}
				}
			}
			before, err := c.GetNginxInfo(ctx)
			must.OK(t, err)
			if tc.restart {
				e.Restart()
			} else {
				e.Reload()
			}
			after, err := c.GetNginxInfo(ctx)
			must.OK(t, err)
			if want := tc.gen(before.Generation); after.Generation != want || after.LoadTimestamp == before.LoadTimestamp {
				t.Errorf("generation %d → %d (want %d), load_timestamp %s → %s", before.Generation, after.Generation, want, before.LoadTimestamp, after.LoadTimestamp)
			}
			servers, err := c.GetHTTPServers(ctx, "shop")
			must.OK(t, err)
			var got []string
			for _, s := range servers {
				got = append(got, fmt.Sprintf("%s %v", s.Server, s.Drain))
			}
			sort.Strings(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("servers after (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseUpstreamFlag(t *testing.T) {
	name, s, err := ParseUpstreamFlag("legacy=127.0.0.1:9001 weight=2 max_fails=3 drain", false)
	must.OK(t, err)
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
