// Package cmdlinetest checks a binary's command line as users meet it:
// its help against a golden file, every flag in both GNU forms, and bad
// values refused naming the flag.
package cmdlinetest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/stickydrain/stickydrain/internal/cmdline"
	"github.com/stickydrain/stickydrain/internal/golden"
)

// Golden checks that --help prints synopsis and the flags exactly as the
// file at path holds them.
func Golden(t *testing.T, newFS func() *pflag.FlagSet, synopsis, path string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if status, ok := cmdline.Parse(newFS(), synopsis, []string{"--help"}, &out, &errOut); ok || status != 0 {
		t.Fatalf("--help: status %d, ok %v, stderr %q", status, ok, errOut.String())
	}
	GoldenText(t, out.String(), path)
}

// GoldenText checks that help, as a binary printed it, is what the file at
// path holds; the test flag -update rewrites the file.
func GoldenText(t *testing.T, help, path string) {
	t.Helper()
	golden.Compare(t, path, []byte(help))
}

// BothForms checks that every flag takes `--flag value` and
// `--flag=value` alike; examples holds a valid value of each, and a flag
// without one fails (a bool is given as --flag alone in the first form).
func BothForms(t *testing.T, newFS func() *pflag.FlagSet, examples map[string]string) {
	t.Helper()
	newFS().VisitAll(func(f *pflag.Flag) {
		v, ok := examples[f.Name]
		if !ok {
			t.Errorf("--%s has no example value in the test", f.Name)
			return
		}
		spaced := []string{"--" + f.Name, v}
		if f.NoOptDefVal != "" {
			spaced = []string{"--" + f.Name}
		}
		a, b := newFS(), newFS()
		if err := a.Parse(spaced); err != nil {
			t.Errorf("%v: %v", spaced, err)
			return
		}
		if err := b.Parse([]string{"--" + f.Name + "=" + v}); err != nil {
			t.Errorf("--%s=%s: %v", f.Name, v, err)
			return
		}
		if x, y := a.Lookup(f.Name), b.Lookup(f.Name); !x.Changed || !y.Changed || x.Value.String() != y.Value.String() {
			t.Errorf("--%s: %v gives %q, --%s=%s gives %q", f.Name, spaced, x.Value, f.Name, v, y.Value)
		}
	})
}

// Refused checks that each command line is refused with the usage exit
// status and a message containing what its entry says.
func Refused(t *testing.T, newFS func() *pflag.FlagSet, cases map[string]string) {
	t.Helper()
	for args, want := range cases {
		var out, errOut bytes.Buffer
		status, ok := cmdline.Parse(newFS(), "", strings.Fields(args), &out, &errOut)
		if ok || status != cmdline.ExitUsage || !strings.Contains(errOut.String(), want) {
			t.Errorf("%s: status %d, ok %v, stderr %q; want exit %d and %q", args, status, ok, errOut.String(), cmdline.ExitUsage, want)
		}
	}
}
