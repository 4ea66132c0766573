package runbox

import (
	"context"
	"io"
	"time"
)

// ProcessSignal is a portable request to a running process tree.
type ProcessSignal int

const (
	// ProcessSignalInterrupt asks the process to stop (SIGINT, Ctrl-C).
	ProcessSignalInterrupt ProcessSignal = iota + 1
	// ProcessSignalTerminate asks the process to exit (SIGTERM) and, after
	// one grace period, kills it once.
	ProcessSignalTerminate
	// ProcessSignalKill kills the process tree immediately (SIGKILL).
	ProcessSignalKill
)

// String returns the signal's name.
func (s ProcessSignal) String() string {
	switch s {
	case ProcessSignalInterrupt:
		return "interrupt"
	case ProcessSignalTerminate:
		return "terminate"
	case ProcessSignalKill:
		return "kill"
	}
	return "unknown"
}

// ProcessStreamMode says how a streaming process's stdio is wired.
type ProcessStreamMode int

const (
	// ProcessStreamModePipes gives distinct stdin, stdout and stderr pipes.
	ProcessStreamModePipes ProcessStreamMode = iota + 1
	// ProcessStreamModePTY gives one pseudo-terminal; stderr is merged
	// into stdout.
	ProcessStreamModePTY
)

// String returns the mode's name.
func (m ProcessStreamMode) String() string {
	switch m {
	case ProcessStreamModePipes:
		return "pipes"
	case ProcessStreamModePTY:
		return "pty"
	}
	return "unknown"
}

// LifetimeContainment is what a backend actually achieved for tearing down a
// process tree. It is a report, never a promise made in advance.
type LifetimeContainment int

const (
	// LifetimeContainmentUnspecified means no claim is made.
	LifetimeContainmentUnspecified LifetimeContainment = iota
	// LifetimeContainmentBestEffort means teardown reaches the tree unless
	// a descendant escapes it (for example by starting a new session).
	LifetimeContainmentBestEffort
	// LifetimeContainmentEnforced means the operating system guarantees
	// that no descendant survives teardown.
	LifetimeContainmentEnforced
)

// String returns the containment level's name.
func (c LifetimeContainment) String() string {
	switch c {
	case LifetimeContainmentBestEffort:
		return "best-effort"
	case LifetimeContainmentEnforced:
		return "enforced"
	}
	return "unspecified"
}

// DefaultTerminateGrace is how long [ProcessSignalTerminate] waits, on
// every backend, after the polite signal before it kills (once). Backends
// take another with their WithTerminateGrace option.
const DefaultTerminateGrace = 5 * time.Second

// StreamingProcess is a started process whose standard streams the caller
// drives. Both backends return one (host.Process and docker.Process), so a
// caller needs one code path for either.
//
// Stdout and Stderr must be read (or the process may block writing); in PTY
// mode everything arrives on Stdout. Wait may be called any number of times
// and from any goroutine; a cancelled Wait context releases only that
// caller and never kills the process. Close kills the process if it is
// still running and releases everything.
type StreamingProcess interface {
	Stdin() io.WriteCloser
	Stdout() io.Reader
	Stderr() io.Reader
	Wait(ctx context.Context) (Result, error)
	Signal(sig ProcessSignal) error
	Close(ctx context.Context) error
	StreamMode() ProcessStreamMode
	LifetimeContainment() LifetimeContainment
	// Resize changes a PTY-mode process's terminal size; in pipe mode it
	// returns an error wrapping ErrProcessTTYUnsupported.
	Resize(size TermSize) error
}
