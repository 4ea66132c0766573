//go:build linux && (amd64 || arm64)

package host

import (
	"fmt"
	"unsafe"

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

// Offsets into struct seccomp_data.
const (
	seccompNr   = 0
	seccompArch = 4
	seccompArg0 = 16 // low 32 bits on little-endian
	seccompArg1 = 24
)

// seccompFilter builds the sandbox's BPF program. A foreign architecture
// (a 32-bit ABI on a 64-bit kernel) kills the process, since its syscall
// numbers mean different things; x32 numbers on amd64 are refused. clone3
// returns ENOSYS, because its flags live in memory the filter cannot read,
// so that libc falls back to clone, whose namespace flags are checked.
// TIOCSTI and TIOCLINUX, which can push input into a terminal, are refused.
func seccompFilter() []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf}
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	eperm := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)
	enosys := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.ENOSYS)
	allow := uint32(unix.SECCOMP_RET_ALLOW)

	f := []unix.SockFilter{
		stmt(ld, seccompArch),
		jump(jeq, auditArch, 1, 0),
		stmt(ret, unix.SECCOMP_RET_KILL_PROCESS),
		stmt(ld, seccompNr),
	}
	if x32Bit != 0 {
		f = append(f, jump(jge, x32Bit, 0, 1), stmt(ret, eperm))
	}
	for _, nr := range deniedSyscalls {
		f = append(f, jump(jeq, uint32(nr), 0, 1), stmt(ret, eperm))
	}
	f = append(f,
		jump(jeq, unix.SYS_CLONE3, 0, 1), stmt(ret, enosys),
		// clone: refuse namespace flags (flags are the first argument on
		// both amd64 and arm64).
		jump(jeq, unix.SYS_CLONE, 0, 4),
		stmt(ld, seccompArg0),
		jump(jset, nsCloneFlags, 0, 1),
		stmt(ret, eperm),
		stmt(ret, allow),
		// ioctl: refuse terminal input injection.
		jump(jeq, unix.SYS_IOCTL, 0, 4),
		stmt(ld, seccompArg1),
		jump(jeq, unix.TIOCSTI, 1, 0),
		jump(jeq, unix.TIOCLINUX, 0, 1),
		stmt(ret, eperm),
		stmt(ret, allow),
	)
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
