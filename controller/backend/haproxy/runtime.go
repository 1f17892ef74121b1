// The raw Runtime API call (one connection, commands separated by ';')
// and `show info`.

package haproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// run sends commands on one connection, separated by ';', and returns each
// command's output. The Runtime API ends each output with an empty line.
func (h *Instance) run(ctx context.Context, cmds []string) ([]string, error) {
	conn, err := h.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline := time.Now().Add(h.timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte(strings.Join(cmds, ";") + "\n")); err != nil {
		return nil, fmt.Errorf("haproxy %s: sending: %w", h.id, err)
	}
	var outs []string
	var cur []string
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			outs = append(outs, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("haproxy %s: reading: %w", h.id, err)
	}
	if len(cur) > 0 {
		outs = append(outs, strings.Join(cur, "\n"))
	}
	if len(outs) < len(cmds) {
		return outs, fmt.Errorf("haproxy %s: %d answers to %d commands", h.id, len(outs), len(cmds))
	}
	return outs, nil
}

// Info reads `show info` fields (Pid, Uptime_sec, …), for restart
// detection and diagnostics.
func (h *Instance) Info(ctx context.Context) (map[string]string, error) {
	outs, err := h.run(ctx, []string{"show info"})
	if err != nil {
		return nil, err
	}
	m := parseInfo(outs[0])
	if len(m) == 0 {
		return nil, errors.New("haproxy: empty show info")
	}
	return m, nil
}

// parseInfo reads the "Name: value" lines of a `show info` answer.
func parseInfo(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}
