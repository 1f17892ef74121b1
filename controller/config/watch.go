package config

import (
	"bytes"
	"context"
	"os"
	"time"
)

// Watch re-reads the file at path every interval (a ConfigMap volume is
// updated by a symlink swap, which file events miss) and, when its content
// differs from what the running configuration was parsed from (loaded at
// first, then each content applied), calls apply with the new
// configuration and the content it was parsed from if it is valid (types
// checks what belongs to each load balancer's type), or refused with the
// reason if it is not (once per content); a refused change leaves the
// running configuration as it is.
// apply returns whether the content is applied; when it is not
// (held), the same content is given to apply again at the next interval.
// back, when not nil, is called when the file returns to the running
// configuration's content after a refused or held one: nothing is pending
// any more. A file that disappears (its ConfigMap deleted) changes
// nothing. It returns when ctx ends.
func Watch(ctx context.Context, path string, loaded []byte, every time.Duration, types TypeChecker, apply func(c *Config, raw []byte) bool, refused func(error), back func()) {
	running := loaded
	var invalid []byte // the last content refused as invalid, said once
	pending := false   // a content other than the running one was refused or held
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if bytes.Equal(b, running) {
			if pending && back != nil {
				back()
			}
			pending, invalid = false, nil
			continue
		}
		if invalid != nil && bytes.Equal(b, invalid) {
			continue
		}
		c, err := Parse(b, types)
		if err != nil {
			invalid, pending = b, true
			refused(err)
			continue
		}
		invalid = nil
		if apply(c, b) {
			running, pending = b, false
		} else {
			pending = true
		}
	}
}
