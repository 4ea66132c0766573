//go:build linux && (amd64 || arm64)

package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside the sandbox: kernel interfaces that
// can debug or read other processes, reshape mounts and namespaces, load
// code into the kernel, or reach large attack surfaces a build or test
// does not need.
var deniedSyscalls = append([]uintptr{
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_PROCESS_MADVISE, unix.SYS_KCMP, unix.SYS_PIDFD_GETFD,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_FSOPEN, unix.SYS_FSMOUNT,
	unix.SYS_FSCONFIG, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_UNSHARE, unix.SYS_SETNS,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD, unix.SYS_FANOTIFY_INIT,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT, unix.SYS_ACCT,
	unix.SYS_QUOTACTL, unix.SYS_VHANGUP, unix.SYS_SETTIMEOFDAY,
	unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	unix.SYS_SETHOSTNAME, unix.SYS_SETDOMAINNAME,
}, archDeniedSyscalls...)

// nsCloneFlags are the clone flags that would create namespaces.
const nsCloneFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
	unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP |
	unix.CLONE_NEWTIME

// Offsets of the 32-bit words the filter reads in struct seccomp_data
// (int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]). A
// 32-bit load of an argument reads its low half on a little-endian
// machine, which amd64 and arm64 are.
const (
	seccompNr   = 0
	seccompArch = 4
	seccompArg0 = 16
	seccompArg1 = 24
)

// The filter's verdicts.
const (
	seccompAllow  = uint32(unix.SECCOMP_RET_ALLOW)
	seccompKill   = uint32(unix.SECCOMP_RET_KILL_PROCESS)
	seccompEPERM  = uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)
	seccompENOSYS = uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.ENOSYS)
)

// seccompProgram is the sandbox's filter as BPF instructions. A foreign
// architecture (a 32-bit ABI on a 64-bit kernel) kills the process, since
// its syscall numbers mean different things; x32 numbers on amd64 are
// refused. clone3 returns ENOSYS, because its flags live in memory the
// filter cannot read, so that libc falls back to clone, whose namespace
// flags are checked. TIOCSTI and TIOCLINUX, which can push input into a
// terminal, are refused. Everything else is allowed.
func seccompProgram() []bpf.Instruction {
	p := seq(
		load(seccompArch),
		when(bpf.JumpNotEqual, auditArch, ret(seccompKill)),
		load(seccompNr),
	)
	if x32Bit != 0 {
		p = append(p, when(bpf.JumpGreaterOrEqual, x32Bit, ret(seccompEPERM))...)
	}
	for _, nr := range deniedSyscalls {
		p = append(p, when(bpf.JumpEqual, uint32(nr), ret(seccompEPERM))...)
	}
	return append(p, seq(
		when(bpf.JumpEqual, unix.SYS_CLONE3, ret(seccompENOSYS)),
		// clone: refuse namespace flags (flags are the first argument on
		// both amd64 and arm64).
		when(bpf.JumpEqual, unix.SYS_CLONE,
			load(seccompArg0),
			when(bpf.JumpBitsSet, nsCloneFlags, ret(seccompEPERM)),
			ret(seccompAllow),
		),
		// ioctl: refuse terminal input injection.
		when(bpf.JumpEqual, unix.SYS_IOCTL,
			load(seccompArg1),
			when(bpf.JumpEqual, unix.TIOCSTI, ret(seccompEPERM)),
			when(bpf.JumpEqual, unix.TIOCLINUX, ret(seccompEPERM)),
			ret(seccompAllow),
		),
		ret(seccompAllow),
	)...)
}

// The filter is built from fragments, so that no jump is counted by hand.

// load reads the 32-bit word of seccomp_data at off into the accumulator.
func load(off uint32) []bpf.Instruction {
	return []bpf.Instruction{bpf.LoadAbsolute{Off: off, Size: 4}}
}

// ret ends the filter with a verdict.
func ret(verdict uint32) []bpf.Instruction {
	return []bpf.Instruction{bpf.RetConstant{Val: verdict}}
}

// seq joins fragments.
func seq(frags ...[]bpf.Instruction) []bpf.Instruction {
	var out []bpf.Instruction
	for _, f := range frags {
		out = append(out, f...)
	}
	return out
}

// when runs the block made of frags if the accumulator passes cond against
// val, and skips it otherwise; a block that does not return falls through
// to what follows it.
func when(cond bpf.JumpTest, val uint32, frags ...[]bpf.Instruction) []bpf.Instruction {
	block := seq(frags...)
	if len(block) > 255 {
		panic("seccomp: a conditional block longer than a BPF jump can skip")
	}
	return append([]bpf.Instruction{bpf.JumpIf{Cond: cond, Val: val, SkipFalse: uint8(len(block))}}, block...)
}

// seccompFilter assembles seccompProgram for the kernel.
func seccompFilter() []unix.SockFilter {
	raw, err := bpf.Assemble(seccompProgram())
	if err != nil {
		panic("seccomp: " + err.Error()) // the program is fixed; tests assemble it
	}
	f := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		f[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return f
}

// installSeccomp applies the filter to the calling thread (and what it
// forks later). no_new_privs must already be set.
func installSeccomp(filter []unix.SockFilter) error {
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}
