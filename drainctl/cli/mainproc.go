package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// mainProcess finds the main process of drainctl's own container under the
// proc file system at root: PID 1 when it shares drainctl's cgroup (a
// container with its own PID namespace), else — a pod with
// shareProcessNamespace, where PID 1 is the pause process — the oldest
// process in drainctl's cgroup other than drainctl itself. The kubelet
// runs a preStop exec hook in the container's cgroup, and its main
// process' stdout is what `kubectl logs` shows.
func mainProcess(root string, self int) (int, error) {
	own, err := os.ReadFile(filepath.Join(root, strconv.Itoa(self), "cgroup"))
	if err != nil {
		return 0, fmt.Errorf("reading drainctl's cgroup: %w", err)
	}
	if one, err := os.ReadFile(filepath.Join(root, "1", "cgroup")); err == nil && bytes.Equal(one, own) {
		return 1, nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0, fmt.Errorf("listing processes: %w", err)
	}
	best, bestStart := 0, uint64(0)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(root, e.Name(), "cgroup"))
		if err != nil || !bytes.Equal(cg, own) {
			continue
		}
		start, err := startTime(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue
		}
		if best == 0 || start < bestStart || (start == bestStart && pid < best) {
			best, bestStart = pid, start
		}
	}
	if best == 0 {
		return 0, errors.New("no other process in drainctl's cgroup")
	}
	return best, nil
}

// startTime reads a process' start time (field 22 of /proc/PID/stat, in
// clock ticks since boot). The command name, field 2, may hold spaces and
// parentheses: fields are counted after its last ')'.
func startTime(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no command name", path)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("%s: %d fields after the command name, want 20 or more", path, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}
