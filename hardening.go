package runbox

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Security holds a session's hardening choices. Its zero value keeps the
// Engine's defaults (a session is exactly its Spec: nothing is hardened
// that the caller did not ask for).
type Security struct {
	// CapDrop removes Linux capabilities from the Engine's default set,
	// named with or without "CAP_" ("CHOWN", "CAP_NET_RAW"); "ALL" removes
	// every one.
	CapDrop []string
	// CapAdd adds capabilities after CapDrop, so that CapDrop ["ALL"] with
	// CapAdd ["CHOWN"] keeps CHOWN alone.
	CapAdd []string
	// NoNewPrivileges stops exec from raising privileges (setuid binaries,
	// file capabilities).
	NoNewPrivileges bool
	// ReadOnlyRootfs makes the root filesystem read-only: the session
	// writes only to writable mounts and tmpfs.
	ReadOnlyRootfs bool
	// Tmpfs mounts an empty, memory-backed filesystem at each target.
	Tmpfs []Tmpfs
}

// Tmpfs is an empty, memory-backed filesystem in a session, gone with it.
type Tmpfs struct {
	// Target is the absolute path inside the session.
	Target string
	// Options are mount options as mount(8) spells them, for example
	// "size=64m,mode=1777"; "" means the Engine's defaults.
	Options string
}

// capPattern matches a capability name as the Engine accepts it.
var capPattern = regexp.MustCompile(`^(?i:cap_)?[A-Za-z][A-Za-z0-9_]*$`)

// validate checks the choices that need no Engine; the Engine refuses a
// capability it does not know. Targets must not collide with mounts.
func (s Security) validate(mounts []Mount) error {
	for _, list := range [][]string{s.CapDrop, s.CapAdd} {
		for _, c := range list {
			if !capPattern.MatchString(c) {
				return fmt.Errorf("%w: capability %q", ErrInvalidSpec, c)
			}
		}
	}
	seen := make(map[string]bool, len(mounts)+len(s.Tmpfs))
	for _, m := range mounts {
		seen[path.Clean(m.Target)] = true
	}
	for _, t := range s.Tmpfs {
		if t.Target == "" || !path.IsAbs(t.Target) || path.Clean(t.Target) == "/" || strings.IndexByte(t.Target, 0) >= 0 {
			return fmt.Errorf("%w: tmpfs target %q must be an absolute path other than /", ErrInvalidSpec, t.Target)
		}
		if strings.IndexByte(t.Options, 0) >= 0 || strings.ContainsAny(t.Options, " \t\n") {
			return fmt.Errorf("%w: tmpfs %q: invalid options %q", ErrInvalidSpec, t.Target, t.Options)
		}
		if seen[path.Clean(t.Target)] {
			return fmt.Errorf("%w: duplicate mount target %q", ErrInvalidSpec, path.Clean(t.Target))
		}
		seen[path.Clean(t.Target)] = true
	}
	return nil
}

// CapabilityName returns c as the Engine reports it: upper case, without
// "CAP_" ("cap_chown" is "CHOWN").
func CapabilityName(c string) string {
	c = strings.ToUpper(c)
	return strings.TrimPrefix(c, "CAP_")
}
