package config

import (
	"bytes"
	"context"
	"os"
	"time"
)

// Watch re-reads the file at path every interval (a ConfigMap volume is
// updated by a symlink swap, which file events miss) and, when its content
// differs from loaded (what the running configuration was parsed from) and
// from the last content settled, calls apply with the new configuration if
// it is valid (types checks what belongs to each load balancer's type), or
// refused with the reason if it is not; a refused change leaves the
// running configuration as it is. apply returns whether the content is
// settled (applied, or refused for good); when it is not, the same content
// is given to apply again at the next interval. A file that disappears
// (its ConfigMap deleted) changes nothing. It returns when ctx ends.
func Watch(ctx context.Context, path string, loaded []byte, every time.Duration, types TypeChecker, apply func(*Config) bool, refused func(error)) {
	last := loaded
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := os.ReadFile(path)
		if err != nil || bytes.Equal(b, last) {
			continue
		}
		c, err := Parse(b, types)
		if err != nil {
			last = b
			refused(err)
			continue
		}
		if apply(c) {
			last = b
		}
	}
}
