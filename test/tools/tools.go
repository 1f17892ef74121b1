//go:build tools

// Package tools pins the Kubernetes and etcd commands the integration tests
// run. It is a module of its own so that the main module does not carry
// k8s.io/kubernetes and its dependency graph. Build the binaries with
// `make k8s-bins` (see build.sh).
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
