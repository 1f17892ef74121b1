// Command stickydrain-haproxy reloads HAProxy without losing what the
// stickydrain controller set through the Runtime API: it saves the server
// state (every slot's address, port and drain) into the server-state-file,
// then asks the master to reload.
//
//	stickydrain-haproxy save-state --runtime unix:///run/haproxy/admin.sock --state-file /var/lib/haproxy/server-state
//	stickydrain-haproxy reload --runtime … --master unix:///run/haproxy/master.sock --state-file …
//	stickydrain-haproxy reload … --watch /usr/local/etc/haproxy   (a sidecar: reload whenever the files change)
//
// Exit status: 0 done, 1 failed, 2 bad usage.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/cmd/stickydrain-haproxy/reload"
	"github.com/stickydrain/stickydrain/internal/cmdline"
)

var synopses = map[string]string{
	"save-state": `stickydrain-haproxy save-state [flags]

Saves the server state of every backend (address, port, drain: what the
stickydrain controller set through the Runtime API) into the
server-state-file, atomically. Exit status: 0 done, 1 failed, 2 bad usage.`,
	"reload": `stickydrain-haproxy reload [flags]

Saves the server state, then asks the master (haproxy -W -S) to reload, waits
for the new worker, adds back the dynamic servers (mode dynamic) it lacks and,
with --ready-map, says so in the new worker's ready map (key "replayed"): an
HAProxy reload that keeps every drain. With --watch it keeps running and does
so whenever the configuration directory changes (a sidecar). Exit status: 0
done, 1 failed, 2 bad usage.`,
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "save-state" && args[0] != "reload") {
		fmt.Fprintln(stderr, "usage: stickydrain-haproxy save-state|reload --runtime ADDR --state-file PATH [--master ADDR] [--watch DIR]")
		return 2
	}
	cmd := args[0]
	fs := cmdline.New("stickydrain-haproxy " + cmd)
	runtimeAddr := fs.String("runtime", "unix:///run/haproxy/admin.sock", "the Runtime API (stats socket, level admin): unix:///path or tcp://host:port")
	stateFile := fs.String("state-file", "/var/lib/haproxy/server-state", "the server-state-file of haproxy.cfg")
	timeout := fs.Duration("timeout", 10*time.Second, "how long one save or reload may take")
	master, watch, readyMap := new(string), new(string), new(string)
	every := new(time.Duration)
	if cmd == "reload" {
		fs.StringVar(master, "master", "unix:///run/haproxy/master.sock", "the master CLI (haproxy -W -S): unix:///path or tcp://host:port")
		fs.StringVar(readyMap, "ready-map", "", "the ready map of haproxy.cfg (readyMap in the controller's configuration): the key \"replayed\" is set there once a new worker holds its servers again, which opens the gate of docs/haproxy.md")
		fs.StringVar(watch, "watch", "", "keep running and reload whenever a file in this directory changes (a ConfigMap mount)")
		fs.DurationVar(every, "every", 2*time.Second, "with --watch, how often the directory is read")
	}
	if status, ok := cmdline.Parse(fs, synopses[cmd], args[1:], stdout, stderr); !ok {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "stickydrain-haproxy %s: unexpected argument %q\n", cmd, fs.Arg(0))
		return 2
	}
	var opts []haproxy.Option
	if *readyMap != "" {
		opts = append(opts, haproxy.WithReadyMap(*readyMap))
	}
	h, err := haproxy.New(*runtimeAddr, *timeout, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "stickydrain-haproxy %s: --runtime: %v\n", cmd, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	once := func() error {
		c, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		if cmd == "save-state" {
			return reload.SaveState(c, h, *stateFile)
		}
		return reload.Reload(c, h, *master, *stateFile)
	}
	if *watch == "" {
		if err := once(); errors.Is(err, reload.ErrNotMarked) {
			fmt.Fprintf(stderr, "stickydrain-haproxy %s: warning: %v\n", cmd, err)
		} else if err != nil {
			fmt.Fprintf(stderr, "stickydrain-haproxy %s: %v\n", cmd, err)
			return 1
		}
		fmt.Fprintf(stdout, "stickydrain-haproxy %s: done\n", cmd)
		return 0
	}
	last, err := digest(*watch)
	if err != nil {
		fmt.Fprintf(stderr, "stickydrain-haproxy reload: --watch: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "stickydrain-haproxy reload: watching %s every %s\n", *watch, *every)
	for {
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(*every):
		}
		d, err := digest(*watch)
		if err != nil || d == last {
			continue
		}
		switch err := once(); {
		case errors.Is(err, reload.ErrNotMarked):
			// Reloaded: another reload would not set it either.
			fmt.Fprintf(stderr, "stickydrain-haproxy reload: warning: %v\n", err)
		case err != nil:
			// Tried again at the next change or tick: the digest is kept.
			fmt.Fprintf(stderr, "stickydrain-haproxy reload: %v\n", err)
			continue
		}
		last = d
		fmt.Fprintf(stdout, "stickydrain-haproxy reload: %s changed; reloaded with the server state kept\n", *watch)
	}
}

// digest hashes the regular files under dir (following the symbolic
// links a ConfigMap mount swaps), by name and content.
func digest(dir string) (string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != dir && filepath.Base(p)[0] == '.' {
			return filepath.SkipDir // ..2024_… timestamped copies: read through the links
		}
		if !d.IsDir() {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(n)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}
