// Package cluster runs a real, local Kubernetes control plane for tests:
// etcd and kube-apiserver started through controller-runtime's envtest, and
// kube-controller-manager started beside them, so that the real EndpointSlice,
// Deployment, ReplicaSet, StatefulSet, disruption, namespace and garbage
// collector controllers act on what tests create.
//
// The binaries are built from Go modules by test/tools (see build.sh there)
// into a cache directory outside the checkout; Start builds them when they are
// missing, which takes about 17 minutes cold.
//
// No kubelet or scheduler runs: test/podhost plays both. Nodes listed in
// Options.Nodes are registered Ready so that pods can be bound to them.
//
// Everything Start makes lives under one run directory (certificates, etcd's
// data, logs, the kubeconfig). Stop kills every process and removes that
// directory. When the test process dies without calling Stop (a panic from a
// test timeout, SIGKILL), a watchdog process started with the cluster kills
// the control plane and removes the run directory; SIGINT and SIGTERM stop the
// cluster before the process exits.
package cluster
