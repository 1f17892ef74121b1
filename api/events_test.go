package api

import "testing"

func TestServerNoteRoundTrips(t *testing.T) {
	for _, n := range []ServerNote{
		{Reason: ReasonDraining, Server: "198.18.4.7:8080", Upstream: "haproxy/shop", Answered: 1, Instances: 2},
		{Reason: ReasonRemoved, Server: "[2001:db8::1]:8080", Upstream: "plus/web-prod", Answered: 3, Instances: 3},
	} {
		got, ok := ParseServerNote(n.Reason, n.String())
		if !ok || got != n {
			t.Errorf("ParseServerNote(%q) = %+v, %v; want %+v", n.String(), got, ok, n)
		}
	}
	for _, tc := range []struct{ reason, note string }{
		{ReasonDraining, "server 1.2.3.4:80 removed from a/b (1 of 1 instances): the pod is gone"},
		{ReasonUpstreamConflict, "server 1.2.3.4:80 draining on a/b (1 of 1 instances): bound sessions stay, new ones go elsewhere"},
		{ReasonDraining, "draining"},
	} {
		if n, ok := ParseServerNote(tc.reason, tc.note); ok {
			t.Errorf("ParseServerNote(%s, %q) = %+v, want no note", tc.reason, tc.note, n)
		}
	}
}
