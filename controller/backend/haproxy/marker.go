// The process's identity, and the marker (a map entry) that tells the
// instance's readiness check that the controller filled this process.

package haproxy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Identity is the worker's Pid and start time from `show info`: a
// reload (a new worker), a restart or a new replica reads differently,
// even in a container where every process has the same Pid.
func (h *Instance) Identity(ctx context.Context) (string, error) {
	m, err := h.Info(ctx)
	if err != nil {
		return "", err
	}
	return identity(m)
}

func identity(info map[string]string) (string, error) {
	pid, start := info["Pid"], info["Start_time_sec"]
	if pid == "" || start == "" {
		// Both are there on every supported version (2.6 and later).
		return "", errors.New("haproxy: show info lacks Pid or Start_time_sec")
	}
	return "pid " + pid + " started " + start, nil
}

// MarkFilled sets the key "filled" in the map file ReadyMap names (a map
// the configuration loads, empty on disk, so that a new process starts
// without it) on the process named identity. The readiness frontend of
// the sample configuration answers 200 only while the key is there. The
// identity is read on the same connection as the map is written, so the
// marker never lands on another process unnoticed; if it did, it is taken
// off again.
func (h *Instance) MarkFilled(ctx context.Context, id string) error {
	if h.readyMap == "" {
		return nil
	}
	if got, err := h.setOn(ctx, id, markerKey, now()); err != nil {
		return fmt.Errorf("haproxy %s: %w", h.id, err)
	} else if got != id {
		return fmt.Errorf("haproxy %s: the process changed (%s, filled %s) while marking it filled; taken off again", h.id, got, id)
	}
	return nil
}

// setOn sets key to value in the ready map of the process named id: it
// reads the identity on the same connection as it writes, and takes the
// key off again when another process answered, returning that one's
// identity.
func (h *Instance) setOn(ctx context.Context, id, key, value string) (string, error) {
	outs, err := h.run(ctx, []string{"show info", "del map " + h.readyMap + " " + key, "add map " + h.readyMap + " " + key + " " + value})
	if err != nil {
		return "", err
	}
	if out := strings.TrimSpace(outs[2]); out != "" {
		return "", fmt.Errorf("add map %s: %s", h.readyMap, out)
	}
	got, err := identity(parseInfo(outs[0]))
	if err != nil || got != id {
		_, _ = h.run(ctx, []string{"del map " + h.readyMap + " " + key})
	}
	return got, nil
}

// markerKey is the key MarkFilled sets in the ready map. Its value is
// the Unix time in milliseconds of the last confirmation (MarkFilled, then Heartbeat):
// the sample configuration's readiness frontend also refuses a marker
// older than a few seconds, so that an instance no controller can reach
// any more leaves rotation instead of routing with stale servers.
const markerKey = "filled"

func now() string { return strconv.FormatInt(time.Now().UnixMilli(), 10) }

// FreshFor is how old a marker may be and still be refreshed by
// Heartbeat: three heartbeats. One older was not confirmed for a while (a
// partition, a stalled controller): the process may have missed changes,
// so only MarkFilled, after a pass that brought it in step, sets it again.
// The sample configuration refuses a marker older than 2 s.
const FreshFor = 1500 * time.Millisecond

// MarkerFreshFor is FreshFor.
func (h *Instance) MarkerFreshFor() time.Duration { return FreshFor }

// Heartbeat refreshes the marker's time on the process answering if it
// carries one confirmed within FreshFor (`set map` changes an existing
// key only: a process that was never marked filled stays unmarked). Every
// controller replica calls it, the standby too, so that a leader
// hand-over never ages a marker out.
func (h *Instance) Heartbeat(ctx context.Context) error {
	if h.readyMap == "" {
		return nil
	}
	age, ok, err := h.MarkerAge(ctx)
	if err != nil || !ok || age > FreshFor {
		return err
	}
	outs, err := h.run(ctx, []string{"set map " + h.readyMap + " " + markerKey + " " + now()})
	if err != nil {
		return err
	}
	if out := strings.TrimSpace(outs[0]); out != "" && !strings.Contains(out, "not found") {
		return fmt.Errorf("haproxy %s: set map %s: %s", h.id, h.readyMap, out)
	}
	return nil
}

// HasMarker reports whether a ready map is configured.
func (h *Instance) HasMarker() bool { return h.readyMap != "" }

// MarkerAge reads how long ago the process' marker was last confirmed;
// ok is false when it carries none (or no ready map is configured).
func (h *Instance) MarkerAge(ctx context.Context) (age time.Duration, ok bool, err error) {
	if h.readyMap == "" {
		return 0, false, nil
	}
	outs, err := h.run(ctx, []string{"get map " + h.readyMap + " " + markerKey})
	if err != nil {
		return 0, false, err
	}
	out := outs[0]
	if !strings.Contains(out, "found=yes") {
		if strings.Contains(out, "found=no") {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("haproxy %s: get map %s: %s", h.id, h.readyMap, strings.TrimSpace(out))
	}
	_, v, _ := strings.Cut(out, `value="`)
	v, _, _ = strings.Cut(v, `"`)
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("haproxy %s: get map %s: marker %q is not a time in milliseconds", h.id, h.readyMap, v)
	}
	return time.Since(time.UnixMilli(ms)), true, nil
}
