//go:build linux && (amd64 || arm64)

package sandbox

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData lays out struct seccomp_data (int nr; __u32 arch; __u64
// instruction_pointer; __u64 args[6]) as the filter's 32-bit loads see it
// on a little-endian kernel: a 64-bit field is its low word, then its high
// word. bpf.VM loads words big-endian, so each word is written big-endian.
func seccompData(arch, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	word := func(off int, v uint32) { binary.BigEndian.PutUint32(b[off:], v) }
	dword := func(off int, v uint64) { word(off, uint32(v)); word(off+4, uint32(v>>32)) }
	word(0, nr)
	word(4, arch)
	dword(8, 0x7f0000001000) // instruction_pointer: the filter ignores it
	for i, a := range args {
		dword(16+8*i, a)
	}
	return b
}

// seccompVM runs the filter exactly as the kernel gets it: the assembled
// program, decoded back into instructions.
func seccompVM(t *testing.T) *bpf.VM {
	t.Helper()
	f := seccompFilter()
	require.LessOrEqual(t, len(f), unix.BPF_MAXINSNS)
	raw := make([]bpf.RawInstruction, len(f))
	for i, s := range f {
		raw[i] = bpf.RawInstruction{Op: s.Code, Jt: s.Jt, Jf: s.Jf, K: s.K}
	}
	prog, ok := bpf.Disassemble(raw)
	require.True(t, ok, "every assembled instruction decodes")
	again, err := bpf.Assemble(prog)
	require.NoError(t, err)
	require.Equal(t, raw, again, "the decoded program is the one installed")
	vm, err := bpf.NewVM(prog)
	require.NoError(t, err)
	return vm
}

// foreignArch is a syscall ABI the kernel runs beside the native one.
func foreignArch() uint32 {
	if auditArch == unix.AUDIT_ARCH_X86_64 {
		return unix.AUDIT_ARCH_I386
	}
	return unix.AUDIT_ARCH_ARM
}

func TestSeccompFilterVerdicts(t *testing.T) {
	vm := seccompVM(t)
	const (
		fork   = uint64(unix.SIGCHLD)
		thread = uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
			unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS |
			unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
	)
	type call struct {
		name    string
		arch    uint32
		nr      uint32
		args    []uint64
		verdict uint32
	}
	calls := []call{
		{"read", auditArch, unix.SYS_READ, []uint64{0, 0x1000, 10}, seccompAllow},
		{"write", auditArch, unix.SYS_WRITE, []uint64{1, 0x1000, 10}, seccompAllow},
		{"openat", auditArch, unix.SYS_OPENAT, nil, seccompAllow},
		{"execve", auditArch, unix.SYS_EXECVE, nil, seccompAllow},
		{"getpid", auditArch, unix.SYS_GETPID, nil, seccompAllow},
		{"exit_group", auditArch, unix.SYS_EXIT_GROUP, nil, seccompAllow},
		{"getpid from a foreign ABI", foreignArch(), unix.SYS_GETPID, nil, seccompKill},
		{"ptrace from a foreign ABI", foreignArch(), unix.SYS_PTRACE, nil, seccompKill},
		{"clone3", auditArch, unix.SYS_CLONE3, []uint64{0x1000, 88}, seccompENOSYS},
		{"clone for fork", auditArch, unix.SYS_CLONE, []uint64{fork}, seccompAllow},
		{"clone for a thread", auditArch, unix.SYS_CLONE, []uint64{thread}, seccompAllow},
		{"clone with CLONE_NEWUSER", auditArch, unix.SYS_CLONE, []uint64{fork | unix.CLONE_NEWUSER}, seccompEPERM},
		{"clone with namespace flags in the second argument", auditArch, unix.SYS_CLONE, []uint64{fork, unix.CLONE_NEWUSER}, seccompAllow},
		{"ioctl TIOCSTI", auditArch, unix.SYS_IOCTL, []uint64{0, unix.TIOCSTI, 0x1000}, seccompEPERM},
		{"ioctl TIOCLINUX", auditArch, unix.SYS_IOCTL, []uint64{0, unix.TIOCLINUX, 0x1000}, seccompEPERM},
		{"ioctl TIOCGWINSZ", auditArch, unix.SYS_IOCTL, []uint64{0, unix.TIOCGWINSZ, 0x1000}, seccompAllow},
		{"ioctl on an fd numbered TIOCSTI", auditArch, unix.SYS_IOCTL, []uint64{unix.TIOCSTI, unix.TIOCGWINSZ}, seccompAllow},
		{"unshare", auditArch, unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWUSER}, seccompEPERM},
		{"mount", auditArch, unix.SYS_MOUNT, nil, seccompEPERM},
		{"ptrace", auditArch, unix.SYS_PTRACE, nil, seccompEPERM},
		{"bpf", auditArch, unix.SYS_BPF, nil, seccompEPERM},
		{"io_uring_setup", auditArch, unix.SYS_IO_URING_SETUP, nil, seccompEPERM},
	}
	for _, flag := range []uint64{unix.CLONE_NEWUSER, unix.CLONE_NEWNS, unix.CLONE_NEWPID, unix.CLONE_NEWNET,
		unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWCGROUP, unix.CLONE_NEWTIME} {
		calls = append(calls, call{fmt.Sprintf("clone with flag %#x", flag), auditArch, unix.SYS_CLONE, []uint64{fork | flag}, seccompEPERM})
	}
	for _, nr := range deniedSyscalls {
		calls = append(calls, call{fmt.Sprintf("denied syscall %d", nr), auditArch, uint32(nr), nil, seccompEPERM})
	}
	if x32Bit != 0 {
		calls = append(calls,
			call{"getpid through x32", auditArch, x32Bit | unix.SYS_GETPID, nil, seccompEPERM},
			call{"read through x32", auditArch, x32Bit | unix.SYS_READ, nil, seccompEPERM},
		)
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			got, err := vm.Run(seccompData(c.arch, c.nr, c.args...))
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("%#x", c.verdict), fmt.Sprintf("%#x", uint32(got)))
		})
	}
}

// Every syscall number outside the lists is allowed: the filter denies by
// name, never by a range that could catch a new syscall.
func TestSeccompFilterAllowsTheRest(t *testing.T) {
	vm := seccompVM(t)
	special := map[uint32]bool{unix.SYS_CLONE: true, unix.SYS_CLONE3: true, unix.SYS_IOCTL: true}
	for _, nr := range deniedSyscalls {
		special[uint32(nr)] = true
	}
	for nr := uint32(0); nr < 1024; nr++ {
		if special[nr] {
			continue
		}
		got, err := vm.Run(seccompData(auditArch, nr))
		require.NoError(t, err)
		require.Equal(t, seccompAllow, uint32(got), "syscall %d", nr)
	}
}
