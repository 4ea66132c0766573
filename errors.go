package runbox

import (
	"errors"
	"fmt"
)

// Sentinel errors. Backends wrap them (usually together with a cause) so that
// callers can classify failures with errors.Is. A Result never carries these:
// an error means the command did not complete normally.
var (
	// ErrImageUnavailable reports that the Engine answered "no such image".
	// It is never used for a daemon or transport failure.
	ErrImageUnavailable = errors.New("runbox: image unavailable")

	// ErrSessionClosed reports a call on a session after Close.
	ErrSessionClosed = errors.New("runbox: session closed")

	// ErrSessionNotFound reports that no session matches an ID, ID prefix
	// or name.
	ErrSessionNotFound = errors.New("runbox: session not found")

	// ErrAmbiguous reports an ID prefix that matches more than one session.
	ErrAmbiguous = errors.New("runbox: ambiguous session reference")

	// ErrSessionEnded reports that a session's lifetime process has exited,
	// so the session can no longer run commands.
	ErrSessionEnded = errors.New("runbox: session ended")

	// ErrInvalidCommand reports a Command rejected before anything started.
	ErrInvalidCommand = errors.New("runbox: invalid command")

	// ErrInvalidSpec reports a Spec rejected before anything was created.
	ErrInvalidSpec = errors.New("runbox: invalid spec")

	// ErrStart reports that the program could not be started (not found,
	// not executable, bad working directory). No exit code is invented.
	// Where the backend can tell, the error also wraps fs.ErrNotExist (no
	// such program) or fs.ErrPermission (found, but not executable), which
	// docker reports as exit statuses 127 and 126.
	ErrStart = errors.New("runbox: command could not be started")

	// ErrStartRefused reports that a Command's BeforeStart hook returned an
	// error, so the command was not started. The error also wraps the
	// hook's own error.
	ErrStartRefused = errors.New("runbox: start refused by the BeforeStart hook")

	// ErrUnavailable reports that there is no sandbox to run a command in
	// (a nil runner was given to [Collect]). Callers report it as
	// "sandbox unavailable".
	ErrUnavailable = errors.New("runbox: sandbox unavailable")

	// ErrCancelled reports that the caller's context ended before the
	// command completed. The error also wraps the context's own error.
	ErrCancelled = errors.New("runbox: cancelled")

	// ErrTransport reports that the connection carrying a command's streams
	// or status failed, so the command's outcome is unknown.
	ErrTransport = errors.New("runbox: transport failure")

	// ErrCleanup reports that releasing resources failed.
	ErrCleanup = errors.New("runbox: cleanup failed")

	// ErrPlatformMismatch reports an image whose OS or architecture differs
	// from the platform that was asked for.
	ErrPlatformMismatch = errors.New("runbox: image platform mismatch")

	// ErrOutputLimit reports that a command produced more output than its
	// limit allowed; the command was terminated.
	ErrOutputLimit = errors.New("runbox: output limit exceeded")

	// ErrProcessStdinClosed reports a write to a process's stdin after it was
	// closed.
	ErrProcessStdinClosed = errors.New("runbox: process stdin closed")

	// ErrProcessTTYUnsupported reports that a terminal was requested from a
	// backend or platform that cannot provide one.
	ErrProcessTTYUnsupported = errors.New("runbox: process TTY unsupported")

	// ErrProcessSignalUnsupported reports that the backend or platform has no
	// way to deliver the requested signal.
	ErrProcessSignalUnsupported = errors.New("runbox: process signal unsupported")

	// ErrUnsupported reports a request this backend cannot honour exactly.
	// It also matches errors.ErrUnsupported.
	ErrUnsupported = fmt.Errorf("runbox: %w", errors.ErrUnsupported)
)
