package host

import (
	"os"
	"os/exec"

	"golang.org/x/sys/unix"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/sandbox/seatbelt"
)

// treeSys is the macOS handle on a process tree: its process group only.
// macOS has neither cgroups nor Pdeathsig, so containment is best-effort.
type treeSys struct{}

// startTree starts the process in a new session (and process group).
func (e *Executor) startTree(spec *launchSpec, build func() *exec.Cmd, tty bool) (*exec.Cmd, *treeSys, error) {
	cmd := build()
	cmd.Path, cmd.Args = seatbelt.Command(spec.conf, cmd.Path, cmd.Args)
	cmd.SysProcAttr = sysProcAttr(tty)
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return cmd, &treeSys{}, nil
}

// awaitExit blocks until the leader exits without reaping it, using a
// kqueue EVFILT_PROC/NOTE_EXIT event, so that the zombie pins the
// process-group id during teardown.
func (s *treeSys) awaitExit(p *os.Process) bool {
	kq, err := unix.Kqueue()
	if err != nil {
		return false
	}
	defer unix.Close(kq)
	var ev unix.Kevent_t
	unix.SetKevent(&ev, p.Pid, unix.EVFILT_PROC, unix.EV_ADD|unix.EV_ONESHOT)
	ev.Fflags = unix.NOTE_EXIT
	events := make([]unix.Kevent_t, 1)
	for {
		n, err := unix.Kevent(kq, []unix.Kevent_t{ev}, events, nil)
		if err == nil && n == 1 && events[0].Flags&unix.EV_ERROR != 0 {
			// A registration failure comes back as an event.
			err = unix.Errno(events[0].Data)
		}
		switch err {
		case nil:
			return true
		case unix.EINTR:
			continue
		case unix.ESRCH:
			// Already exited (a zombie cannot be registered): nothing to
			// wait for.
			return true
		}
		return false
	}
}

func (s *treeSys) signal(p *os.Process, sig runbox.ProcessSignal) error {
	n, err := unixSignal(sig)
	if err != nil {
		return err
	}
	return killGroup(p.Pid, n)
}

func (s *treeSys) teardown(p *os.Process) error { return killGroup(p.Pid, unix.SIGKILL) }

func (s *treeSys) release() error { return nil }

// result converts the leader's wait status; nothing wraps it here.
func (s *treeSys) result(state *os.ProcessState) runbox.Result { return exitResult(state) }

func (s *treeSys) containment() runbox.LifetimeContainment {
	return runbox.LifetimeContainmentBestEffort
}

func (e *Executor) plannedContainment() runbox.LifetimeContainment {
	return runbox.LifetimeContainmentBestEffort
}

// execSys: macOS keeps nothing between processes.
type execSys struct{}

func (e *Executor) initSys() {}

// initLimits has nothing to enforce limits with on macOS.
func (e *Executor) initLimits(runbox.Resources) {}
func (e *Executor) closeSys() error             { return nil }

// pollableMaster keeps the master as pty.Open returns it: kqueue does not
// reliably support terminal devices on macOS, so reads stay blocking and
// end when the terminal's last process is gone.
func pollableMaster(f *os.File) (*os.File, error) { return f, nil }

// growPipe: macOS pipes cannot be resized.
func growPipe(*os.File) {}
