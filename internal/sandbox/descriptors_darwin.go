package sandbox

import "golang.org/x/sys/unix"

// descriptorDir lists a process's own descriptors.
const descriptorDir = "/dev/fd"

// closeRangeCloexec is unavailable on macOS; the caller lists /dev/fd.
func closeRangeCloexec(uint) error { return unix.ENOSYS }
