//go:build unix

package sandbox

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseInheritedOnExec marks every descriptor of the calling process above
// stderr close-on-exec (host.CloseInheritedOnExec documents why a program
// calls it).
func CloseInheritedOnExec() error {
	if closeRangeCloexec(3) == nil {
		return nil
	}
	fds, err := openDescriptors()
	if err != nil {
		return err
	}
	for _, fd := range fds {
		if fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

// openDescriptors lists the calling process's descriptors. The listing's
// own descriptor may be among them, closed by the time this returns.
func openDescriptors() ([]int, error) {
	ents, err := os.ReadDir(descriptorDir)
	if err != nil {
		return nil, err
	}
	fds := make([]int, 0, len(ents))
	for _, ent := range ents {
		if fd, err := strconv.Atoi(ent.Name()); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds, nil
}
