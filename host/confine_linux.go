package host

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/reexec"
)

// stage2Name is the helper name [runbox.Init] dispatches to.
const stage2Name = "host-sandbox"

func init() { reexec.Register(stage2Name, stage2Main) }

// helperStartTimeout bounds how long Start waits for the helper to report
// that the command runs. Setting up takes milliseconds; this only catches a
// helper that hangs.
const helperStartTimeout = 30 * time.Second

// Status messages from the helper: one byte of kind, a 4-byte big-endian
// length, the payload.
const (
	statusRunning = 'R' // the command was executed
	statusProbe   = 'P' // probe: payload is the JSON list of mechanisms
	statusError   = 'E' // setup failed: payload is the message
	statusExit    = 'X' // payload: 4-byte exit code
	statusSignal  = 'S' // payload: 4-byte signal number
)

func writeStatus(w io.Writer, kind byte, payload []byte) error {
	b := make([]byte, 5+len(payload))
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:5], uint32(len(payload)))
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

// maxStatusPayload bounds a message so that a broken helper cannot make the
// parent allocate without limit.
const maxStatusPayload = 1 << 16

func readStatus(r io.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxStatusPayload {
		return 0, nil, fmt.Errorf("helper status of %d bytes", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	return h[0], p, nil
}

// confinedProcAttr starts the helper as the init of new user, mount, PID
// and IPC namespaces (and a network namespace unless the network is
// allowed), mapping the caller's uid and gid to root inside, which gives it
// the capabilities it needs there to build the sandbox, and nothing
// outside.
func confinedProcAttr(network bool, cgroupFD int) *syscall.SysProcAttr {
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC)
	if !network {
		flags |= unix.CLONE_NEWNET
	}
	a := &syscall.SysProcAttr{
		// The helper leads a session of its own; the command gets another
		// one (and the terminal) inside.
		Setsid:      true,
		Pdeathsig:   syscall.SIGKILL,
		Cloneflags:  flags,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	if cgroupFD >= 0 {
		a.UseCgroupFD = true
		a.CgroupFD = cgroupFD
	}
	return a
}

// specFile returns conf as JSON in a sealed memory file for the helper's
// fd 3: no size limit, nothing on disk, nothing in the environment.
func specFile(conf *spawnConf) (*os.File, error) {
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("runbox-sandbox-spec", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "runbox-sandbox-spec")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	_, _ = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// startConfined starts the stage-2 helper for conf with the stdio that
// build sets up, and waits until the helper reports that the command runs
// (or, for a probe or a prepared sandbox, what it applied). ctl, when not
// nil, is a prepared sandbox's control socket. A setup failure is reaped
// here and returned; nothing is left running.
func (e *Executor) startConfined(conf *spawnConf, build func() *exec.Cmd, ctl *os.File) (*exec.Cmd, *treeSys, []byte, error) {
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sandbox status pipe: %w", err)
	}
	var groups *limitGroups
	if plan := e.sys.limits; plan != nil && !plan.v2 {
		if groups, err = plan.newGroups(); err != nil {
			closeFiles(statusR, statusW)
			return nil, nil, nil, fmt.Errorf("sandbox limits: %w", err)
		}
		// The spec is written now, but only the helper reads it: the
		// descriptors follow the spec and status, from fd 5 up.
		conf.LimitFDs, conf.LimitNames = nil, groups.names
		for i := range groups.tasks {
			conf.LimitFDs = append(conf.LimitFDs, helperStatusFD+1+i)
		}
	}
	if ctl != nil {
		conf.ControlFD = helperStatusFD + 1
		if groups != nil {
			conf.ControlFD += len(groups.tasks)
		}
	}
	spec, err := specFile(conf)
	if err != nil {
		closeFiles(statusR, statusW)
		if groups != nil {
			_ = groups.remove()
		}
		return nil, nil, nil, fmt.Errorf("sandbox spec: %w", err)
	}
	defer spec.Close()
	wrapped := func() *exec.Cmd {
		c := build()
		// /proc/self/exe is this very binary, whatever happened to its path.
		c.Path = "/proc/self/exe"
		if e.cfg.helper != "" {
			c.Path = e.cfg.helper
		}
		c.Args = []string{"runbox-sandbox"}
		c.Env = []string{reexec.Env + "=" + stage2Name}
		c.Dir = ""
		c.ExtraFiles = []*os.File{spec, statusW}
		if groups != nil {
			c.ExtraFiles = append(c.ExtraFiles, groups.tasks...)
		}
		if ctl != nil {
			c.ExtraFiles = append(c.ExtraFiles, ctl)
		}
		return c
	}
	cmd, ts, err := e.startPlaced(wrapped, func(cg int) *syscall.SysProcAttr { return confinedProcAttr(conf.Network, cg) })
	statusW.Close()
	if groups != nil {
		groups.closeTasks()
	}
	if err != nil {
		statusR.Close()
		if groups != nil {
			_ = groups.remove()
		}
		return nil, nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	ts.pidns, ts.status, ts.groups = true, statusR, groups
	_ = statusR.SetReadDeadline(time.Now().Add(helperStartTimeout))
	kind, payload, err := readStatus(statusR)
	_ = statusR.SetReadDeadline(time.Time{})
	if err == nil && (kind == statusRunning || kind == statusProbe) {
		return cmd, ts, payload, nil
	}
	// The helper failed (or died): make sure it is gone and reaped.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	_ = ts.teardown(cmd.Process)
	_ = ts.release()
	switch {
	case err != nil:
		return nil, nil, nil, fmt.Errorf("sandbox helper ended before running the command (%s): %w", cmd.ProcessState, err)
	case kind == statusError:
		return nil, nil, nil, fmt.Errorf("sandbox: %s", payload)
	}
	return nil, nil, nil, fmt.Errorf("sandbox helper sent unexpected status %q", kind)
}

// result is the sandboxed command's outcome as the helper reported it, or
// the helper's own when it sent none (it was killed, for example).
func (s *treeSys) result(state *os.ProcessState) runbox.Result {
	if s.status != nil {
		if kind, p, err := readStatus(s.status); err == nil && len(p) == 4 {
			n := int(binary.BigEndian.Uint32(p))
			switch kind {
			case statusExit:
				return runbox.Result{ExitCode: n}
			case statusSignal:
				sig := syscall.Signal(n)
				name := unix.SignalName(sig)
				if name == "" {
					name = fmt.Sprintf("signal %d", n)
				}
				return runbox.Result{ExitCode: 128 + n, Signal: name}
			}
		}
	}
	return exitResult(state)
}

// probeConfinement runs the helper once through the whole sandbox set-up,
// without a command, and derives the guarantees from what it actually
// applied.
func (e *Executor) probeConfinement() (runbox.Guarantees, error) {
	cp := e.conf
	g := runbox.Guarantees{EnvScrub: !e.cfg.inheritEnv, Lifetime: e.plannedContainment()}
	if cp.policy.Unconfined {
		return g, nil
	}
	if !reexec.Initialized() && e.cfg.helper == "" {
		return g, fmt.Errorf("%w: the program must call runbox.Init() first in main (and in TestMain) so that the sandbox helper can run", ErrConfinementUnavailable)
	}
	// The probe's sandbox is the first prepared one, shaped for a command
	// in the current directory: it serves the executor's first launch, so
	// that a program that confines one command builds one sandbox.
	dir, err := canonicalPath(".")
	if err != nil {
		if dir, err = canonicalPath("/"); err != nil {
			return g, err
		}
	}
	ps, err := e.prepareSandbox(&launchSpec{dir: dir}, true)
	if err != nil {
		return g, fmt.Errorf("%w: %w", ErrConfinementUnavailable, err)
	}
	conf, ts, payload := ps.shape, ps.ts, ps.mech
	keep, dropped := false, false
	defer func() {
		if keep {
			e.sys.sandboxes.add(ps)
		} else {
			ps.discard()
		}
	}()
	var mech []string
	if err := json.Unmarshal(payload, &mech); err != nil {
		return g, fmt.Errorf("%w: sandbox probe: %w", ErrConfinementUnavailable, err)
	}
	proven := slices.Clone(mech)
	has := func(m string) bool { return slices.Contains(mech, m) }
	landlock := slices.ContainsFunc(mech, func(m string) bool { return strings.HasPrefix(m, "landlock-abi-") })
	g.ProcessBoundary = has("pid-ns") && has("proc")
	g.WriteBoundary = !conf.BroadWrite && has("mount-ro")
	g.ReadBoundary = conf.Readable != nil && landlock
	g.NetworkBoundary = !conf.Network && has("net-ns")
	if has("pid-ns") {
		g.Lifetime = runbox.LifetimeContainmentEnforced
	}
	if e.sys.pool != nil && !e.sys.broken.Load() {
		mech = append(mech, "cgroup")
	}
	if plan := e.sys.limits; plan != nil {
		if plan.v2 && ts.cg != nil {
			// The probe ran in a per-process cgroup with the limits written.
			mech = append(mech, plan.mechanisms()...)
		}
		g.ResourceLimits = !slices.ContainsFunc(plan.mechanisms(), func(m string) bool { return !slices.Contains(mech, m) })
		if !g.ResourceLimits {
			// Reported as not enforced; later launches do not pretend,
			// and the probe's sandbox, which had them, serves none.
			e.sys.limits = nil
			dropped = true
			if e.sys.pool != nil {
				e.sys.pool.Setup = nil
			}
			proven = slices.DeleteFunc(proven, func(m string) bool { return strings.HasPrefix(m, "cgroup-v1-") })
		}
	}
	cp.proven = proven
	g.Mechanisms = mech
	// A sandbox whose limits were not all applied is not what later
	// launches get.
	keep = !dropped
	return g, nil
}

// errHelperNoCommand is reported when a helper spec has no program.
var errHelperNoCommand = errors.New("no program to run")
