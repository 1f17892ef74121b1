// Command kubectl-stickydrain is the kubectl plugin for operating drains:
// `kubectl stickydrain status|release|shorten|check` (package plugin).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/stickydrain/stickydrain/plugin"
)

// Version is set at link time (make build).
var Version = "dev"

const synopsis = `kubectl stickydrain — operate stickydrain's drains

Usage:
  kubectl stickydrain status [-n NS | -A] [-w] [-o table|json]
      one line per terminating opted-in pod: workload, draining since,
      sessions left, max-wait, time left of its grace period, its state on
      each load balancer, and a verdict
  kubectl stickydrain release POD… [-n NS]
      end the drains now (stickydrain.io/release=true)
  kubectl stickydrain shorten POD… --max-wait DURATION [-n NS]
      lower the drains' max-wait (stickydrain.io/max-wait)
  kubectl stickydrain check (deploy|sts|ns)/NAME [-n NS] [-o table|json] [--health-check-path PATH]
      what would lose sessions at the next rollout, each with its fix; and
      whether the container's HTTP probes (and the load balancer's health
      check path) create sessions, asked from inside a pod
  kubectl stickydrain version

Exit status: 0 ok, 1 failure, 2 usage error, 3 check found an error.

Flags:
`

// Exit statuses.
const (
	exitOK       = 0
	exitFailure  = 1
	exitUsage    = 2
	exitFindings = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Run is the plugin with args (after the program's name); it returns the
// exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("kubectl stickydrain", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	fs.StringVar(&rules.ExplicitPath, "kubeconfig", "", "`path` of the kubeconfig file")
	overrides := &clientcmd.ConfigOverrides{}
	clientcmd.BindOverrideFlags(overrides, fs, clientcmd.ConfigOverrideFlags{
		CurrentContext: clientcmd.FlagInfo{LongName: "context", Description: "the kubeconfig `context` to use"},
		ContextOverrideFlags: clientcmd.ContextOverrideFlags{
			Namespace: clientcmd.FlagInfo{LongName: "namespace", ShortName: "n", Description: "the `namespace` (default: the context's)"},
		},
	})
	all := fs.BoolP("all-namespaces", "A", false, "status: every namespace")
	watch := fs.BoolP("watch", "w", false, "status: refresh in place every --interval")
	every := fs.Duration("interval", 2*time.Second, "status -w: `duration` between refreshes")
	output := fs.StringP("output", "o", "table", "status, check: output `format`, table or json")
	maxWait := fs.Duration("max-wait", 0, "shorten: the new max-wait (`duration`, e.g. 10m)")
	healthChecks := fs.StringArray("health-check-path", nil, "check: a `path` the load balancer's HTTP health check requests on the pods (repeatable): checked, as their HTTP probes are, for creating sessions")
	help := fs.BoolP("help", "h", false, "this help")
	usage := func() { fmt.Fprint(stderr, synopsis+fs.FlagUsages()) }
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "kubectl stickydrain: %v\n", err)
		return exitUsage
	}
	if *help || fs.NArg() == 0 {
		usage()
		if *help {
			return exitOK
		}
		return exitUsage
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(stderr, "kubectl stickydrain: --output %q: want table or json\n", *output)
		return exitUsage
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if cmd == "version" {
		fmt.Fprintf(stdout, "kubectl-stickydrain %s\n", Version)
		return exitOK
	}
	// The operator's mistakes first, before any connection.
	switch {
	case cmd != "status" && cmd != "release" && cmd != "shorten" && cmd != "check":
		fmt.Fprintf(stderr, "kubectl stickydrain: unknown command %q: want status, release, shorten, check or version\n", cmd)
		return exitUsage
	case cmd == "status" && len(rest) > 0:
		fmt.Fprintf(stderr, "kubectl stickydrain status: unexpected argument %q (status takes flags only: -n NS or -A)\n", rest[0])
		return exitUsage
	case cmd == "status" && *every <= 0:
		fmt.Fprintf(stderr, "kubectl stickydrain status: --interval %s: want a positive duration such as 2s\n", *every)
		return exitUsage
	case (cmd == "release" || cmd == "shorten") && len(rest) == 0:
		fmt.Fprintf(stderr, "kubectl stickydrain %s: name at least one pod\n", cmd)
		return exitUsage
	case cmd == "shorten" && !fs.Changed("max-wait"):
		fmt.Fprintln(stderr, "kubectl stickydrain shorten: --max-wait is required (e.g. --max-wait 10m)")
		return exitUsage
	case cmd == "shorten" && *maxWait <= 0:
		fmt.Fprintf(stderr, "kubectl stickydrain shorten: --max-wait %s: want a positive duration such as 10m\n", *maxWait)
		return exitUsage
	case cmd == "check" && len(rest) != 1:
		fmt.Fprintln(stderr, "kubectl stickydrain check: want one target: deploy/NAME, sts/NAME or ns/NAME")
		return exitUsage
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	namespace, _, err := loader.Namespace()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl stickydrain: %v\n", err)
		return exitFailure
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl stickydrain: %v\n", err)
		return exitFailure
	}
	c, err := plugin.NewClient(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl stickydrain: %v\n", err)
		return exitFailure
	}
	c.HealthCheckPaths = *healthChecks
	fail := func(err error) int {
		fmt.Fprintf(stderr, "kubectl stickydrain %s: %v\n", cmd, err)
		return exitFailure
	}
	switch cmd {
	case "status":
		ns := namespace
		if *all {
			ns = ""
		}
		terminal := isTerminal(stdout)
		for {
			statuses, err := c.Status(ctx, ns)
			if err != nil && *watch && ctx.Err() != nil {
				return exitOK // interrupted in the middle of a refresh
			}
			if err != nil {
				return fail(err)
			}
			if *watch && terminal {
				fmt.Fprint(stdout, "\033[H\033[2J")
			}
			if *watch {
				fmt.Fprintf(stdout, "%s\n", time.Now().Format(time.RFC3339))
			}
			if *output == "json" {
				err = plugin.WriteJSON(stdout, statuses)
			} else {
				err = plugin.WriteTable(stdout, statuses, *all, time.Now())
			}
			if err != nil || !*watch {
				if err != nil {
					return fail(err)
				}
				return exitOK
			}
			select {
			case <-ctx.Done():
				return exitOK
			case <-time.After(*every):
			}
			if !terminal {
				fmt.Fprintln(stdout)
			}
		}
	case "release", "shorten":
		var lines []string
		if cmd == "release" {
			lines, err = c.Release(ctx, namespace, rest)
		} else {
			lines, err = c.Shorten(ctx, namespace, rest, *maxWait)
		}
		for _, l := range lines {
			fmt.Fprintln(stdout, l)
		}
		if err != nil {
			return fail(err)
		}
		return exitOK
	case "check":
		findings, err := c.Check(ctx, namespace, rest[0])
		if err != nil {
			return fail(err)
		}
		if *output == "json" {
			err = plugin.WriteFindingsJSON(stdout, findings)
		} else {
			err = plugin.WriteFindings(stdout, findings)
		}
		if err != nil {
			return fail(err)
		}
		if plugin.Worst(findings) == plugin.LevelError {
			return exitFindings
		}
		return exitOK
	}
	return exitUsage // unreachable: every command returns above
}

// isTerminal reports whether w is a terminal (refresh in place) rather
// than a file or a pipe (one table after another).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
