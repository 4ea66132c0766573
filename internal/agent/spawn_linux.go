package agent

import (
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The parts of starting a command that keep its cost near one fork and
// exec: few system calls before the fork, and an exit noticed through the
// poller instead of through SIGCHLD and the signal loop.

// outputPipeSize is the pipe buffer of a command's stdout and stderr:
// bigger pipes mean fewer, fuller frames for a fast writer.
const outputPipeSize = 1 << 20

// commandPipe makes a pipe for one of a command's standard streams. The
// agent's end (the read end for output, the write end for input) is
// non-blocking and served by the poller; the command's end stays a
// blocking descriptor, close-on-exec, that the fork dups into place.
func commandPipe(output bool) (parent *os.File, child int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, -1, os.NewSyscallError("pipe2", err)
	}
	mine, theirs := p[1], p[0]
	if output {
		mine, theirs = p[0], p[1]
		_, _ = unix.FcntlInt(uintptr(mine), unix.F_SETPIPE_SZ, outputPipeSize)
	}
	if err := unix.SetNonblock(mine, true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(mine), "|command"), theirs, nil
}

// devNull is the stdin of commands that take no input (the client sends
// none: EOF at once, as `docker exec` without -i gives), and the stdout or
// stderr of those whose output the client discards. It is opened once; -1
// means it could not be, and such commands get pipes instead.
func (s *server) devNull() int {
	s.nullOnce.Do(func() {
		fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			fd = -1
		}
		s.null = fd
	})
	return s.null
}

// pidfdWaits reports whether the kernel gives pidfds at fork and waits on
// them (Linux 5.4 and later). Without them every exit goes through the
// reaper.
var pidfdWaits = sync.OnceValue(func() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var info unix.Siginfo
	// Our own process is not our child: ECHILD where P_PIDFD is known,
	// EINVAL where it is not.
	err = unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil)
	return err == unix.ECHILD
})

// waitExit waits, through the poller, until the command behind pidfd
// exits and reaps it. It takes ownership of pidfd. ok is false when there
// is no pidfd or the reaper, woken by the same exit's SIGCHLD, collected
// the command first: its status then arrives on the command's waiter
// channel.
func (s *server) waitExit(pid, pidfd int) (st unix.WaitStatus, ok bool) {
	if pidfd < 0 {
		return 0, false
	}
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd)
		return 0, false
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, false
	}
	_ = rc.Read(func(fd uintptr) bool {
		// Under s.mu, as the reaper delivers: whichever of the two reaps
		// the command, the other then knows it.
		s.mu.Lock()
		defer s.mu.Unlock()
		var info unix.Siginfo
		switch err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil); err {
		case nil:
		case unix.EINTR, unix.EAGAIN:
			return false
		default:
			return true // ECHILD: the reaper has it
		}
		exited, ws := childStatus(&info)
		if !exited {
			return false // not yet: wait for the poller
		}
		delete(s.waiters, pid)
		st, ok = ws, true
		return true
	})
	return st, ok
}

// siginfoChild is the start of the kernel's siginfo_t for SIGCHLD: three
// ints, then the union, aligned to a pointer (MIPS, which swaps errno and
// code, is not a port the agent is built for).
type siginfoChild struct {
	signo, errno, code int32
	_                  [unsafe.Sizeof(uintptr(0))/4 - 1]int32
	pid, uid, status   int32
}

// The si_code values of SIGCHLD that report an end.
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// childStatus converts what waitid reported into the wait status wait4
// would have given. exited is false when no child had changed state.
func childStatus(info *unix.Siginfo) (exited bool, st unix.WaitStatus) {
	c := (*siginfoChild)(unsafe.Pointer(info))
	if c.pid == 0 {
		return false, 0
	}
	switch c.code {
	case cldExited:
		return true, unix.WaitStatus((c.status & 0xff) << 8)
	case cldKilled:
		return true, unix.WaitStatus(c.status & 0x7f)
	case cldDumped:
		return true, unix.WaitStatus(c.status&0x7f | 0x80)
	}
	return false, 0
}

var _ [unsafe.Sizeof(unix.Siginfo{}) - unsafe.Sizeof(siginfoChild{})]byte // siginfoChild fits
