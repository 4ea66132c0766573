package sandbox

import "golang.org/x/sys/unix"

// auditArch is the only syscall ABI the filter accepts.
const auditArch = unix.AUDIT_ARCH_X86_64

// x32Bit marks x32 syscall numbers, which are refused.
const x32Bit = 0x40000000

// archDeniedSyscalls are amd64-only interfaces to hardware and old kernel
// features.
var archDeniedSyscalls = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_USELIB, unix.SYS_MODIFY_LDT}
