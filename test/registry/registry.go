// Package registry runs the CNCF Distribution registry for tests: Debian's
// docker-registry (test/deps.sh installs it), on a free loopback port, plain
// HTTP, its storage in a directory of the caller's. Images and Helm charts
// are pushed to it as to any OCI registry, and the real node pulls from it.
package registry

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/stickydrain/stickydrain/test/proc"
)

// Bin is the registry's binary.
const Bin = "/usr/bin/docker-registry"

// Registry is a running registry.
type Registry struct {
	// Host is its host:port on 127.0.0.1.
	Host string
	// Log is its log file.
	Log string
	p   *proc.Proc
}

// Start runs a registry keeping its blobs under dir (made if missing), and
// waits until it answers the distribution API's version check.
func Start(ctx context.Context, dir string) (*Registry, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if _, err := os.Stat(Bin); err != nil {
		return nil, fmt.Errorf("the Distribution registry (%s, Debian's docker-registry: test/deps.sh installs it): %w", Bin, err)
	}
	ports, err := proc.FreePorts(2)
	if err != nil {
		return nil, err
	}
	r := &Registry{Host: fmt.Sprintf("127.0.0.1:%d", ports[0]), Log: filepath.Join(dir, "registry.log")}
	cfg := fmt.Sprintf(`version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: %q}
  delete: {enabled: true}
http:
  addr: %s
  secret: stickydrain-tests
  debug: {addr: 127.0.0.1:%d}
`, filepath.Join(dir, "storage"), r.Host, ports[1])
	path := filepath.Join(dir, "registry.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if r.p, err = proc.Start(r.Log, Bin, "serve", path); err != nil {
		return nil, fmt.Errorf("starting the registry: %w", err)
	}
	for {
		resp, err := http.Get("http://" + r.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r, nil
			}
		}
		select {
		case <-ctx.Done():
			r.Stop()
			log, _ := os.ReadFile(r.Log)
			return nil, fmt.Errorf("the registry at %s did not answer: %w\n%s", r.Host, ctx.Err(), log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop ends the registry.
func (r *Registry) Stop() {
	r.p.Stop()
}

// Push pushes the images names (tools/images names) from the OCI layouts
// make test-images writes (dir/NAME, beside NAME-OS-ARCH.tar) to
// host/stickydrain/NAME with tools/images push, as `make push` does, and
// returns each one's reference, host/stickydrain/NAME:TAG@sha256:….
func (r *Registry) Push(ctx context.Context, dir string, names ...string) (map[string]string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("locating tools/images: no caller information")
	}
	repo := r.Host + "/stickydrain"
	cmd := exec.CommandContext(ctx, "go", "run", ".", "push", "--out", dir, "--repo", repo, "--images", strings.Join(names, ","))
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..", "tools", "images")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("pushing %s: %w\n%s", strings.Join(names, ", "), err, stderr.String())
	}
	refs := map[string]string{}
	for _, line := range strings.Fields(string(out)) {
		for _, n := range names {
			if strings.HasPrefix(line, repo+"/"+n+":") && strings.Contains(line, "@sha256:") {
				refs[n] = line
			}
		}
	}
	if len(refs) != len(names) {
		return nil, fmt.Errorf("tools/images push printed %q, want each of %s by digest", out, strings.Join(names, ", "))
	}
	return refs, nil
}
