package docker

import (
	"fmt"
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
