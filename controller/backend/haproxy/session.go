package haproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"
)

// dial opens a connection to the instance's Runtime API (TLS with a client
// certificate when WithTLS).
func (h *Instance) dial(ctx context.Context) (net.Conn, error) {
	var dialer interface {
		DialContext(context.Context, string, string) (net.Conn, error)
	} = &net.Dialer{Timeout: h.timeout}
	if h.tls != nil {
		cfg, err := h.tlsConfig()
		if err != nil {
			return nil, fmt.Errorf("haproxy %s: %w", h.id, err)
		}
		dialer = &tls.Dialer{NetDialer: &net.Dialer{Timeout: h.timeout}, Config: cfg}
	}
	conn, err := dialer.DialContext(ctx, h.network, h.address)
	if err != nil {
		return nil, fmt.Errorf("haproxy %s: %w", h.id, err)
	}
	return conn, nil
}

// session is one interactive Runtime API connection (the CLI's `prompt`
// mode): a pass reads a backend and sends its changes over it, one
// request after another. Both reach the same process — the connection
// cannot move to a new worker after a reload — and a pass costs one
// connection, not one per request.
type session struct {
	id      string
	timeout time.Duration
	conn    net.Conn
	r       *bufio.Reader
	// unsent are commands for the next run to send first and answer
	// silently: `prompt`, so that entering interactive mode costs no
	// round trip of its own.
	unsent []string
}

// prompt ends each answer in interactive mode.
var prompt = []byte("\n> ")

// openSession connects; the first run enters interactive mode.
func (h *Instance) openSession(ctx context.Context) (*session, error) {
	conn, err := h.dial(ctx)
	if err != nil {
		return nil, err
	}
	return &session{id: h.id, timeout: h.timeout, conn: conn, r: bufio.NewReaderSize(conn, 64<<10), unsent: []string{"prompt"}}, nil
}

// close ends the session; nil is a session already closed.
func (s *session) close() {
	if s != nil {
		_ = s.conn.Close()
	}
}

// run sends the commands, one a line, and returns each one's answer. The
// session's deadline is the instance's timeout from now (or ctx's, if
// sooner), for the whole exchange.
func (s *session) run(ctx context.Context, cmds []string) ([]string, error) {
	deadline := time.Now().Add(s.timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = s.conn.SetDeadline(deadline)
	for _, c := range cmds {
		if strings.ContainsAny(c, "\n;") {
			return nil, fmt.Errorf("haproxy %s: command %q holds a line break or ';'", s.id, c)
		}
	}
	lines := append(s.unsent[:len(s.unsent):len(s.unsent)], cmds...)
	silent := len(s.unsent)
	s.unsent = nil
	if _, err := s.conn.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		return nil, fmt.Errorf("haproxy %s: sending: %w", s.id, err)
	}
	outs := make([]string, 0, len(cmds))
	for k, line := range lines {
		out, err := s.answer()
		if err != nil {
			return outs, fmt.Errorf("haproxy %s: reading the answer to %q: %w", s.id, line, err)
		}
		if k >= silent {
			outs = append(outs, out)
		}
	}
	return outs, nil
}

// answer reads one command's answer: everything up to the next prompt.
// The prompt is the last thing HAProxy writes before it reads the next
// command, so a '>' that is not the prompt's is always followed by more.
func (s *session) answer() (string, error) {
	var buf []byte
	for {
		chunk, err := s.r.ReadSlice('>')
		buf = append(buf, chunk...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err != nil:
			return "", err
		}
		// "\n>" and then a space: the prompt; the first answer of a
		// session (to "prompt") has nothing before it.
		if bytes.HasSuffix(buf, prompt[:2]) {
			next, err := s.r.Peek(1)
			if err != nil {
				return "", err
			}
			if next[0] == ' ' {
				_, _ = s.r.Discard(1)
				return strings.TrimSpace(string(buf[:len(buf)-2])), nil
			}
		}
	}
}
