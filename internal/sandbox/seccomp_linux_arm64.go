package sandbox

import "golang.org/x/sys/unix"

// auditArch is the only syscall ABI the filter accepts.
const auditArch = unix.AUDIT_ARCH_AARCH64

// x32Bit: arm64 has no x32-style numbering to refuse.
const x32Bit = 0

// archDeniedSyscalls: nothing beyond the common list on arm64.
var archDeniedSyscalls []uintptr
