package haproxy

import (
	"fmt"
	"strings"

	"github.com/stickydrain/stickydrain/controller/plan"
)

// AdminState is the srv_admin_state of `show servers state`: a decimal
// bitmask (HAProxy's enum srv_admin), the same on 2.6 to 3.2.
type AdminState uint32

// The bits of AdminState, as HAProxy's management guide names them.
const (
	// AdminForcedMaint: put into maintenance (`set server … state maint`,
	// `disable server`).
	AdminForcedMaint AdminState = 0x01
	// AdminInheritedMaint: in maintenance because a tracked server is.
	AdminInheritedMaint AdminState = 0x02
	// AdminConfigMaint: `disabled` in the configuration. Informational:
	// HAProxy keeps it after `set server … state ready` (a filled slot
	// still carries it) and does not count it as maintenance.
	AdminConfigMaint AdminState = 0x04
	// AdminForcedDrain: put into drain (`set server … state drain`).
	AdminForcedDrain AdminState = 0x08
	// AdminInheritedDrain: draining because a tracked server is.
	AdminInheritedDrain AdminState = 0x10
	// AdminResolutionMaint: in maintenance because its address could not
	// be resolved.
	AdminResolutionMaint AdminState = 0x20
	// AdminFQDNChanged: informational. Up to 3.0 the guide calls it
	// HMAINT ("FQDN set from the stats socket"); from 3.1 the source calls
	// it FQDN_CHANGED. Neither is maintenance.
	AdminFQDNChanged AdminState = 0x40

	// AdminMaint is every bit that takes the server out of service
	// (HAProxy's SRV_ADMF_MAINT).
	AdminMaint = AdminForcedMaint | AdminInheritedMaint | AdminResolutionMaint
	// AdminDrain is every bit that drains it (SRV_ADMF_DRAIN).
	AdminDrain = AdminForcedDrain | AdminInheritedDrain

	adminKnown = AdminMaint | AdminConfigMaint | AdminDrain | AdminFQDNChanged
)

var adminNames = []struct {
	bit  AdminState
	name string
}{
	{AdminForcedMaint, "FMAINT"},
	{AdminInheritedMaint, "IMAINT"},
	{AdminConfigMaint, "CMAINT"},
	{AdminForcedDrain, "FDRAIN"},
	{AdminInheritedDrain, "IDRAIN"},
	{AdminResolutionMaint, "RMAINT"},
	{AdminFQDNChanged, "FQDN_CHANGED"},
}

// String names the bits, "FDRAIN|CMAINT", unknown ones in hex; "0" for none.
func (a AdminState) String() string {
	if a == 0 {
		return "0"
	}
	var parts []string
	for _, n := range adminNames {
		if a&n.bit != 0 {
			parts = append(parts, n.name)
		}
	}
	if u := a.Unknown(); u != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(u)))
	}
	return strings.Join(parts, "|")
}

// Unknown is the bits no supported version defines.
func (a AdminState) Unknown() AdminState { return a &^ adminKnown }

// State is what the server is for the controller: Down while any
// maintenance bit is set (whoever set it), else Draining while any drain
// bit is, else Active. Unknown bits never change it.
func (a AdminState) State() plan.State {
	switch {
	case a&AdminMaint != 0:
		return plan.Down
	case a&AdminDrain != 0:
		return plan.Draining
	}
	return plan.Active
}
