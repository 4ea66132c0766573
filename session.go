package runbox

import (
	"context"
	"fmt"
	"path"
	"strings"
)

// NetworkPolicy selects a session's network.
type NetworkPolicy string

const (
	// NetworkNone gives the session no network beyond loopback. It is the
	// default.
	NetworkNone NetworkPolicy = "none"
	// NetworkBridge attaches the session to the Engine's default bridge.
	NetworkBridge NetworkPolicy = "bridge"
)

// Resources bounds what a session may consume. Zero values mean "no limit".
type Resources struct {
	// MemoryBytes is the memory limit in bytes.
	MemoryBytes int64
	// CPUs is the number of CPUs the session may use, e.g. 1.5.
	CPUs float64
	// Pids is the maximum number of processes.
	Pids int64
}

// Spec describes a session completely: nothing that is not in it is implied
// (no shell, no working paths, no distribution conventions).
type Spec struct {
	// Image is the local image reference or ID.
	Image string
	// Name optionally names the session so that it can be found again by
	// name; "" lets the backend choose.
	Name string
	// Network is the network policy; "" means NetworkNone. Any other value
	// names an existing Engine network.
	Network NetworkPolicy
	// Process is the session's lifetime process; nil runs the image's own
	// command. When it exits, the session ends.
	Process []string
	// Mounts are host paths exposed to the session.
	Mounts []Mount
	// Env holds KEY=VALUE entries added to the image's environment.
	Env []string
	// User runs the lifetime process and commands as this user ("uid[:gid]"
	// or a name known to the image); "" keeps the image's user.
	User string
	// Labels are added to the session's container.
	Labels map[string]string
	// Resources bounds memory, CPU and processes.
	Resources Resources
	// Init runs a minimal init as PID 1 that reaps orphaned processes and
	// forwards signals to the lifetime process.
	Init bool
	// Dir is the working directory of the lifetime process and of the
	// commands that name none; it must be absolute. "" keeps the image's.
	Dir string
	// Runtime names the OCI runtime the Engine runs the session with; it
	// must be one the Engine knows, for example "runsc" (gVisor, a
	// user-space kernel). "" means the Engine's default runtime.
	Runtime string
	// Security holds hardening choices; its zero value keeps the Engine's
	// defaults.
	Security Security
}

// Validate checks everything about s that can be checked without an Engine.
// The error wraps [ErrInvalidSpec].
func (s Spec) Validate() error {
	if strings.TrimSpace(s.Image) == "" {
		return fmt.Errorf("%w: image is empty", ErrInvalidSpec)
	}
	if strings.IndexByte(string(s.Network), 0) >= 0 {
		return fmt.Errorf("%w: network name contains a NUL byte", ErrInvalidSpec)
	}
	if s.Process != nil {
		if err := (Command{Args: s.Process}).Validate(); err != nil {
			return fmt.Errorf("%w: lifetime process: %w", ErrInvalidSpec, err)
		}
	}
	if err := ValidateEnv(s.Env); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	if s.Dir != "" && (!path.IsAbs(s.Dir) || strings.IndexByte(s.Dir, 0) >= 0) {
		return fmt.Errorf("%w: the working directory %q is not an absolute path", ErrInvalidSpec, s.Dir)
	}
	if err := validateMounts(s.Mounts); err != nil {
		return err
	}
	if strings.ContainsAny(s.Runtime, "\x00/ \t\n") {
		return fmt.Errorf("%w: runtime name %q", ErrInvalidSpec, s.Runtime)
	}
	if err := s.Security.validate(s.Mounts); err != nil {
		return err
	}
	for k, v := range s.Labels {
		if k == "" || strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%w: invalid label %q", ErrInvalidSpec, k)
		}
	}
	r := s.Resources
	switch {
	case r.MemoryBytes < 0:
		return fmt.Errorf("%w: negative memory limit %d", ErrInvalidSpec, r.MemoryBytes)
	case r.CPUs < 0:
		return fmt.Errorf("%w: negative CPU limit %g", ErrInvalidSpec, r.CPUs)
	case r.Pids < 0:
		return fmt.Errorf("%w: negative pids limit %d", ErrInvalidSpec, r.Pids)
	}
	return nil
}

// Session is an isolated place that runs commands until it is closed.
// Calls on one session are serialized; independent sessions run
// concurrently.
type Session interface {
	// ID identifies the session to its backend.
	ID() string
	// Starter starts a process whose streams the caller drives; a session
	// that cannot stream returns an error wrapping ErrUnsupported.
	Starter
	// Run executes cmd and waits for it. A nonzero exit is a Result.
	Run(ctx context.Context, cmd Command, streams Streams) (Result, error)
	// Snapshot captures the session's writable layer as a new image.
	// Mounted contents are not part of it.
	Snapshot(ctx context.Context, opts SnapshotOptions) (Image, error)
	// Close stops the session's processes and releases its resources. It
	// works even when ctx is already cancelled, and is idempotent; later
	// calls on the session return ErrSessionClosed.
	Close(ctx context.Context) error
}

// Starter starts a process whose streams the caller drives, from the same
// Command that Run takes. Docker sessions and the host executor implement
// it, so one code path streams on either backend. Command.Stdin and
// Command.Resize belong to Run; the process's own Stdin and Resize take
// their place, and a Command that sets them is refused (see
// Command.ValidateStart).
type Starter interface {
	Start(ctx context.Context, cmd Command) (StreamingProcess, error)
}
