package e2e

import (
	"strings"
	"testing"

	"github.com/stickydrain/stickydrain/test/haproxytest"
)

// TestSoakFlavoursAndShards: the soak's rotation is every HAProxy version
// in slot mode and, 3.0 on, in dynamic mode, then the ingress
// controllers; STICKYDRAIN_SOAK_FLAVOURS picks by name and a wrong name is
// refused with the accepted ones; shards split the rotation with nothing
// lost or run twice.
func TestSoakFlavoursAndShards(t *testing.T) {
	vs := []haproxytest.Version{{Series: "2.6"}, {Series: "3.0"}, {Series: "3.2"}}
	names := func(ts []soakTarget) string {
		var out []string
		for _, s := range ts {
			out = append(out, s.Name())
		}
		return strings.Join(out, ",")
	}
	all, err := soakTargets(vs, "")
	if err != nil {
		t.Fatal(err)
	}
	const want = "haproxy-2.6-slots,haproxy-3.0-slots,haproxy-3.0-dynamic,haproxy-3.2-slots,haproxy-3.2-dynamic,haproxy-ingress,traefik"
	if got := names(all); got != want {
		t.Errorf("every flavour: %s, want %s", got, want)
	}
	some, err := soakTargets(vs, "traefik, haproxy-3.2-dynamic")
	if err != nil || names(some) != "traefik,haproxy-3.2-dynamic" {
		t.Errorf("picked: %s, %v", names(some), err)
	}
	if _, err := soakTargets(vs, "haproxy-2.6-dynamic"); err == nil || !strings.Contains(err.Error(), "STICKYDRAIN_SOAK_FLAVOURS") || !strings.Contains(err.Error(), "haproxy-3.0-dynamic") {
		t.Errorf("2.6 has no dynamic mode here: want an error naming the variable and the accepted flavours, got %v", err)
	}
	a, errA := soakShard(all, "1/2")
	b, errB := soakShard(all, "2/2")
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if len(a)+len(b) != len(all) || strings.Contains(","+names(a)+",", ","+b[0].Name()+",") {
		t.Errorf("shards %s | %s of %s", names(a), names(b), names(all))
	}
	for _, bad := range []string{"0/2", "3/2", "1", "a/b"} {
		if _, err := soakShard(all, bad); err == nil {
			t.Errorf("STICKYDRAIN_SOAK_SHARD=%q accepted", bad)
		}
	}
}
