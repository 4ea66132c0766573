package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/runbox-dev/runbox"
)

// ErrPreparedProcessUsed reports a Start on a [PreparedProcess] that was
// already started or closed: a prepared process is single-use.
var ErrPreparedProcessUsed = errors.New("host: prepared process already started or closed")

// defaultTermSize is the terminal size used when no size is given: 24 rows
// of 80 columns, the classic terminal.
var defaultTermSize = runbox.TermSize{Rows: 24, Cols: 80}

// ProcessOptions describes a streaming process for
// [Executor.PrepareProcess]. Exactly one of Command and Argv must be set.
type ProcessOptions struct {
	// Directory is the working directory; "" means the caller's current
	// directory at preparation time. It must exist and be a directory.
	Directory string
	// Command is run by the platform's command interpreter, as in
	// [Executor.RunCommand].
	Command string
	// Args is run literally, without a shell (runbox.Command's Args).
	Args []string
	// Env holds KEY=VALUE entries applied over the base environment.
	Env []string
	// CleanEnv starts from an empty environment: only Env is set.
	CleanEnv bool
	// TTY runs the process under a pseudo-terminal: stdin, stdout and
	// stderr are all the terminal, so Stderr carries nothing. Platforms
	// without terminals refuse it with runbox.ErrProcessTTYUnsupported.
	TTY bool
	// TermSize is the initial terminal size; zero means 24 rows of 80
	// columns. It requires TTY.
	TermSize runbox.TermSize
	// Grant authorizes a command the policy gates (see
	// [Executor.IssueGrant]). A grant given here is always redeemed and
	// used up, whether or not the command needed it.
	Grant Grant
}

// PreparedProcess is a validated, compiled launch that has not spawned
// anything yet. It is single-use: Start consumes it, and Close releases an
// unstarted one.
type PreparedProcess struct {
	e      *Executor
	spec   *launchSpec
	tty    bool
	size   runbox.TermSize
	access ProcessAccess
	g      runbox.Guarantees

	mu    sync.Mutex
	state int
}

const (
	preparedReady = iota
	preparedStarted
	preparedClosed
)

// PrepareProcess validates o and compiles the launch: the working
// directory is resolved and checked, the program is looked up in the
// child's PATH and the environment is fixed. Nothing is spawned and no
// terminal, pipe or cgroup is created until Start.
//
// Invalid options and directories return an error wrapping
// [runbox.ErrInvalidCommand]; a program that cannot be found wraps
// [runbox.ErrStart]; a terminal on a platform without one wraps
// [runbox.ErrProcessTTYUnsupported].
func (e *Executor) PrepareProcess(ctx context.Context, o ProcessOptions) (*PreparedProcess, error) {
	if err := ctx.Err(); err != nil {
		return nil, cancelled(err)
	}
	hasCommand, hasArgv := o.Command != "", len(o.Args) > 0
	switch {
	case hasCommand && hasArgv:
		return nil, fmt.Errorf("%w: Command and Args are mutually exclusive", runbox.ErrInvalidCommand)
	case !hasCommand && !hasArgv:
		return nil, fmt.Errorf("%w: one of Command or Args is required", runbox.ErrInvalidCommand)
	}
	if o.TTY && !ttySupported {
		return nil, fmt.Errorf("%w: no pseudo-terminal on this platform", runbox.ErrProcessTTYUnsupported)
	}
	size := o.TermSize
	if size != (runbox.TermSize{}) {
		if !o.TTY {
			return nil, fmt.Errorf("%w: TermSize requires TTY", runbox.ErrInvalidCommand)
		}
		if size.Rows == 0 || size.Cols == 0 {
			return nil, fmt.Errorf("%w: terminal size %dx%d has a zero dimension", runbox.ErrInvalidCommand, size.Rows, size.Cols)
		}
	} else {
		size = defaultTermSize
	}
	if hasArgv {
		if err := (runbox.Command{Args: o.Args, Env: o.Env}).Validate(); err != nil {
			return nil, err
		}
	} else if err := runbox.ValidateEnv(o.Env); err != nil {
		return nil, fmt.Errorf("%w: %w", runbox.ErrInvalidCommand, err)
	}
	dir, err := resolveDirectory(o.Directory)
	if err != nil {
		return nil, err
	}
	var grant *Grant
	if o.Grant != (Grant{}) {
		grant = &o.Grant
	}
	spec, err := e.compile(launchRequest{
		dir: dir, argv: o.Args, shell: o.Command,
		env: o.Env, cleanEnv: o.CleanEnv, tty: o.TTY, grant: grant,
	})
	if err != nil {
		return nil, err
	}
	return &PreparedProcess{
		e:      e,
		spec:   spec,
		tty:    o.TTY,
		size:   size,
		access: e.access(),
		g:      e.Guarantees(),
	}, nil
}

// EffectiveAccess returns the write authority every process of this
// executor gets (see [PreparedProcess.EffectiveAccess]).
func (e *Executor) EffectiveAccess() ProcessAccess { return e.access() }

// access is the write authority of the executor's processes: broad without
// a policy (nothing confines them) or with BroadWrite, otherwise the
// canonical writable roots. The private HOME and TMPDIR are the
// executor's scratch space and are not listed.
func (e *Executor) access() ProcessAccess {
	switch {
	case e.conf == nil, e.conf.policy.BroadWrite, e.conf.policy.Unconfined:
		return newProcessAccess(ProcessAccessBroadWrite)
	case len(e.conf.writable) == 0:
		return newProcessAccess(ProcessAccessReadOnly)
	}
	return newProcessAccess(ProcessAccessScopedWrite, e.conf.writable...)
}

// Guarantees reports what is enforced for this process, fixed at
// preparation (see [Executor.Guarantees]).
func (pp *PreparedProcess) Guarantees() runbox.Guarantees {
	g := pp.g
	g.Mechanisms = slices.Clone(g.Mechanisms)
	return g
}

// EffectiveAccess returns the write authority fixed at preparation, as a
// copy the caller cannot use to change it: ProcessAccessBroadWrite
// for an executor without a policy, otherwise what the policy allows.
func (pp *PreparedProcess) EffectiveAccess() ProcessAccess {
	return newProcessAccess(pp.access.Kind(), pp.access.WritePaths()...)
}

// Start spawns the process and returns at once; a supervisor goroutine
// waits for it, so nothing is left behind even if Wait is never called.
// ctx bounds only the start itself: the process's lifetime is ended with
// [Process.Signal] or [Process.Close], like exec.Cmd.Start without a
// context. Start consumes the PreparedProcess even when it fails.
func (pp *PreparedProcess) Start(ctx context.Context) (*Process, error) {
	pp.mu.Lock()
	if pp.state != preparedReady {
		pp.mu.Unlock()
		return nil, ErrPreparedProcessUsed
	}
	pp.state = preparedStarted
	pp.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, cancelled(err)
	}
	if pp.tty {
		return pp.e.startPTY(pp.spec, pp.size)
	}
	return pp.e.startPipes(pp.spec)
}

// Close releases an unstarted PreparedProcess so that it can no longer be
// started. After Start it does nothing; the process is closed with
// [Process.Close]. It never fails.
func (pp *PreparedProcess) Close() error {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.state == preparedReady {
		pp.state = preparedClosed
		pp.spec = nil
	}
	return nil
}

// Start prepares and starts cmd, as PrepareProcess and
// PreparedProcess.Start do, for callers that hold a runbox.Starter: the
// same Command starts a streaming process on the host or in a Docker
// session. It returns a *Process.
func (e *Executor) Start(ctx context.Context, cmd runbox.Command) (runbox.StreamingProcess, error) {
	if err := cmd.ValidateStart(); err != nil {
		return nil, err
	}
	if cmd.User != "" {
		return nil, errUser
	}
	pp, err := e.PrepareProcess(ctx, ProcessOptions{
		Directory: cmd.Dir, Args: cmd.Args, Env: cmd.Env, CleanEnv: cmd.CleanEnv,
		TTY: cmd.TTY, TermSize: cmd.TermSize,
	})
	if err != nil {
		return nil, err
	}
	if err := cmd.Starting(); err != nil {
		pp.Close()
		return nil, err
	}
	p, err := pp.Start(ctx)
	if err != nil {
		pp.Close()
		return nil, err
	}
	return p, nil
}

var _ runbox.Starter = (*Executor)(nil)
