// Package cmdline parses the command lines of stickydrain's binaries as
// Kubernetes users expect them: GNU-style flags (pflag: --flag value and
// --flag=value), help that lists every flag sorted with its type and
// default, and a bad or unknown flag refused with exit status 2 and a
// message naming it. It needs nothing but pflag; the flags of the
// Kubernetes libraries come from internal/kubeflags.
package cmdline

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// ExitUsage is the exit status of a command-line error.
const ExitUsage = 2

// New is an empty flag set for the command name.
func New(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = true
	return fs
}

// Parse parses args. On --help it prints synopsis and the flags to stdout
// and returns (0, false); on an error it prints the error naming the flag
// to stderr and returns (ExitUsage, false).
func Parse(fs *pflag.FlagSet, synopsis string, args []string, stdout, stderr io.Writer) (status int, ok bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintf(stdout, "%s\n\nFlags:\n%s", strings.TrimRight(synopsis, "\n"), fs.FlagUsages())
		return 0, false
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n(run '%s --help' for the flags)\n", fs.Name(), err, fs.Name())
		return ExitUsage, false
	}
	return 0, true
}
