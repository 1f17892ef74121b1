package reconcile

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/drivers"
)

func testConfig(t testing.TB) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte("loadBalancers: [{name: edge, type: haproxy, instances: {static: [\"tcp://h:1\"]}}, {name: plus, type: nginx-plus, instances: {static: [\"http://h:1/api\"]}}]"), drivers.New())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseUpstreams(t *testing.T) {
	cfg := testConfig(t)
	got, err := ParseUpstreams(" edge/shop, plus/shop_v2.1 ,", cfg)
	if err != nil || len(got) != 2 || got[0] != (upstreamRef{"edge", "shop"}) || got[1] != (upstreamRef{"plus", "shop_v2.1"}) {
		t.Fatalf("got %v, %v", got, err)
	}
	for v, want := range map[string]string{
		"":                                 "is empty",
		"edge":                             `"edge" is not <lb>/<upstream>`,
		"edge/":                            `"edge/" is not <lb>/<upstream>`,
		"edge/shop;evil":                   `"edge/shop;evil" is not <lb>/<upstream>`,
		"edge/shop\nset map":               "is not <lb>/<upstream>",
		"edge/a b":                         "is not <lb>/<upstream>",
		"edge/" + strings.Repeat("x", 101): "is not <lb>/<upstream>",
		"f5/shop":                          `no load balancer "f5"`,
	} {
		if _, err := ParseUpstreams(v, cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseUpstreams(%q) = %v, want an error containing %q", v, err, want)
		}
	}
}

// An upstreams annotation is read as its distinct entries, at most
// api.MaxUpstreams of them: one Service repeating its own upstream
// hundreds of times opened as many Runtime API connections at once on
// main, and thousands of distinct entries cost a pass per entry.
func TestParseUpstreamsIsBounded(t *testing.T) {
	cfg := testConfig(t)
	got, err := ParseUpstreams(strings.TrimSuffix(strings.Repeat("edge/shop, plus/shop,", 5000), ","), cfg)
	if err != nil || len(got) != 2 {
		t.Fatalf("10,000 repetitions of two entries: %v, %v; want the two", got, err)
	}
	var many []string
	for i := range api.MaxUpstreams + 1 {
		many = append(many, fmt.Sprintf("edge/u%d", i))
	}
	if _, err := ParseUpstreams(strings.Join(many[:api.MaxUpstreams], ","), cfg); err != nil {
		t.Errorf("%d distinct upstreams: %v", api.MaxUpstreams, err)
	}
	_, err = ParseUpstreams(strings.Join(many, ","), cfg)
	if err == nil || !strings.Contains(err.Error(), "want at most 32") {
		t.Errorf("%d distinct upstreams: %v; want the bound named", api.MaxUpstreams+1, err)
	}
	if keys := upstreamKeys(strings.Repeat("edge/a,", 10000) + strings.Join(many, ",")); len(keys) > api.MaxUpstreams+1 {
		t.Errorf("the cache's index keys of one Service: %d; want at most %d", len(keys), api.MaxUpstreams+1)
	}
}

// FuzzParseUpstreams: no annotation makes the parser panic, and what it
// accepts names a configured load balancer and an upstream name that is
// safe in a Runtime API command and an Event action.
func FuzzParseUpstreams(f *testing.F) {
	cfg := testConfig(f)
	for _, s := range []string{"edge/shop", "edge/shop,plus/shop", " edge/a , ", "edge/a;b", "x/y/z", "edge/\x00",
		strings.Repeat("edge/a,", 5000), strings.Repeat("edge/a,edge/b,edge/c,edge/d,edge/e,edge/f,edge/g,edge/h,", 5)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ups, err := ParseUpstreams(v, cfg)
		if err != nil {
			return
		}
		if len(ups) > api.MaxUpstreams {
			t.Fatalf("accepted %d upstreams; the bound is %d", len(ups), api.MaxUpstreams)
		}
		for i, u := range ups {
			if slices.Contains(ups[:i], u) {
				t.Fatalf("%v twice in %v", u, ups)
			}
			if (u.LB != "edge" && u.LB != "plus") || !config.UpstreamNameRE.MatchString(u.Upstream) || len(u.Upstream) > api.MaxUpstreamName {
				t.Fatalf("accepted %q as %v", v, u)
			}
			if a := action("Withdraw", u.String()); len(a) > 128 {
				t.Fatalf("action %q is longer than 128", a)
			}
		}
	})
}
