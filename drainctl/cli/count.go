package cli

import (
	"context"
	"fmt"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/api/params"
	"github.com/stickydrain/stickydrain/drainctl/source"
)

const countSynopsis = `drainctl count [flags]

Fetches the session count once and prints it: the number on stdout, the
detected format on stderr. Exit status 0, 2 usage error, 4 fetch or parse
failure.

Example:
  drainctl count --url http://localhost:8080/manager/text/list --context /app --basic-auth-env MANAGER
`

func runCount(ctx context.Context, args []string, env Env) int {
	w := params.NewWait()
	fs := newFlagSet("count", env, countSynopsis)
	w.BindSource(fs)
	if status, ok := parse(fs, args, env); !ok {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "drainctl count: unexpected argument %q\n", fs.Arg(0))
		return api.ExitUsage
	}
	if w.URL == "" {
		fmt.Fprintln(env.Stderr, "drainctl count: --url is required (e.g. --url http://localhost:8080/sessions)")
		return api.ExitUsage
	}
	c, ok := sourceClient("count", w, env)
	if !ok {
		return api.ExitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, w.RequestTimeout)
	defer cancel()
	r, err := c.Count(ctx)
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl count: %v\n", err)
		return api.ExitUnreachable
	}
	fmt.Fprintln(env.Stdout, countText(r.Count))
	fmt.Fprintf(env.Stderr, "format: %s\n", r.Format)
	return 0
}

// sourceClient is the count's client of w's source flags, for command
// name (count, probe); false once it has said why there is none.
func sourceClient(name string, w *params.Wait, env Env) (*source.Client, bool) {
	if err := w.Source.Validate(); err != nil {
		fmt.Fprintf(env.Stderr, "drainctl %s: %v\n", name, err)
		return nil, false
	}
	c, err := source.New(w.Source)
	if err != nil {
		fmt.Fprintf(env.Stderr, "drainctl %s: %v\n", name, err)
		return nil, false
	}
	return c, true
}
