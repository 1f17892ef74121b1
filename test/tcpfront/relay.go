package tcpfront

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// Relay forwards every connection it accepts to one target, and can be
// cut as a network partition cuts a path: while cut, no byte goes either
// way (what was sent waits, as packets a partition drops are sent again)
// and connections stay open; once healed, what waited flows on. A
// partition shorter than the peers' own timeouts looks like that to
// them: a watch that stalls, then goes on.
type Relay struct {
	ln              net.Listener
	network, target string

	mu       sync.Mutex
	open     chan struct{} // closed while traffic flows
	conns    map[net.Conn]bool
	accepted int
	wg       sync.WaitGroup
}

// StartRelay listens on a free port of 127.0.0.1 and relays to target
// (host:port).
func StartRelay(target string) (*Relay, error) {
	return StartRelayTo("tcp", target)
}

// StartRelayTo listens on a free port of 127.0.0.1 and relays to target
// on network ("tcp" host:port, or "unix" and a socket's path).
func StartRelayTo(network, target string) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpfront relay: %w", err)
	}
	r := &Relay{ln: ln, network: network, target: target, open: make(chan struct{}), conns: map[net.Conn]bool{}}
	close(r.open)
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is where clients connect (host:port).
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Accepted is how many connections the relay has accepted so far.
func (r *Relay) Accepted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted
}

// Cut stops every byte until Heal.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.open:
		r.open = make(chan struct{})
	default: // already cut
	}
}

// Heal lets traffic flow again.
func (r *Relay) Heal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.open:
	default:
		close(r.open)
	}
}

// Close stops listening, closes every connection and waits for them.
func (r *Relay) Close() {
	_ = r.ln.Close()
	r.Heal()
	r.mu.Lock()
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *Relay) gate() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open
}

func (r *Relay) track(c net.Conn, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.conns[c] = true
	} else {
		delete(r.conns, c)
	}
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		r.mu.Lock()
		r.accepted++
		r.mu.Unlock()
		r.wg.Add(1)
		go r.serve(c)
	}
}

func (r *Relay) serve(c net.Conn) {
	defer r.wg.Done()
	defer c.Close()
	r.track(c, true)
	defer r.track(c, false)
	up, err := net.Dial(r.network, r.target)
	if err != nil {
		return
	}
	defer up.Close()
	r.track(up, true)
	defer r.track(up, false)
	done := make(chan struct{}, 2)
	go r.pipe(up, c, done)
	go r.pipe(c, up, done)
	<-done
	// One side ended: end the other too (a reset, as a proxy does).
	_ = c.Close()
	_ = up.Close()
	<-done
}

// pipe copies src to dst, each chunk only while the relay is not cut.
func (r *Relay) pipe(dst, src net.Conn, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-r.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or a closed connection: either ends the relay
			return
		}
	}
}
