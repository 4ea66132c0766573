package sandbox

import (
	"math"
	"slices"

	"golang.org/x/sys/unix"
)

// descriptorDir lists a process's own descriptors.
const descriptorDir = "/proc/self/fd"

// closeRangeCloexec marks every descriptor from first up close-on-exec in
// one call (Linux 5.11+).
func closeRangeCloexec(first uint) error {
	return unix.CloseRange(first, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
}

// dropInherited closes, in a freshly executed helper, every descriptor
// above stderr that it inherited and that keep does not name. The Go
// runtime opens its own descriptors close-on-exec, so one without the flag
// can only have come through exec: from the program that started the
// helper, which in turn may have inherited it from its own parent.
func dropInherited(keep ...int) error {
	fds, err := openDescriptors()
	if err != nil {
		return err
	}
	for _, fd := range fds {
		if fd <= 2 || slices.Contains(keep, fd) {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
	return nil
}
