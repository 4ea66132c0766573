package runbox

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// Mount exposes an existing host path inside a session. The caller owns the
// host path and must keep it for the session's lifetime.
type Mount struct {
	// Source is an absolute path on the machine that runs the session: for
	// a Docker session, the Engine's host, which may not be this machine.
	Source string
	// Target is the absolute path inside the session.
	Target string
	// ReadOnly makes the mount read-only inside the session.
	ReadOnly bool
}

// Validate checks the mount's own fields: an absolute Source and an
// absolute Target. Whether Source exists is for the backend to check where
// the path lives (the Docker backend checks it here only when the Engine
// shares this machine's filesystem). The error wraps [ErrInvalidSpec].
func (m Mount) Validate() error {
	if strings.IndexByte(m.Source, 0) >= 0 || strings.IndexByte(m.Target, 0) >= 0 {
		return fmt.Errorf("%w: mount %q: NUL byte in path", ErrInvalidSpec, m.Source)
	}
	if m.Source == "" || !filepath.IsAbs(m.Source) {
		return fmt.Errorf("%w: mount source %q must be an absolute host path", ErrInvalidSpec, m.Source)
	}
	if m.Target == "" || !path.IsAbs(m.Target) {
		return fmt.Errorf("%w: mount target %q must be an absolute path in the session", ErrInvalidSpec, m.Target)
	}
	if path.Clean(m.Target) == "/" {
		return fmt.Errorf("%w: mount target must not be the root directory", ErrInvalidSpec)
	}
	return nil
}

// validateMounts checks every mount and rejects duplicate targets.
func validateMounts(mounts []Mount) error {
	seen := make(map[string]bool, len(mounts))
	for _, m := range mounts {
		if err := m.Validate(); err != nil {
			return err
		}
		t := path.Clean(m.Target)
		if seen[t] {
			return fmt.Errorf("%w: duplicate mount target %q", ErrInvalidSpec, t)
		}
		seen[t] = true
	}
	return nil
}
