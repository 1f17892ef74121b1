//go:build tools

// Package tools pins the container runtime the real-node tests run the
// kubelet on: containerd, its runc shim and ctr (to import the images built
// here; no registry is reachable). A module of its own, so that neither the
// main module nor the control plane's tools module carries containerd's
// dependency graph. Built by ../containerd.sh into the cache.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
