package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/reexec"
	"github.com/runbox-dev/runbox/internal/sandbox"
)

// startConfined starts the stage-2 helper for conf with the stdio that
// build sets up, and waits until the helper reports that the command runs
// (or, for a probe or a prepared sandbox, what it applied). ctl, when not
// nil, is a prepared sandbox's control socket. A setup failure is reaped
// here and returned; nothing is left running.
func (e *Executor) startConfined(conf *sandbox.Spec, build func() *exec.Cmd, ctl *os.File) (*exec.Cmd, *treeSys, []byte, error) {
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
			conf.LimitFDs = append(conf.LimitFDs, sandbox.StatusFD+1+i)
		}
	}
	if ctl != nil {
		conf.ControlFD = sandbox.StatusFD + 1
		if groups != nil {
			conf.ControlFD += len(groups.tasks)
		}
	}
	spec, err := sandbox.SpecFile(conf)
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
		c.Env = []string{reexec.Env + "=" + sandbox.Name}
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
	cmd, ts, err := e.startPlaced(wrapped, func(cg int) *syscall.SysProcAttr { return sandbox.ProcAttr(conf.Network, cg) })
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
	payload, err := sandbox.AwaitReport(statusR, true)
	if err == nil {
		return cmd, ts, payload, nil
	}
	// The helper failed (or died): make sure it is gone and reaped.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	_ = ts.teardown(cmd.Process)
	_ = ts.release()
	if errors.Is(err, sandbox.ErrHelperGone) {
		err = fmt.Errorf("%w (%s)", err, cmd.ProcessState)
	}
	return nil, nil, nil, err
}

// result is the sandboxed command's outcome as the helper reported it, or
// the helper's own when it sent none (it was killed, for example).
func (s *treeSys) result(state *os.ProcessState) runbox.Result {
	if s.status != nil {
		if res, ok := sandbox.ReadResult(s.status); ok {
			return res
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
