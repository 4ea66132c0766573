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
	"github.com/runbox-dev/runbox/internal/cgroup"
)

// treeSys is the Linux handle on a process tree: its process group, and its
// cgroup when one could be used.
type treeSys struct {
	cg   *cgroup.Group // nil: process-group containment only
	pool *cgroup.Pool
	// breached is set when the cgroup could not be emptied, so that
	// containment is no longer reported as enforced.
	breached atomic.Bool
	// pidns is set for a sandboxed tree: its leader is the init of a PID
	// namespace, whose death kills every process in it.
	pidns bool
	// status carries the sandboxed command's outcome from the helper.
	status *os.File
	// groups are the launch's cgroup v1 limit groups; nil without.
	groups *limitGroups
	// before holds the limit counters of a reused cgroup v2 group at the
	// start, and hits the limits the tree ran into, set by teardown.
	before map[string]int64
	hits   []string
}

// execSys is the executor's Linux state.
type execSys struct {
	pool *cgroup.Pool // nil: no usable cgroup v2 hierarchy
	// broken is set when the kernel refused to spawn into a cgroup although
	// the probe succeeded, so later spawns skip the attempt.
	broken atomic.Bool
	// limits enforces the policy's Resources; nil: none asked for, or none
	// enforceable here.
	limits *limitPlan
	// sandboxes holds the prepared sandboxes of a confined executor.
	sandboxes *sandboxPool
}

func (e *Executor) initSys() {
	if e.cfg.policy != nil && !e.cfg.policy.Unconfined {
		e.sys.sandboxes = newSandboxPool(e.cfg.prepared)
		runtime.AddCleanup(e, func(p *sandboxPool) { p.close() }, e.sys.sandboxes)
	}
	if e.cfg.noCgroup {
		return
	}
	if root := cgroup.ProbeRoot(); root != "" {
		e.sys.pool = cgroup.NewPool(root)
		// The cleanup must not reference e, or e would never be collected.
		runtime.AddCleanup(e, func(p *cgroup.Pool) { _ = p.Close() }, e.sys.pool)
	}
}

// initLimits plans the policy's resource limits. With cgroup v2 every
// per-process cgroup gets them at creation.
func (e *Executor) initLimits(res runbox.Resources) {
	plan := e.planLimits(res)
	e.sys.limits = plan
	if plan != nil && plan.v2 {
		files := plan.v2Files()
		e.sys.pool.Setup = func(dir string) error { return writeLimits(dir, files) }
	}
}

// limitedV2 reports whether every process must be in a per-process cgroup
// because that is what enforces the limits.
func (e *Executor) limitedV2() bool { return e.sys.limits != nil && e.sys.limits.v2 }

// refillSandboxes prepares the next sandboxes in the background, shaped
// like spec.
func (e *Executor) refillSandboxes(spec *launchSpec) {
	shape := &launchSpec{dir: spec.dir, path: spec.path}
	e.sys.sandboxes.refill(shape, func(s *launchSpec) (*preparedSandbox, error) {
		return e.prepareSandbox(s, false)
	})
}

func (e *Executor) closeSys() error {
	if e.sys.sandboxes != nil {
		e.sys.sandboxes.close()
	}
	if e.sys.pool == nil {
		return nil
	}
	return e.sys.pool.Close()
}

// startTree starts the process in a new session with Pdeathsig, inside its
// own cgroup when the executor has a usable cgroup v2 root. A confined
// launch starts the stage-2 helper instead (see confine_linux.go).
func (e *Executor) startTree(spec *launchSpec, build func() *exec.Cmd, tty bool) (*exec.Cmd, *treeSys, error) {
	if spec.conf != nil {
		if !tty {
			if ps := e.sys.sandboxes.take(spec.conf); ps != nil {
				cmd, ts, retry, err := ps.start(spec.conf, build)
				e.refillSandboxes(spec)
				if !retry {
					return cmd, ts, err
				}
			}
		}
		cmd, ts, _, err := e.startConfined(spec.conf, build, nil)
		if !tty {
			e.refillSandboxes(spec)
		}
		return cmd, ts, err
	}
	return e.startPlaced(build, func(cgroupFD int) *syscall.SysProcAttr { return linuxProcAttr(tty, cgroupFD) })
}

// startPlaced starts build's command with attr, inside its own cgroup when
// the executor has a usable cgroup v2 root. If the kernel refuses the
// cgroup the spawn is retried without it, and the process then reports
// best-effort containment (unless a PID namespace contains it).
func (e *Executor) startPlaced(build func() *exec.Cmd, attr func(cgroupFD int) *syscall.SysProcAttr) (*exec.Cmd, *treeSys, error) {
	if pool := e.sys.pool; pool != nil && !e.sys.broken.Load() {
		cg, err := pool.Get()
		if err == nil {
			cmd := build()
			cmd.SysProcAttr = attr(cg.FD())
			ts := &treeSys{cg: cg, pool: pool}
			if e.limitedV2() {
				ts.before = limitCounters(cg.Dir())
			}
			firstErr := startLocked(cmd)
			if firstErr == nil {
				return cmd, ts, nil
			}
			_ = cg.Remove()
			if e.limitedV2() {
				// Without its cgroup the tree would run unlimited.
				return nil, nil, fmt.Errorf("limited cgroup: %w", firstErr)
			}
			cmd = build()
			cmd.SysProcAttr = attr(-1)
			if err := startLocked(cmd); err != nil {
				return nil, nil, err
			}
			// The program starts, so the cgroup was what failed. Unless that
			// was a transient shortage, stop paying for a doomed attempt.
			if !errors.Is(firstErr, syscall.EAGAIN) && !errors.Is(firstErr, syscall.ENOMEM) {
				e.sys.broken.Store(true)
			}
			return cmd, &treeSys{}, nil
		} else if e.limitedV2() {
			return nil, nil, fmt.Errorf("limited cgroup: %w", err)
		}
	}
	if e.limitedV2() {
		return nil, nil, errors.New("limited cgroup: the cgroup hierarchy is unusable")
	}
	cmd := build()
	cmd.SysProcAttr = attr(-1)
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
			cgErr = s.cg.Kill()
		case runbox.ProcessSignalTerminate:
			cgErr = s.cg.SignalAll(n)
		}
	}
	return errors.Join(cgErr, killGroup(p.Pid, n))
}

// teardown kills whatever the leader left behind and, with a cgroup, makes
// sure the kernel reports it empty.
func (s *treeSys) teardown(p *os.Process) error {
	// The group is signalled either way: it also reaches a member that moved
	// itself out of the cgroup but not out of the group.
	groupErr := killGroup(p.Pid, unix.SIGKILL)
	s.recordHits()
	if s.cg == nil {
		return groupErr
	}
	if pop, err := s.cg.Populated(); err == nil && !pop {
		return groupErr // the common case: nothing was left behind
	}
	if err := s.cg.Drain(cleanupTimeout); err != nil {
		s.breached.Store(true)
		return err
	}
	return groupErr
}

// release hands the emptied cgroup back for reuse (or removes it) once the
// leader has been reaped. A cgroup that could not be emptied is left alone:
// teardown has reported it.
func (s *treeSys) release() error {
	if s.status != nil {
		s.status.Close()
	}
	if s.groups != nil {
		if err := s.groups.remove(); err != nil {
			return err
		}
	}
	switch {
	case s.cg == nil:
		return nil
	case s.breached.Load():
		s.cg.CloseFDs()
		return nil
	}
	return s.pool.Put(s.cg)
}

func (s *treeSys) containment() runbox.LifetimeContainment {
	if s.pidns || (s.cg != nil && !s.breached.Load()) {
		return runbox.LifetimeContainmentEnforced
	}
	return runbox.LifetimeContainmentBestEffort
}

func (e *Executor) plannedContainment() runbox.LifetimeContainment {
	if e.sys.pool != nil && !e.sys.broken.Load() {
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

// pipeSize is what growPipe asks for: four times the default, so that a
// heavy writer blocks less often, yet small enough not to eat into the
// per-user pipe quota (a user over it gets one-page pipes afterwards).
const pipeSize = 256 << 10

// growPipe enlarges the pipe behind w, best-effort: the kernel may refuse
// (pipe-max-size, per-user quota), and the default size still works.
func growPipe(w *os.File) {
	if rc, err := w.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
}

// recordHits notes which limits stopped something in the tree.
func (s *treeSys) recordHits() {
	switch {
	case s.groups != nil:
		total := map[string]int64{}
		for _, d := range s.groups.dirs {
			for k, v := range limitCounters(d) {
				total[k] += v
			}
		}
		s.hits = hitSince(nil, total)
	case s.before != nil && s.cg != nil:
		s.hits = hitSince(s.before, limitCounters(s.cg.Dir()))
	}
}

// limitsHit returns what recordHits found.
func (s *treeSys) limitsHit() []string { return s.hits }
