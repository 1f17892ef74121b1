// Package peers finds the programs test/peers/build.sh builds from other
// projects' sources (haproxy-ingress, Traefik, Envoy Gateway's
// translators), for the tests that run against them.
package peers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Env names the built peers, one "<peer> <version> <executable>
// [<resources>]" per line, as build.sh prints them (make test sets it);
// without it Find runs build.sh itself.
const Env = "STICKYDRAIN_PEERS"

// Peer is one built peer.
type Peer struct {
	Name, Version string
	// Bin is its executable; Resources the directory of files it comes
	// with, "" when none.
	Bin, Resources string
}

// Find returns the peer name: from Env, else built by build.sh (minutes
// on a cold cache; said through logf).
func Find(ctx context.Context, name string, logf func(string, ...any)) (Peer, error) {
	lines := os.Getenv(Env)
	if !strings.Contains(lines, name+" ") {
		logf("building %s from source (test/peers/build.sh; minutes on a cold cache) …", name)
		_, file, _, _ := runtime.Caller(0)
		out, err := exec.CommandContext(ctx, "bash", filepath.Join(filepath.Dir(file), "build.sh"), name).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return Peer{}, fmt.Errorf("test/peers/build.sh %s: %w\n%s", name, err, ee.Stderr)
			}
			return Peer{}, fmt.Errorf("test/peers/build.sh %s: %w", name, err)
		}
		lines = string(out)
	}
	sc := bufio.NewScanner(strings.NewReader(lines))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[0] == name {
			p := Peer{Name: name, Version: f[1], Bin: f[2]}
			if len(f) > 3 {
				p.Resources = f[3]
			}
			return p, nil
		}
	}
	return Peer{}, fmt.Errorf("%s names no %s", Env, name)
}
