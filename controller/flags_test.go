package main

import (
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"

	"github.com/stickydrain/stickydrain/internal/cmdline/cmdlinetest"
)

func newFlagSet() *pflag.FlagSet { return flagSet(&Options{}) }

func TestFlags(t *testing.T) {
	cmdlinetest.Golden(t, newFlagSet, synopsis, filepath.Join("testdata", "help.golden"))
	cmdlinetest.BothForms(t, newFlagSet, map[string]string{
		"config": "/etc/stickydrain/controller.yaml", "metrics-bind-address": ":9443", "metrics-secure": "true",
		"metrics-cert-dir": "/certs", "enable-http2": "true", "health-probe-bind-address": ":9081",
		"concurrent-reconciles": "4", "pprof-bind-address": "127.0.0.1:6060", "leader-elect": "true",
		"leader-election-namespace": "stickydrain-system", "kubeconfig": "/root/.kube/config", "applied-configmap": "stickydrain-controller-applied",
		"zap-devel": "true", "zap-encoder": "console", "zap-log-level": "debug", "zap-stacktrace-level": "panic", "zap-time-encoding": "iso8601",
	})
	cmdlinetest.Refused(t, newFlagSet, map[string]string{
		"--concurrent-reconciles=many": `invalid argument "many" for "--concurrent-reconciles" flag`,
		"--leader-elect=perhaps":       `invalid argument "perhaps" for "--leader-elect" flag`,
		"--zap-log-level=chatty":       `invalid argument "chatty" for "--zap-log-level" flag`,
		"--resync 10s":                 "unknown flag: --resync",
		"--config":                     "flag needs an argument: --config",
		"-config x":                    "unknown shorthand flag: 'c' in -config",
	})
}
