package main

import (
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"

	"github.com/stickydrain/stickydrain/internal/cmdline/cmdlinetest"
)

func newFlagSet() *pflag.FlagSet { return flagSet(new(string), new(string), new(string)) }

func TestFlags(t *testing.T) {
	cmdlinetest.Golden(t, newFlagSet, synopsis, filepath.Join("testdata", "help.golden"))
	cmdlinetest.BothForms(t, newFlagSet, map[string]string{"dir": "/tmp/certs", "dns": "localhost,webhook.svc", "ip": "127.0.0.1"})
	cmdlinetest.Refused(t, newFlagSet, map[string]string{"--dirs /tmp": "unknown flag: --dirs", "--dir": "flag needs an argument: --dir"})
}
