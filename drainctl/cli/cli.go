// Package cli is drainctl's command line: wait, count, probe, release,
// shorten, install, version and help. Main returns the process exit status.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/stickydrain/stickydrain/api"
)

// Version is set at build time (-ldflags -X).
var Version = "dev"

// Env is what Main needs from the process, for tests.
type Env struct {
	Stdout, Stderr io.Writer
	// OpenMainStdout opens the container's main process stdout for logs.
	OpenMainStdout func() (io.WriteCloser, error)
	Executable     func() (string, error)
	// ControlSocket is where wait listens and release and shorten send
	// (api.ControlSocket); empty: wait listens nowhere.
	ControlSocket string
}

// DefaultEnv is the real process environment.
func DefaultEnv() Env {
	return Env{
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		OpenMainStdout: func() (io.WriteCloser, error) {
			pid, err := mainProcess("/proc", os.Getpid())
			if err != nil {
				return nil, err
			}
			return os.OpenFile(fmt.Sprintf("/proc/%d/fd/1", pid), os.O_WRONLY|os.O_APPEND, 0)
		},
		Executable:    os.Executable,
		ControlSocket: controlSocket(),
	}
}

// controlSocket is api.ControlSocket qualified by the container's mount
// namespace, which `kubectl exec` into the container (and the kubelet's
// preStop exec) shares with its drainctl wait, and no other container
// does: pods with hostNetwork share one abstract socket namespace, pods
// with hostPID one PID namespace too, and must not reach each other's
// drains.
func controlSocket() string {
	ns, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return api.ControlSocket
	}
	return api.ControlSocket + "/" + strings.Trim(strings.TrimPrefix(ns, "mnt:"), "[]")
}

// A command is one of drainctl's commands, as cmd/go's base.Command: its
// name, and what runs it with the arguments that follow the name. Each
// lives in a file of its own (wait.go, count.go, probe.go, control.go,
// install.go), with its synopsis.
type command struct {
	name string
	run  func(ctx context.Context, args []string, env Env) int
}

// commands are drainctl's commands, in the order usage lists them;
// version and help are Main's own.
func commands() []command {
	return []command{
		{"wait", runWait},
		{"count", runCount},
		{"probe", runProbe},
		{"release", runRelease},
		{"shorten", runShorten},
		{"install", runInstall},
	}
}

// Main runs drainctl with args (without the program name).
func Main(ctx context.Context, args []string, env Env) int {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return api.ExitUsage
	}
	var names []string
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], env)
		}
		names = append(names, c.name)
	}
	switch args[0] {
	case "version", "--version", "-version":
		fmt.Fprintf(env.Stdout, "drainctl %s\n", Version)
		return 0
	case "help", "--help", "-help", "-h":
		if len(args) > 1 {
			return Main(ctx, []string{args[1], "--help"}, env)
		}
		fmt.Fprint(env.Stdout, usage)
		return 0
	}
	fmt.Fprintf(env.Stderr, "drainctl: unknown command %q; want %s, version or help\n", args[0], strings.Join(names, ", "))
	return api.ExitUsage
}

const usage = `drainctl waits, in a pod's preStop hook, until the application's sessions have ended.

Usage:
  drainctl wait [flags] [-- COMMAND ARGS...]   poll the session count until drained
  drainctl count [flags]                       print the session count once
  drainctl probe --get URL [flags]             tell whether a probe's requests create sessions
  drainctl release                             end the drain running in this pod now
  drainctl shorten --max-wait DURATION         lower the max-wait of the drain running in this pod
  drainctl install DIR                         copy this binary into DIR (init containers)
  drainctl version
  drainctl help [COMMAND]

Examples:
  drainctl wait --url http://localhost:8080/manager/text/list --context /app \
      --basic-auth-file /etc/manager/credentials --max-wait 12h
  drainctl wait --url http://localhost:8080/actuator/metrics/tomcat.sessions.active.current
  drainctl wait --url http://localhost:8080/drain --format match --pattern DRAINING
  drainctl wait --max-wait 15m          (no URL: a timed drain)

Exit status of wait: 0 drained, 2 usage error, 3 max-wait reached, 4 app unreachable,
5 released by an operator, 6 interrupted, 1 other failure.
`

func newFlagSet(name string, env Env, synopsis string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	// Flags end at the first argument: what follows -- is a command.
	fs.SetInterspersed(false)
	fs.Usage = func() {
		fmt.Fprintf(env.Stdout, "%s\nFlags:\n%s", synopsis, fs.FlagUsages())
	}
	return fs
}

// parse parses flags; ok is false with the exit status when it should stop.
func parse(fs *pflag.FlagSet, args []string, env Env) (status int, ok bool) {
	// On an error print only the error, naming the flag; the full usage on
	// --help.
	help := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = help
	if errors.Is(err, pflag.ErrHelp) {
		fs.Usage()
		return 0, false
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl %s: %v\n(run 'drainctl %s --help' for the flags)\n", fs.Name(), err, fs.Name())
		return api.ExitUsage, false
	}
	return 0, true
}
