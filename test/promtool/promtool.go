// Package promtool runs Prometheus' promtool for the tests of the alerts
// (rule checks, rule unit tests): STICKYDRAIN_PROMTOOL when set, else the
// binary test/tools/promtool.sh builds from test/tools/promtool/go.mod into
// the cache (once: a second caller waits for the first one's build).
package promtool

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// find is STICKYDRAIN_PROMTOOL, else what test/tools/promtool.sh prints
// (it builds promtool when the cache lacks it).
func find() (string, error) {
	if p := os.Getenv("STICKYDRAIN_PROMTOOL"); p != "" {
		return p, nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("locating test/tools/promtool.sh: no caller information")
	}
	script := filepath.Join(filepath.Dir(file), "..", "tools", "promtool.sh")
	out, err := exec.Command(script).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return "", fmt.Errorf("%s: %w\n%s", script, err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}

// Command returns the command running promtool with args, or an error
// when promtool could not be built.
func Command(args ...string) (*exec.Cmd, error) {
	p, err := find()
	if err != nil {
		return nil, err
	}
	return exec.Command(p, args...), nil
}
