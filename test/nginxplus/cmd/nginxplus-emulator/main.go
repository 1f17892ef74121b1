// Command nginxplus-emulator serves stickydrain's NGINX Plus API emulator
// (an emulator: not NGINX Plus), for trying the controller without NGINX
// Plus:
//
//	go run ./test/nginxplus/cmd/nginxplus-emulator --listen 127.0.0.1:8080 \
//	    --http-upstream 'shop' --http-upstream 'legacy=127.0.0.1:9001 drain' --stream-upstream tcp
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	flag "github.com/spf13/pflag" // GNU-style flags, as every stickydrain binary

	"github.com/stickydrain/stickydrain/test/nginxplus"
)

type list []string

func (l *list) String() string     { return fmt.Sprint(*l) }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }
func (l *list) Type() string       { return "upstream" }

func main() {
	var httpUps, streamUps list
	listen := flag.String("listen", "127.0.0.1:8080", "`address` to serve the API on (under /api/)")
	flag.Var(&httpUps, "http-upstream", "an http upstream, `NAME[=SERVER[ PARAM...]]`; repeat for more servers or upstreams")
	flag.Var(&streamUps, "stream-upstream", "a stream upstream, `NAME[=SERVER[ PARAM...]]`")
	readOnly := flag.Bool("read-only", false, "serve as `api write=off`: writes answer 405 MethodDisabled")
	maxVersion := flag.Int("max-version", 9, "newest API `version` served")
	flag.Parse()

	byName := map[string]*nginxplus.Upstream{}
	var order []string
	add := func(values []string, stream bool) {
		for _, v := range values {
			name, srv, err := nginxplus.ParseUpstreamFlag(v, stream)
			if err != nil {
				fmt.Fprintln(os.Stderr, "nginxplus-emulator:", err)
				os.Exit(2)
			}
			key := fmt.Sprintf("%v/%s", stream, name)
			u := byName[key]
			if u == nil {
				u = &nginxplus.Upstream{Name: name, Zone: name, Stream: stream}
				byName[key] = u
				order = append(order, key)
			}
			if srv != nil {
				u.Servers = append(u.Servers, *srv)
			}
		}
	}
	add(httpUps, false)
	add(streamUps, true)
	var ups []nginxplus.Upstream
	for _, k := range order {
		ups = append(ups, *byName[k])
	}
	e := nginxplus.New(nginxplus.Options{Upstreams: ups, ReadOnly: *readOnly, MaxVersion: *maxVersion})
	log.Printf("NGINX Plus API emulator (not NGINX Plus) on http://%s/api/ with %d upstreams", *listen, len(ups))
	srv := &http.Server{Addr: *listen, Handler: e.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
