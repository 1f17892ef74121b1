package liveness

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTracker(t *testing.T) {
	required := []string{"shop/web", "billing/api"}
	type step struct {
		do   func(tr *Tracker) any
		want any
	}
	observe := func(id string) func(*Tracker) any {
		return func(tr *Tracker) any { return tr.Observe("lb-1", id) }
	}
	done := func(id, svc string) func(*Tracker) any {
		return func(tr *Tracker) any { tr.Done("lb-1", id, svc); return nil }
	}
	pending := func(tr *Tracker) any { return tr.Pending("lb-1", required) }
	due := func(tr *Tracker) any { id, ok := tr.MarkDue("lb-1", required); return [2]any{id, ok} }
	mark := func(id string) func(*Tracker) any {
		return func(tr *Tracker) any { tr.Marked("lb-1", id); return tr.IsMarked("lb-1") }
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"an instance never probed has every Service pending and not due", []step{
			{pending, []string{"billing/api", "shop/web"}},
			{due, [2]any{"", false}},
		}},
		{"a first sight is new; the same identity again is not; a failed probe changes nothing", []step{
			{observe("p1"), true},
			{observe("p1"), false},
			{observe(""), false},
		}},
		{"filled once every required Service is done on the current process, marked once", []step{
			{observe("p1"), true},
			{done("p1", "shop/web"), nil},
			{pending, []string{"billing/api"}},
			{due, [2]any{"", false}},
			{done("p1", "billing/api"), nil},
			{pending, []string(nil)},
			{due, [2]any{"p1", true}},
			{mark("p1"), true},
			{due, [2]any{"", false}},
		}},
		{"a Service done on a process that is gone counts for nothing", []step{
			{observe("p1"), true},
			{done("p0", "shop/web"), nil},
			{done("p0", "billing/api"), nil},
			{due, [2]any{"", false}},
		}},
		{"a restart forgets what was done and the marker: filled again before it is due", []step{
			{observe("p1"), true},
			{done("p1", "shop/web"), nil},
			{done("p1", "billing/api"), nil},
			{mark("p1"), true},
			{observe("p2"), true},
			{func(tr *Tracker) any { return tr.IsMarked("lb-1") }, false},
			{pending, []string{"billing/api", "shop/web"}},
			{mark("p1"), false}, // a late marker of the old process is not this one's
			{done("p2", "shop/web"), nil},
			{done("p2", "billing/api"), nil},
			{due, [2]any{"p2", true}},
		}},
		{"no Service mapped: filled as soon as it is seen", []step{
			{observe("p1"), true},
			{func(tr *Tracker) any { id, ok := tr.MarkDue("lb-1", nil); return [2]any{id, ok} }, [2]any{"p1", true}},
		}},
		{"an instance no longer listed is forgotten", []step{
			{observe("p1"), true},
			{func(tr *Tracker) any { tr.Forget(map[string]bool{"lb-2": true}); return tr.Identity("lb-1") }, ""},
			{observe("p1"), true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker()
			for i, s := range tc.steps {
				if diff := cmp.Diff(s.want, s.do(tr)); diff != "" {
					t.Fatalf("step %d (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}
