package api

import "fmt"

// ServerNote is what the controller's Draining and Removed Events on a
// pod say (their note, or message): which server, on which upstream, on
// how many of its instances. The kubectl plugin reads it back with
// ParseServerNote, so the sentence is part of the contract.
type ServerNote struct {
	// Reason is ReasonDraining or ReasonRemoved.
	Reason string
	// Server is the server's address, ip:port.
	Server string
	// Upstream is "<lb>/<upstream>".
	Upstream string
	// Answered is how many of the upstream's Instances had applied it when
	// the Event was recorded.
	Answered, Instances int
}

// The notes' formats: one per reason.
const (
	drainingNote = "server %s draining on %s (%d of %d instances): bound sessions stay, new ones go elsewhere"
	removedNote  = "server %s removed from %s (%d of %d instances): the pod is gone"
)

// String is the Event's note.
func (n ServerNote) String() string {
	format := drainingNote
	if n.Reason == ReasonRemoved {
		format = removedNote
	}
	return fmt.Sprintf(format, n.Server, n.Upstream, n.Answered, n.Instances)
}

// ParseServerNote reads the note of an Event of reason (ReasonDraining or
// ReasonRemoved); false when it is not one the controller wrote.
func ParseServerNote(reason, note string) (ServerNote, bool) {
	format := drainingNote
	switch reason {
	case ReasonDraining:
	case ReasonRemoved:
		format = removedNote
	default:
		return ServerNote{}, false
	}
	n := ServerNote{Reason: reason}
	// Sscanf stops at the first space of a %s, and neither an address nor
	// an upstream reference holds one.
	if _, err := fmt.Sscanf(note, format, &n.Server, &n.Upstream, &n.Answered, &n.Instances); err != nil {
		return ServerNote{}, false
	}
	return n, true
}
