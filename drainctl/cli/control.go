package cli

import (
	"context"
	"fmt"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/drainctl/control"
)

const releaseSynopsis = `drainctl release

Ends the drain that drainctl wait runs in this pod (its preStop hook) now:
wait exits 5. Run it in the pod: kubectl exec POD -c CONTAINER --
/stickydrain/bin/drainctl release (kubectl stickydrain release does). It
reaches wait through a unix socket of the pod's own network namespace,
where the stickydrain.io/release annotation cannot: the kubelet no longer
refreshes a terminating pod's annotations file. Exit status 0 done, 1 no
drain runs in the pod, 2 usage error.
`

const shortenSynopsis = `drainctl shorten --max-wait DURATION

Lowers the max-wait of the drain that drainctl wait runs in this pod,
counted from the drain's start; a value not shorter than the one it runs
with is refused. Run it in the pod, as drainctl release. Exit status 0
done, 1 no drain runs in the pod or the value was refused, 2 usage error.
`

// runRelease is drainctl release.
func runRelease(ctx context.Context, args []string, env Env) int {
	return runControl(ctx, "release", args, env)
}

// runShorten is drainctl shorten.
func runShorten(ctx context.Context, args []string, env Env) int {
	return runControl(ctx, "shorten", args, env)
}

// runControl sends the drain running in this pod what command name asks.
func runControl(ctx context.Context, name string, args []string, env Env) int {
	synopsis := releaseSynopsis
	if name == "shorten" {
		synopsis = shortenSynopsis
	}
	fs := newFlagSet(name, env, synopsis)
	maxWait := fs.Duration("max-wait", 0, "shorten: the drain's new max-wait (`duration`, e.g. 30m)")
	if status, ok := parse(fs, args, env); !ok {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "drainctl %s: unexpected argument %q\n", name, fs.Arg(0))
		return api.ExitUsage
	}
	req := api.ControlRelease
	if name == "shorten" {
		if *maxWait <= 0 {
			fmt.Fprintln(env.Stderr, "drainctl shorten: --max-wait is required, a positive duration such as 30m")
			return api.ExitUsage
		}
		req = api.ControlMaxWait + " " + maxWait.String()
	} else if fs.Changed("max-wait") {
		fmt.Fprintln(env.Stderr, "drainctl release: --max-wait belongs to drainctl shorten")
		return api.ExitUsage
	}
	if env.ControlSocket == "" {
		fmt.Fprintf(env.Stderr, "drainctl %s: no control socket\n", name)
		return api.ExitError
	}
	answer, err := control.Send(ctx, env.ControlSocket, req)
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl %s: %v\n", name, err)
		return api.ExitError
	}
	fmt.Fprintln(env.Stdout, answer)
	return 0
}
