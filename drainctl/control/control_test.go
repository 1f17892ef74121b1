package control

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// socket is an abstract unix socket address of the test's own.
func socket(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("@stickydrain.io/drainctl-test/%d", time.Now().UnixNano())
}

// TestAnswerIsBounded: whatever a client sends, the drain reads at most
// maxLine bytes of it and answers in at most a few more: a request is a
// word and a duration.
func TestAnswerIsBounded(t *testing.T) {
	tests := []struct {
		name      string
		send      string
		answerHas string
	}{
		{name: "answers a release", send: "release\n", answerHas: "ok: released"},
		{name: "answers a shorter max-wait", send: "max-wait 30m\n", answerHas: "ok: max-wait 30m0s"},
		{name: "refuses a line over the bound without echoing it", send: strings.Repeat("x", 1<<20) + "\n", answerHas: "error: request longer than 1024 bytes"},
		{name: "refuses a line over the bound with no end", send: strings.Repeat("x", 1<<20), answerHas: "error: request longer than 1024 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			addr := socket(t)
			if _, err := Listen(ctx, addr, time.Hour); err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("unix", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// The drain answers before it has read all: write apart.
			go func() { _, _ = c.Write([]byte(tt.send)) }()
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			answer, err := bufio.NewReader(c).ReadString('\n')
			if err != nil && answer == "" {
				t.Fatalf("no answer: %v", err)
			}
			if len(answer) > 2*maxLine || !strings.Contains(answer, tt.answerHas) {
				t.Errorf("answer of %d bytes %.200q, want one containing %q in at most %d bytes", len(answer), answer, tt.answerHas, 2*maxLine)
			}
		})
	}
}

// TestSendReadsABoundedAnswer: a listener that is not a drain (another
// process took the address) cannot flood drainctl release with its
// answer.
func TestSendReadsABoundedAnswer(t *testing.T) {
	tests := []struct {
		name    string
		answer  string
		want    string
		wantErr bool
	}{
		{name: "returns an ok answer", answer: "ok: released\n", want: "ok: released"},
		{name: "cuts an endless answer", answer: "ok" + strings.Repeat("x", 1<<20) + "\n", want: "ok" + strings.Repeat("x", maxLine-2)},
		{name: "returns an error answer as an error", answer: "error: no\n", want: "error: no", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := socket(t)
			ln, err := net.Listen("unix", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
					return
				}
				_, _ = c.Write([]byte(tt.answer))
			}()
			got, err := Send(context.Background(), addr, "release")
			if (err != nil) != tt.wantErr {
				t.Fatalf("Send() error = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Send() = %d bytes %.100q, want %d bytes %.100q", len(got), got, len(tt.want), tt.want)
			}
		})
	}
}
