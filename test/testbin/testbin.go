// Package testbin builds the project's commands for tests that run them as
// real processes, each once per Builder.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
)

// Builder builds main packages into one temporary directory.
type Builder struct {
	mu    sync.Mutex
	dir   string
	built map[string]string
}

// New returns a Builder; Close removes what it built.
func New() *Builder { return &Builder{built: map[string]string{}} }

// Build compiles the main package pkg (an import path) with CGO_ENABLED=0
// and -trimpath and returns the binary's path, named after pkg's last
// element. The flags are the ones make test-parts builds the images with
// (tools/images), so a first run compiles the dependencies once for both.
func (b *Builder) Build(pkg string, tags ...string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.built[pkg]; ok {
		return p, nil
	}
	if b.dir == "" {
		d, err := os.MkdirTemp("", "stickydrain-bin-")
		if err != nil {
			return "", fmt.Errorf("creating build directory: %w", err)
		}
		b.dir = d
	}
	out := filepath.Join(b.dir, path.Base(pkg))
	args := []string{"build", "-trimpath", "-o", out}
	for _, t := range tags {
		args = append(args, "-tags", t)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", pkg, err, out)
	}
	b.built[pkg] = out
	return out, nil
}

// Close removes every binary built.
func (b *Builder) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir == "" {
		return nil
	}
	err := os.RemoveAll(b.dir)
	b.dir, b.built = "", map[string]string{}
	return err
}
