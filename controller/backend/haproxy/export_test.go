package haproxy

import "context"

// SlotView is what the external tests see of a slot.
type SlotView struct {
	Name string
	Free bool
}

// SlotsForTest reads upstream's servers as a pass does (slots).
func (h *Instance) SlotsForTest(ctx context.Context, upstream string) ([]SlotView, error) {
	sess, err := h.openSession(ctx)
	if err != nil {
		return nil, err
	}
	defer sess.close()
	ss, err := h.slots(ctx, sess, upstream)
	var out []SlotView
	for _, s := range ss {
		out = append(out, SlotView{Name: s.name, Free: s.free})
	}
	return out, err
}

// DynamicName is the name a dynamic server of addr gets.
var DynamicName = dynamicName
