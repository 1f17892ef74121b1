package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/drainctl/drain"
)

// maxHookOutput is how much of the pod's own preStop command's output
// runBefore keeps for the log. The rest is read and counted, not kept: a
// hook that prints without end neither grows drainctl's memory nor blocks
// on a full pipe.
const maxHookOutput = 64 << 10

// hookOutputDelay is how long runBefore waits, once the command has
// exited, for its output to close: a process it started in the background
// may hold it open for as long as it runs, and the drain must not wait
// for that.
const hookOutputDelay = 2 * time.Second

// runBefore runs the pod's own preStop command. Its failure is logged, not
// fatal: the drain that follows is what protects the sessions.
func runBefore(ctx context.Context, argv []string, log *drain.Logger) {
	log.Log(fmt.Sprintf("running the original preStop command first: %s", strings.Join(argv, " ")), "event", "before")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out := &headBuffer{max: maxHookOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = hookOutputDelay
	err := cmd.Run()
	switch text := strings.TrimSpace(string(out.head)); {
	case out.total > int64(len(out.head)):
		log.Log(fmt.Sprintf("original preStop output (the first %d of %d bytes): %s", len(out.head), out.total, text))
	case out.total > 0:
		log.Log(fmt.Sprintf("original preStop output: %s", text))
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		log.Log(fmt.Sprintf("original preStop command exited but left its output open (a process in the background?); not waiting for it past %s", hookOutputDelay))
		err = nil
	}
	if err != nil {
		log.Log(fmt.Sprintf("original preStop command failed: %v; draining anyway", err), "event", "before-failed")
	}
}

// headBuffer keeps the first max bytes written to it and counts them all.
// As both Stdout and Stderr of an exec.Cmd it is written by one goroutine
// at a time (os/exec's promise for one comparable writer).
type headBuffer struct {
	head  []byte
	max   int
	total int64
}

func (b *headBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.head); room > 0 {
		b.head = append(b.head, p[:min(room, len(p))]...)
	}
	b.total += int64(len(p))
	return len(p), nil
}

// preSleep is the pod's own preStop sleep: the time a load balancer that
// learns from endpoints alone needs to stop sending new requests.
func preSleep(ctx context.Context, d time.Duration, log *drain.Logger) {
	log.Log(fmt.Sprintf("the pod's own preStop sleep first: %s", d), "event", "before")
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// preHTTPGet is the pod's own preStop httpGet, called as the kubelet calls
// it: a GET, the certificate not verified, any status accepted (logged),
// bounded by api.PreHTTPGetTimeout.
func preHTTPGet(ctx context.Context, url string, headers []string, log *drain.Logger) {
	log.Log(fmt.Sprintf("the pod's own preStop httpGet first: GET %s", url), "event", "before")
	ctx, cancel := context.WithTimeout(ctx, api.PreHTTPGetTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		log.Log(fmt.Sprintf("the pod's own preStop httpGet: %v; draining anyway", err), "event", "before-failed")
		return
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ":")
		req.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	c := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // as the kubelet's httpGet hook
		CheckRedirect: sameHostName,
	}
	resp, err := c.Do(req)
	if err != nil {
		log.Log(fmt.Sprintf("the pod's own preStop httpGet failed: %v; draining anyway", err), "event", "before-failed")
		return
	}
	// Read (a bounded part of) the body and throw it away, as the kubelet
	// does: never kept.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		log.Log(fmt.Sprintf("the pod's own preStop httpGet answered %s; draining anyway", resp.Status), "event", "before-failed")
		return
	}
	if loc := resp.Header.Get("Location"); isRedirect(resp.StatusCode) && loc != "" {
		log.Log(fmt.Sprintf("the pod's own preStop httpGet answered %s, a redirect to another host (%.200s), not followed, as the kubelet does not", resp.Status, loc))
		return
	}
	log.Log(fmt.Sprintf("the pod's own preStop httpGet answered %s", resp.Status))
}

// isRedirect reports whether status is one http.Client follows: one
// still standing in the final answer was refused by sameHostName.
func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// sameHostName is the redirect policy of the kubelet's lifecycle hook
// client (its httpprobe.RedirectChecker(false)): a redirect to another
// host name is not followed, its response is the answer; so the hook's
// headers reach no host its URL does not name.
func sameHostName(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}
