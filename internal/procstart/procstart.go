// Package procstart tells when a process started, so that a process ID
// recorded earlier can be matched with the process that now has it: process
// IDs are reused, start times of one process never change.
package procstart

import (
	"errors"
	"time"
)

// ErrUnknown reports that the platform does not tell a process's start time
// (or not to this caller).
var ErrUnknown = errors.New("procstart: start time unknown")

// Start is when a process started.
type Start struct {
	// ID identifies the start exactly as the platform reports it (on Linux
	// the clock ticks since boot of /proc/PID/stat's field 22): two
	// processes with one PID never share it. It is an opaque token without
	// "/" or spaces.
	ID string
	// Time is the start on the wall clock, to about a second.
	Time time.Time
}

// Of returns when the process pid started. It fails with an error wrapping
// ErrUnknown where the platform does not tell, and with another error when
// the process does not exist.
func Of(pid int) (Start, error) {
	if pid <= 0 {
		return Start{}, errors.New("procstart: no such process")
	}
	return of(pid)
}
