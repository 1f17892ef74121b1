// Command drainctl is stickydrain's preStop helper: it waits until an
// application's sessions have ended. See `drainctl help`.
package main

import (
	"context"
	"os"

	"github.com/stickydrain/stickydrain/drainctl/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], cli.DefaultEnv()))
}
