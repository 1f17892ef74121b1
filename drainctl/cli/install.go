package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/stickydrain/stickydrain/api"
)

const installSynopsis = `drainctl install DIR

Copies this binary to DIR/drainctl atomically (temporary file, fsync,
rename, mode 0755). The webhook's init container runs it to deliver
drainctl into images without a shell or cp.

Example:
  drainctl install /stickydrain/bin
`

func runInstall(_ context.Context, args []string, env Env) int {
	fs := newFlagSet("install", env, installSynopsis)
	if status, ok := parse(fs, args, env); !ok {
		return status
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(env.Stderr, "drainctl install: want exactly one argument, the target directory (e.g. drainctl install /stickydrain/bin)")
		return api.ExitUsage
	}
	self, err := env.Executable()
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl install: locating this binary: %v\n", err)
		return api.ExitError
	}
	dst, err := Install(self, fs.Arg(0))
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl install: %v\n", err)
		return api.ExitError
	}
	fmt.Fprintf(env.Stdout, "installed %s\n", dst)
	return 0
}

// Install copies the file at src to dir/drainctl atomically and returns the
// installed path. A reader of dir/drainctl sees the old file or the whole
// new one, never part of it.
func Install(src, dir string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", src, err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, ".drainctl-*")
	if err != nil {
		return "", fmt.Errorf("creating a temporary file in %s: %w", dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		return "", fmt.Errorf("copying to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		return "", fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	dst := filepath.Join(dir, "drainctl")
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("renaming into place: %w", err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable; not all filesystems support it
		d.Close()
	}
	return dst, nil
}
