package docker

import (
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/runbox-dev/runbox"
)

// checkReservedMounts refuses a mount whose target is the reserved path,
// lies inside it, or contains it (/dev): such a mount would shadow the
// agent, or hand its files and socket to the caller's host directory. Every
// session is refused alike, with or without an agent, so that a spec means
// the same on either.
func checkReservedMounts(mounts []runbox.Mount) error {
	for _, m := range mounts {
		t := path.Clean(m.Target)
		if within(t, reservedDir) || within(reservedDir, t) {
			return fmt.Errorf("%w: mount target %q: %s is reserved for runbox (neither it, anything in it nor a directory above it can be a mount target)",
				runbox.ErrInvalidSpec, m.Target, reservedDir)
		}
	}
	return nil
}

// within reports whether the clean absolute path p is dir or lies under it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// checkMountSources checks that every mount source exists, here, when the
// Engine shares this machine's filesystem. A remote Engine's sources are
// paths on its host, which only it can check (see remoteNote).
func (e *Executor) checkMountSources(mounts []runbox.Mount) error {
	if !e.localEngine {
		return nil
	}
	for _, m := range mounts {
		if _, err := os.Stat(m.Source); err != nil {
			return fmt.Errorf("%w: mount source %q: %w", runbox.ErrInvalidSpec, m.Source, err)
		}
	}
	return nil
}

// remoteNote explains an Engine's refusal of a spec with mounts when the
// Engine is remote: their sources were looked for on its host, not here.
func (e *Executor) remoteNote(mounts []runbox.Mount) string {
	if e.localEngine || len(mounts) == 0 {
		return ""
	}
	return fmt.Sprintf(" (the Engine %s is remote: mount sources are paths on its host, not on this machine)", e.endpoint)
}
