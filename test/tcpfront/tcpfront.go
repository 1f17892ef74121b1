// Package tcpfront is a small health-checking TCP balancer for tests: it
// stands where a cloud load balancer or a Service stands in front of the
// HAProxy replicas. Each new connection goes to the next backend whose
// readiness check passes (an HTTP GET answered 200, as a readiness probe);
// a connect that fails is tried on the next healthy backend, as cloud
// load balancers do, since nothing was sent yet. With no healthy backend it
// fails open (every backend is tried), as most cloud load balancers do.
package tcpfront

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Target is one backend: where to connect and where to check readiness.
type Target struct {
	Addr  string // host:port
	Ready string // URL answering 200 when the backend may take traffic
}

// Front is a running balancer.
type Front struct {
	ln    net.Listener
	every time.Duration

	mu      sync.Mutex
	targets []Target
	healthy map[string]bool
	downs   int // MarkDown calls: a check begun before one is stale
	next    int
	open    int // connections sent with no healthy backend (failing open)
	conns   map[net.Conn]bool
	// routes are the latest connections' backends, by the client's
	// address (its side of the connection): which one served a request.
	routes     map[string]string
	routeOrder []string

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start listens on a free port of 127.0.0.1 and checks every target each
// every.
func Start(targets []Target, every time.Duration) (*Front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpfront: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Front{ln: ln, every: every, targets: targets, healthy: map[string]bool{}, conns: map[net.Conn]bool{}, routes: map[string]string{}, cancel: cancel}
	f.check(ctx)
	f.wg.Add(2)
	go f.accept()
	go f.checkLoop(ctx)
	return f, nil
}

// URL is the front's http:// base URL.
func (f *Front) URL() string { return "http://" + f.ln.Addr().String() }

// SetTargets replaces the backends (scaling up or down); a new target
// takes traffic once its check passes.
func (f *Front) SetTargets(targets []Target) {
	f.mu.Lock()
	f.targets = targets
	f.mu.Unlock()
}

// MarkDown takes a target out of rotation until its next check passes:
// what the kubelet does when a container exits (the pod turns NotReady at
// once, and a restarted container starts NotReady until its probe
// passes).
func (f *Front) MarkDown(addr string) {
	f.mu.Lock()
	f.healthy[addr] = false
	f.downs++
	f.mu.Unlock()
}

// Healthy reports each target's last check, by address.
func (f *Front) Healthy() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for _, t := range f.targets {
		out[t.Addr] = f.healthy[t.Addr]
	}
	return out
}

// FailOpens counts the connections sent while no backend was healthy.
func (f *Front) FailOpens() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open
}

// routesKept bounds how many recent connections TargetOf remembers.
const routesKept = 8192

// TargetOf is the backend the front sent the connection from client (the
// client's local address, as the client sees it) to, among the latest
// routesKept connections: which instance served a request.
func (f *Front) TargetOf(client string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.routes[client]
	return t, ok
}

func (f *Front) routed(client, target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.routes[client]; !ok {
		f.routeOrder = append(f.routeOrder, client)
	}
	f.routes[client] = target
	if len(f.routeOrder) > routesKept {
		delete(f.routes, f.routeOrder[0])
		f.routeOrder = f.routeOrder[1:]
	}
}

// Close stops the balancer and closes every connection.
func (f *Front) Close() {
	f.cancel()
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *Front) checkLoop(ctx context.Context) {
	defer f.wg.Done()
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.check(ctx)
	}
}

func (f *Front) check(ctx context.Context) {
	f.mu.Lock()
	targets := append([]Target(nil), f.targets...)
	downs := f.downs
	f.mu.Unlock()
	res := make([]bool, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = Ready(ctx, t.Ready)
		}()
	}
	wg.Wait()
	f.mu.Lock()
	if f.downs == downs {
		for i, t := range targets {
			f.healthy[t.Addr] = res[i]
		}
	}
	f.mu.Unlock()
}

// Ready reports whether url answers 200 within a second, on a new
// connection: one readiness check.
func Ready(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	req.Close = true
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// order lists the backends to try for one connection: the healthy ones,
// round-robin from the next; every one when none is healthy.
func (f *Front) order() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var healthy, all []string
	n := len(f.targets)
	for i := 0; i < n; i++ {
		t := f.targets[(f.next+i)%n]
		all = append(all, t.Addr)
		if f.healthy[t.Addr] {
			healthy = append(healthy, t.Addr)
		}
	}
	f.next++
	if len(healthy) == 0 {
		f.open++
		return all
	}
	return healthy
}

func (f *Front) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		f.wg.Add(1)
		go f.serve(c)
	}
}

func (f *Front) track(c net.Conn, on bool) {
	f.mu.Lock()
	if on {
		f.conns[c] = true
	} else {
		delete(f.conns, c)
	}
	f.mu.Unlock()
}

func (f *Front) serve(c net.Conn) {
	defer f.wg.Done()
	defer c.Close()
	f.track(c, true)
	defer f.track(c, false)
	var up net.Conn
	for _, addr := range f.order() {
		var err error
		if up, err = net.DialTimeout("tcp", addr, time.Second); err == nil {
			f.routed(c.RemoteAddr().String(), addr)
			break
		}
	}
	if up == nil {
		return
	}
	defer up.Close()
	f.track(up, true)
	defer f.track(up, false)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}
