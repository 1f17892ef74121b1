// Package promtool runs Prometheus' promtool for the tests of the alerts
// (rule checks, rule unit tests): STICKYDRAIN_PROMTOOL when set, else the
// binary test/tools/promtool.sh builds from test/tools/promtool/go.mod into
// the cache (once: a second caller waits for the first one's build).
package promtool

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/stickydrain/stickydrain/test/proc"
)

// Command returns the command running promtool with args, or an error
// when promtool could not be built.
func Command(args ...string) (*exec.Cmd, error) {
	p := os.Getenv("STICKYDRAIN_PROMTOOL")
	if p == "" {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			return nil, errors.New("locating test/tools: no caller information")
		}
		var err error
		if p, err = proc.BuildScript(filepath.Join(filepath.Dir(file), "..", "tools", "promtool.sh")); err != nil {
			return nil, err
		}
	}
	return exec.Command(p, args...), nil
}
