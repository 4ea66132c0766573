package host

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/runbox-dev/runbox"
)

// treeSys is the Linux handle on a process tree: its process group, and its
// cgroup when one could be used.
type treeSys struct {
	cg *cgroup // nil: process-group containment only
	// breached is set when the cgroup could not be emptied, so that
	// containment is no longer reported as enforced.
	breached atomic.Bool
}

// startTree starts the process in a new session with Pdeathsig, inside a
// fresh cgroup when the executor has a usable cgroup v2 root. If the kernel
// refuses the cgroup the spawn is retried without it, and the process then
// reports best-effort containment.
func (e *Executor) startTree(spec *launchSpec, build func() *exec.Cmd, tty bool) (*exec.Cmd, *treeSys, error) {
	if e.cgroupRoot != "" && !e.cgroupBroken.Load() {
		if cg, err := createCgroup(e.cgroupRoot, cgroupSeq.Add(1)); err == nil {
			cmd := build()
			cmd.SysProcAttr = linuxProcAttr(tty, cg.fd)
			firstErr := startLocked(cmd)
			cg.closeFD()
			if firstErr == nil {
				return cmd, &treeSys{cg: cg}, nil
			}
			_ = cg.remove()
			cmd = build()
			cmd.SysProcAttr = linuxProcAttr(tty, -1)
			if err := startLocked(cmd); err != nil {
				return nil, nil, err
			}
			// The program starts, so the cgroup was what failed. Unless that
			// was a transient shortage, stop paying for a doomed attempt.
			if !errors.Is(firstErr, syscall.EAGAIN) && !errors.Is(firstErr, syscall.ENOMEM) {
				e.cgroupBroken.Store(true)
			}
			return cmd, &treeSys{}, nil
		}
	}
	cmd := build()
	cmd.SysProcAttr = linuxProcAttr(tty, -1)
	if err := startLocked(cmd); err != nil {
		return nil, nil, err
	}
	return cmd, &treeSys{}, nil
}

// linuxProcAttr adds Pdeathsig and, with cgroupFD >= 0, placement into
// that cgroup by clone3 itself, so that not even the child's first
// instruction runs outside it.
func linuxProcAttr(tty bool, cgroupFD int) *syscall.SysProcAttr {
	a := sysProcAttr(tty)
	a.Pdeathsig = syscall.SIGKILL
	if cgroupFD >= 0 {
		a.UseCgroupFD = true
		a.CgroupFD = cgroupFD
	}
	return a
}

// startLocked starts cmd with the goroutine locked to its OS thread.
// Pdeathsig fires when the thread that forked the child exits, not when
// the process does (golang/go#27505); locking keeps the runtime from
// retiring that thread during the spawn.
func startLocked(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}

// awaitExit blocks until the leader has exited without reaping it
// (WNOWAIT): the zombie keeps the pid and process-group id from being
// reused while the tree is torn down.
func (s *treeSys) awaitExit(p *os.Process) bool {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, p.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		return err == nil
	}
}

// signal delivers sig to the tree: the process group, and with a cgroup
// every member of it, which also reaches descendants that left the group.
func (s *treeSys) signal(p *os.Process, sig runbox.ProcessSignal) error {
	n, err := unixSignal(sig)
	if err != nil {
		return err
	}
	var cgErr error
	if s.cg != nil {
		switch sig {
		case runbox.ProcessSignalKill:
			cgErr = s.cg.kill()
		case runbox.ProcessSignalTerminate:
			cgErr = s.cg.signalAll(n)
		}
	}
	return errors.Join(cgErr, killGroup(p.Pid, n))
}

// teardown kills whatever the leader left behind and, with a cgroup, waits
// until the kernel reports it empty.
func (s *treeSys) teardown(p *os.Process) error {
	if s.cg == nil {
		return killGroup(p.Pid, unix.SIGKILL)
	}
	// Fast path: the kernel refuses to remove a populated cgroup (a zombie
	// does not count), so a successful rmdir proves that nothing is left,
	// at less cost than reading cgroup.events.
	// The group is signalled either way: it also reaches a member that
	// moved itself out of the cgroup but not out of the group.
	groupErr := killGroup(p.Pid, unix.SIGKILL)
	if s.cg.tryRemove() {
		return groupErr
	}
	if err := s.cg.drain(); err != nil {
		s.breached.Store(true)
		return err
	}
	return groupErr
}

// release removes the cgroup once the leader has been reaped.
func (s *treeSys) release() error {
	if s.cg == nil {
		return nil
	}
	return s.cg.remove()
}

func (s *treeSys) containment() runbox.LifetimeContainment {
	if s.cg != nil && !s.breached.Load() {
		return runbox.LifetimeContainmentEnforced
	}
	return runbox.LifetimeContainmentBestEffort
}

func (e *Executor) plannedContainment() runbox.LifetimeContainment {
	if e.cgroupRoot != "" && !e.cgroupBroken.Load() {
		return runbox.LifetimeContainmentEnforced
	}
	return runbox.LifetimeContainmentBestEffort
}

// pollableMaster returns the terminal master in non-blocking mode,
// registered with the runtime poller, so that Close interrupts a pending
// Read. pty.Open hands it back in blocking mode (its ioctls call Fd).
func pollableMaster(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup terminal master: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("terminal master: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
