// Package plan computes the changes that bring one load-balancer upstream
// from its actual servers to the desired ones. It is pure data in, data out.
package plan

import (
	"net/netip"
	"sort"
)

// State is a server's routing state.
type State int

// States. The zero value is not a state.
const (
	// Active servers take new and bound sessions.
	Active State = iota + 1
	// Draining servers take bound sessions only (cookie/sticky), no new ones.
	Draining
	// Down servers take nothing; they stay listed so that a pod that comes
	// back to serving while terminating can drain again.
	Down
)

func (s State) String() string {
	switch s {
	case Active:
		return "active"
	case Draining:
		return "draining"
	case Down:
		return "down"
	}
	return "unknown"
}

// Rank orders states by availability: active > draining > down.
func (s State) Rank() int {
	switch s {
	case Active:
		return 3
	case Draining:
		return 2
	case Down:
		return 1
	}
	return 0
}

// Op is what a change does.
type Op string

// Ops.
const (
	OpAdd    Op = "add"    // a new server, in State
	OpSet    Op = "set"    // an existing server to State
	OpRemove Op = "remove" // a server no longer desired
)

// Change is one server-level change.
type Change struct {
	Op    Op
	Addr  netip.AddrPort
	State State // for OpAdd and OpSet
	From  State // for OpSet and OpRemove: the state it had
}

// Calculate returns the changes from current to desired, sorted by op
// (adds first, so capacity comes before it goes; removes last) and then by
// address. It is empty when the two are equal.
//
//	current   desired   │ change
//	──────────────────  ┼───────────────────────
//	absent    S         │ add S
//	S         S         │ none
//	S         T ≠ S     │ set T
//	S         absent    │ remove
func Calculate(current, desired map[netip.AddrPort]State) []Change {
	var out []Change
	for a, want := range desired {
		have, ok := current[a]
		switch {
		case !ok:
			out = append(out, Change{Op: OpAdd, Addr: a, State: want})
		case have != want:
			out = append(out, Change{Op: OpSet, Addr: a, State: want, From: have})
		}
	}
	for a, have := range current {
		if _, ok := desired[a]; !ok {
			out = append(out, Change{Op: OpRemove, Addr: a, From: have})
		}
	}
	order := map[Op]int{OpAdd: 0, OpSet: 1, OpRemove: 2}
	sort.Slice(out, func(i, j int) bool {
		if order[out[i].Op] != order[out[j].Op] {
			return order[out[i].Op] < order[out[j].Op]
		}
		return out[i].Addr.Compare(out[j].Addr) < 0
	})
	return out
}
