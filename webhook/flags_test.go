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
		"drainctl-image": "ghcr.io/stickydrain/drainctl:v0.1.0", "drainctl-image-from-container": "drainctl", "drainctl-delivery": "image-volume", "namespace-opt-in-owner-kinds": "ReplicaSet,StatefulSet,DaemonSet", "max-wait-ceiling": "12h", "pod-opt-in-namespaces": "shop,cart",
		"cert-dir": "/certs", "port": "9443", "max-concurrent-admissions": "64", "client-ca-file": "/etc/apiserver/ca.crt", "metrics-bind-address": ":9443", "metrics-secure": "true",
		"metrics-cert-dir": "/certs", "enable-http2": "true", "health-probe-bind-address": ":9081",
		"pprof-bind-address": "127.0.0.1:6060", "leader-elect": "true", "leader-election-namespace": "stickydrain-system",
		"kubeconfig": "/root/.kube/config",
		"zap-devel":  "true", "zap-encoder": "console", "zap-log-level": "debug", "zap-stacktrace-level": "panic", "zap-time-encoding": "iso8601",
	})
	cmdlinetest.Refused(t, newFlagSet, map[string]string{
		"--port=https":                       `invalid argument "https" for "--port" flag`,
		"--namespace-opt-in-owner-kinds=Pod": `invalid argument "Pod" for "--namespace-opt-in-owner-kinds" flag: "Pod" is not a controller kind`,
		"--enable-http2=yes-please":          `invalid argument "yes-please" for "--enable-http2" flag`,
		"--drainctl-img x":                   "unknown flag: --drainctl-img",
		"--drainctl-delivery=volume":         `invalid argument "volume" for "--drainctl-delivery" flag: want inject or image-volume`,
		"--max-wait-ceiling=12":              `invalid argument "12" for "--max-wait-ceiling" flag`,
	})
}
