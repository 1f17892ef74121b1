package cluster

import (
	"context"
	"testing"
	"time"
)

// Two clusters in one test process (concurrent scenarios): each knows only
// its own etcd and kube-apiserver, so that restarting or stopping one
// leaves the other's running.
func TestClustersInOneProcessKeepToThemselves(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two control planes")
	}
	a := StartT(t, Options{})
	b := StartT(t, Options{})
	own := func(c *Cluster) map[int]bool {
		m := map[int]bool{}
		for _, p := range c.pids() {
			m[p] = true
		}
		return m
	}
	pa, pb := own(a), own(b)
	for p := range pa {
		if pb[p] {
			t.Errorf("pid %d is in both clusters' pids files", p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.RestartControlPlane(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	for p := range pb {
		if !alive(p) {
			t.Errorf("pid %d of the other cluster died when this one's control plane restarted", p)
		}
	}
	if _, err := b.Clientset.Discovery().ServerVersion(); err != nil {
		t.Errorf("the other cluster's API server: %v", err)
	}
}
