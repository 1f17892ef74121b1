// Package control is the operator's way into a running `drainctl wait`:
// a Linux abstract unix socket (api.ControlSocket) in the pod's network
// namespace, answering one request per connection — release, or a shorter
// max-wait. The kubelet stops refreshing a terminating pod's downward-API
// files (its pod worker is busy running the preStop hook), so the
// annotations cannot reach a drain under way; `kubectl exec POD --
// drainctl release` can.
//
// Standard library only: drainctl imports it.
package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stickydrain/stickydrain/api"
)

// Server holds what operators asked of the drain.
type Server struct {
	ln net.Listener

	mu       sync.Mutex
	released bool
	maxWait  time.Duration // 0: not asked
	current  time.Duration // the max-wait the drain runs with, for refusals
}

// Listen starts answering on addr (api.ControlSocket in drainctl) until
// ctx ends; current is the drain's max-wait.
func Listen(ctx context.Context, addr string, current time.Duration) (*Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", addr)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", addr, err)
	}
	s := &Server{ln: ln, current: current}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	go s.serve()
	return s, nil
}

func (s *Server) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go s.answer(c)
	}
}

func (s *Server) answer(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := readLine(c)
	if errors.Is(err, errLineTooLong) {
		fmt.Fprintf(c, "error: request longer than %d bytes\n", maxLine)
		return
	}
	if err != nil && line == "" {
		return
	}
	fmt.Fprintln(c, s.Apply(strings.TrimSpace(line)))
}

// maxLine bounds a line on the control socket, request or answer: a word
// and a duration, or one sentence. Anyone in the pod's network namespace
// can connect; a longer line is refused, never read on, and never echoed.
const maxLine = 1024

var errLineTooLong = fmt.Errorf("line longer than %d bytes", maxLine)

// readLine reads one line of at most maxLine bytes from r, without its
// newline. A longer one returns its first maxLine bytes and
// errLineTooLong; a last line without a newline returns it and the read's
// error (io.EOF).
func readLine(r io.Reader) (string, error) {
	line, err := bufio.NewReaderSize(io.LimitReader(r, maxLine+1), maxLine+1).ReadString('\n')
	if text, ok := strings.CutSuffix(line, "\n"); ok {
		return text, nil
	}
	if len(line) > maxLine {
		return line[:maxLine], errLineTooLong
	}
	return line, err
}

// Apply carries out one request and returns the answer line.
func (s *Server) Apply(req string) string {
	cmd, arg, _ := strings.Cut(req, " ")
	s.mu.Lock()
	defer s.mu.Unlock()
	switch cmd {
	case api.ControlRelease:
		s.released = true
		return "ok: released"
	case api.ControlMaxWait:
		d, err := time.ParseDuration(strings.TrimSpace(arg))
		switch {
		case err != nil || d <= 0:
			return fmt.Sprintf("error: max-wait %q: want a positive Go duration such as 30m", arg)
		case d >= s.current:
			return fmt.Sprintf("error: max-wait %s is not shorter than the drain's %s", d, s.current)
		}
		s.maxWait, s.current = d, d
		return "ok: max-wait " + d.String()
	}
	return fmt.Sprintf("error: unknown request %q: want %s or %s DURATION", req, api.ControlRelease, api.ControlMaxWait)
}

// Asked returns what operators asked so far: release, and a shorter
// max-wait (0 when none).
func (s *Server) Asked() (released bool, maxWait time.Duration) {
	if s == nil {
		return false, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.released, s.maxWait
}

// ErrNoDrain is Send's error when nothing listens: no drain runs in the
// pod.
var ErrNoDrain = errors.New("no drain runs in this pod (nothing listens on " + api.ControlSocket + ")")

// Send sends one request to the drain listening on addr and returns its
// answer; an answer that is not "ok…" is an error.
func Send(ctx context.Context, addr, req string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return "", ErrNoDrain
		}
		return "", fmt.Errorf("control socket %s: %w", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(c, req); err != nil {
		return "", fmt.Errorf("control socket %s: %w", addr, err)
	}
	answer, err := readLine(c)
	answer = strings.TrimSpace(answer)
	if err != nil && !errors.Is(err, errLineTooLong) && answer == "" {
		return "", fmt.Errorf("control socket %s: %w", addr, err)
	}
	if !strings.HasPrefix(answer, "ok") {
		return answer, errors.New(strings.TrimPrefix(answer, "error: "))
	}
	return answer, nil
}
