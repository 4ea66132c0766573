// Package host runs commands on the controlling machine with the full
// process lifecycle: argument vectors without a shell, explicit shell
// commands, output limits, streaming processes with pipes or a
// pseudo-terminal, signals, and teardown of the whole process tree.
//
// The host backend implements [runbox.Process] only. It has no images,
// sessions or snapshots. Without [WithPolicy] it confines nothing: a host
// process runs with the caller's full authority (user, files, network).
// With a policy every process is confined (on Linux: namespaces, Landlock,
// seccomp; on macOS: Seatbelt; on Windows: a job object), and
// [Executor.Guarantees] reports what is really enforced; a program that
// confines must call [runbox.Init] first in main. Either way the lifecycle
// is honest: every process it starts is waited for, its descendants are
// torn down when it ends, and [Process.LifetimeContainment] reports how
// strong that teardown really was.
//
// The API follows os/exec: [Executor.PrepareProcess] corresponds to
// building an exec.Cmd, [PreparedProcess.Start] to Cmd.Start and
// [Process.Wait] to Cmd.Wait, with the differences documented on each
// method. See docs/host.md for the full contract and the per-platform
// table of what is enforced.
package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runbox-dev/runbox"
)

// ErrSignaled reports, for the output-collecting helpers ([Executor.RunArgv]
// and friends), that the process was ended by a signal runbox did not send.
// [Executor.Run] and [Process.Wait] report such an ending as a
// [runbox.Result] with Signal set instead.
var ErrSignaled = errors.New("host: process ended by a signal")

// DefaultWaitDelay is how long Run waits for inherited pipes to close
// after the process exited; see [WithWaitDelay]. Terminate's grace period
// is [runbox.DefaultTerminateGrace], as on every backend.
const (
	DefaultWaitDelay = time.Second
	// cleanupTimeout bounds how long teardown waits for a killed tree to
	// disappear before it reports runbox.ErrCleanup.
	cleanupTimeout = 10 * time.Second
)

// Option configures an [Executor].
type Option func(*config) error

type config struct {
	inheritEnv bool
	grace      time.Duration
	waitDelay  time.Duration
	noCgroup   bool
	policy     *Policy
	helper     string // the stage-2 helper program; "" re-executes this binary
	prepared   int    // sandboxes kept ready (Linux)
}

// DefaultPreparedSandboxes is how many prepared sandboxes a confined
// executor keeps ready unless [WithPreparedSandboxes] says otherwise.
const DefaultPreparedSandboxes = 1

// WithPreparedSandboxes sets how many sandboxes a confined executor keeps
// ready for its next commands (Linux). A prepared sandbox is built in the
// background, before its command is known (namespaces, root, /proc, /dev,
// cgroup, and the restrictions on the thread that will start the command),
// and then runs exactly one command, so a launch pays only for sending
// the command. It is an idle process per sandbox; nothing in it is shared
// between commands. The sandbox New builds to probe the host always serves
// the first command; n is how many are kept ready after that, and 0 builds
// each later sandbox when its command starts. A sandbox is shaped for a
// working directory and program (what the sandbox binds in and Landlock
// allows), so a launch elsewhere gets a cold one and the next ones follow
// it.
func WithPreparedSandboxes(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("%w: prepared sandboxes must not be negative, got %d", runbox.ErrInvalidCommand, n)
		}
		c.prepared = n
		return nil
	}
}

// WithHelper runs the Linux sandbox's stage-2 helper from the program at
// path instead of re-executing the current binary. The program must link
// this package and call runbox.Init first in main, as cmd/runbox-sandbox
// does. A small dedicated helper starts faster than a large program re-run,
// and the calling program then need not call runbox.Init itself.
func WithHelper(path string) Option {
	return func(c *config) error {
		if path == "" {
			return fmt.Errorf("host: WithHelper: empty path")
		}
		c.helper = path
		return nil
	}
}

// WithInheritEnv makes children inherit the caller's whole environment
// instead of the small base environment (see docs/host.md). Command.Env
// and ProcessOptions.Env are still applied on top.
func WithInheritEnv() Option {
	return func(c *config) error { c.inheritEnv = true; return nil }
}

// WithTerminateGrace sets how long [runbox.ProcessSignalTerminate] waits
// after SIGTERM before it kills the process tree. It must be positive; the
// default is [runbox.DefaultTerminateGrace], the Docker backend's too.
func WithTerminateGrace(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("host: grace period must be positive, got %v", d)
		}
		c.grace = d
		return nil
	}
}

// WithWaitDelay bounds how long Run and the output helpers keep reading a
// process's output and input after its tree has been torn down, like
// exec.Cmd.WaitDelay. It only matters when a descendant escaped teardown
// (best-effort containment) and still holds the pipes. It must be
// positive; the default is [DefaultWaitDelay].
func WithWaitDelay(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("host: wait delay must be positive, got %v", d)
		}
		c.waitDelay = d
		return nil
	}
}

// WithoutCgroup disables the per-process cgroup on Linux, leaving only
// process-group teardown ([runbox.LifetimeContainmentBestEffort]). Use it
// when the caller manages cgroups itself.
func WithoutCgroup() Option {
	return func(c *config) error { c.noCgroup = true; return nil }
}

// Executor runs host commands. It is safe for concurrent use; each call
// starts an independent process.
type Executor struct {
	cfg    config
	sys    execSys         // platform state (Linux: the cgroups)
	conf   *compiledPolicy // nil: unconfined, as before policies existed
	grants grantStore
	closed atomic.Bool // a confined executor refuses spawns after Close
}

var _ runbox.Process = (*Executor)(nil)

// New returns an Executor. On Linux it probes once for a writable cgroup v2
// hierarchy; when none is found, processes still run, with best-effort
// containment.
func New(opts ...Option) (*Executor, error) {
	e := &Executor{cfg: config{grace: runbox.DefaultTerminateGrace, waitDelay: DefaultWaitDelay, prepared: DefaultPreparedSandboxes}}
	for _, o := range opts {
		if err := o(&e.cfg); err != nil {
			return nil, err
		}
	}
	e.initSys()
	if e.cfg.policy != nil {
		cp, err := compilePolicy(e.cfg.policy)
		if err != nil {
			_ = e.closeSys()
			return nil, err
		}
		cp.inheritEnv = e.cfg.inheritEnv
		e.conf = cp
		e.initLimits(cp.policy.Resources)
		g, err := e.probeConfinement()
		if err == nil {
			want := cp.requested()
			g.Level = level(g, cp.limitsWanted())
			if miss := g.Missing(want); len(miss) > 0 {
				err = fmt.Errorf("%w: this host cannot enforce %s", ErrConfinementUnavailable, strings.Join(miss, ", "))
				if want.ResourceLimits && !g.ResourceLimits {
					err = fmt.Errorf("%w (%w)", err, ErrLimitsUnavailable)
				}
			}
		}
		if err != nil {
			_ = e.closeSys()
			_ = os.RemoveAll(cp.private)
			return nil, err
		}
		cp.g = g
	}
	return e, nil
}

// Guarantees reports what the executor enforces for every process it
// starts. An executor without [WithPolicy] confines nothing: its level is
// none, and only the scrubbed environment (unless [WithInheritEnv]) and
// teardown are reported.
func (e *Executor) Guarantees() runbox.Guarantees {
	if e.conf != nil {
		g := e.conf.g
		g.Mechanisms = slices.Clone(g.Mechanisms)
		return g
	}
	return runbox.Guarantees{EnvScrub: !e.cfg.inheritEnv, Lifetime: e.plannedContainment()}
}

// IssueGrant returns a single-use grant for one command in one working
// directory, valid for ttl. [Executor.PrepareProcess] consumes it when its
// ProcessOptions name exactly that command (the same Command string or
// Args) and directory; a replay, another command or directory, or an
// expired grant fails with [ErrGrantUsed], [ErrGrantMismatch] or
// [ErrGrantExpired].
func (e *Executor) IssueGrant(req GrantRequest, ttl time.Duration) (Grant, error) {
	if ttl <= 0 {
		return Grant{}, fmt.Errorf("%w: grant lifetime must be positive, got %v", runbox.ErrInvalidCommand, ttl)
	}
	argv, dir, err := e.normalize(req.Directory, req.Command, req.Args)
	if err != nil {
		return Grant{}, err
	}
	return e.grants.issue(argv, dir, ttl)
}

// normalize turns a command and directory into what admission and grants
// compare: the argument vector the backend runs and the resolved (with a
// policy, canonical) directory.
func (e *Executor) normalize(dir, command string, argv []string) ([]string, string, error) {
	switch {
	case command != "" && len(argv) > 0:
		return nil, "", fmt.Errorf("%w: Command and Args are mutually exclusive", runbox.ErrInvalidCommand)
	case command != "":
		if err := validateShellCommand(command); err != nil {
			return nil, "", err
		}
		a, _, err := shellArgv(command)
		if err != nil {
			return nil, "", err
		}
		argv = a
	case len(argv) == 0:
		return nil, "", fmt.Errorf("%w: one of Command or Args is required", runbox.ErrInvalidCommand)
	default:
		if err := (runbox.Command{Args: argv}).Validate(); err != nil {
			return nil, "", err
		}
	}
	d, err := resolveDirectory(dir)
	if err != nil {
		return nil, "", err
	}
	if e.conf != nil {
		if d, err = canonicalPath(d); err != nil {
			return nil, "", fmt.Errorf("%w: directory: %w", runbox.ErrInvalidCommand, err)
		}
	}
	return slices.Clone(argv), d, nil
}

// Close releases what the executor keeps between processes: on Linux, the
// emptied cgroups it reuses (reusing one is markedly cheaper for the kernel
// than creating one). Running processes are not affected, and the executor
// stays usable, without that cache. An executor that is never closed
// releases the cache when it is garbage collected, and a program that exits
// without either leaves at most a few empty cgroups, which a later New
// removes.
//
// A confined executor also removes its private HOME and TMPDIR, so close it
// only after its processes have ended; it refuses new processes after
// that.
func (e *Executor) Close() error {
	err := e.closeSys()
	if e.conf != nil {
		e.closed.Store(true)
		err = errors.Join(err, os.RemoveAll(e.conf.private))
	}
	if err != nil {
		return fmt.Errorf("%w: %w", runbox.ErrCleanup, err)
	}
	return nil
}

// Containment reports the strongest containment this executor will attempt
// for new processes. The level actually achieved by each process is
// reported by [Process.LifetimeContainment].
func (e *Executor) Containment() runbox.LifetimeContainment {
	return e.plannedContainment()
}

// Run implements [runbox.Process]. It starts cmd in its own process group
// (and, on Linux when available, its own cgroup), waits for it, and tears
// down any descendants it left behind.
//
// A process that exits yields its Result, whatever the code. A process
// ended by a signal runbox did not send yields Result{ExitCode: 128+N,
// Signal: "SIGxxx"} and no error. When ctx ends first, the tree is killed
// and Run returns an error wrapping [runbox.ErrCancelled] and ctx.Err().
// Other failures wrap [runbox.ErrStart] or [runbox.ErrCleanup]; with an
// error the Result's ExitCode is -1.
//
// Streams writers that are *os.File receive the process's output directly;
// other writers are fed by one copying goroutine per distinct writer, and
// all writes are serialized. A writer that returns an error stops
// receiving output (the rest is discarded so the process is not blocked)
// and Run returns that error. Run never closes the writers and does not
// use them after it returns. A non-nil cmd.Stdin that is not an *os.File
// is copied by a goroutine; Run stops waiting for it once the process has
// ended and the wait delay has passed.
//
// With cmd.TTY the process runs under a new pseudo-terminal of
// cmd.TermSize (zero: 24x80); all its output, stderr included,
// goes to streams.Stdout, cmd.Stdin is typed into the terminal (its end is
// not an EOF: send Ctrl-D), and sizes from cmd.Resize are applied until Run
// returns. Platforms without terminals return an error wrapping
// [runbox.ErrProcessTTYUnsupported]; pipes never stand in for a terminal.
// TermSize and Resize without TTY are refused (runbox.Command.Validate).
func (e *Executor) Run(ctx context.Context, cmd runbox.Command, streams runbox.Streams) (runbox.Result, error) {
	return runbox.RunLimited(ctx, cmd, streams, func(ctx context.Context, streams runbox.Streams) (runbox.Result, error) {
		return e.run(ctx, cmd, streams)
	})
}

func (e *Executor) run(ctx context.Context, cmd runbox.Command, streams runbox.Streams) (runbox.Result, error) {
	failed := runbox.Result{ExitCode: -1}
	if err := cmd.Validate(); err != nil {
		return failed, err
	}
	if cmd.User != "" {
		return failed, errUser
	}
	if err := ctx.Err(); err != nil {
		return failed, cancelled(err)
	}
	req := runRequest{stdin: cmd.Stdin, streams: streams, starting: cmd.Starting}
	if cmd.TTY {
		if !ttySupported {
			return failed, fmt.Errorf("%w: no pseudo-terminal on this platform", runbox.ErrProcessTTYUnsupported)
		}
		size, err := ttySize(cmd.TermSize)
		if err != nil {
			return failed, err
		}
		req.size, req.resize = size, cmd.Resize
	}
	spec, err := e.compile(launchRequest{dir: cmd.Dir, argv: cmd.Args, env: cmd.Env, cleanEnv: cmd.CleanEnv, tty: cmd.TTY})
	if err != nil {
		return failed, err
	}
	req.spec = spec
	res, _, err := e.runLaunch(ctx, req)
	return res, err
}

// RunArgv runs argv literally (no shell is inserted, so metacharacters
// reach the program unchanged) in dir ("" for the current directory) and
// returns its combined stdout and stderr.
//
// A process that exits yields (output, code, nil) whatever the code.
// Anything else returns code -1, the output collected so far, and an error:
// [runbox.ErrStart] when it could not be started, [runbox.ErrCancelled]
// together with ctx.Err() when ctx ended first, [ErrSignaled] when a signal
// runbox did not send ended it, [runbox.ErrCleanup] when teardown failed.
func (e *Executor) RunArgv(ctx context.Context, dir string, argv []string) ([]byte, int, error) {
	return e.runArgv(ctx, dir, argv, 0)
}

// RunCommand runs command with the platform's command interpreter: /bin/sh
// -c on Unix, and on Windows cmd.exe from the system directory (never
// found through PATH). Results are as for [Executor.RunArgv].
func (e *Executor) RunCommand(ctx context.Context, dir, command string) ([]byte, int, error) {
	if strings.IndexByte(dir, 0) >= 0 {
		return nil, -1, fmt.Errorf("%w: directory contains a NUL byte", runbox.ErrInvalidCommand)
	}
	return e.runCombined(ctx, launchRequest{dir: dir, shell: command}, 0)
}

// RunArgvLimited is [Executor.RunArgv] with a bound on the combined output.
// limit must be positive. Once the output passes limit bytes, the process
// tree is killed, exactly limit bytes are returned with code -1, and the
// error wraps [runbox.ErrOutputLimit]. Memory use is bounded by limit plus
// one copy buffer, however much the process writes.
func (e *Executor) RunArgvLimited(ctx context.Context, dir string, argv []string, limit int) ([]byte, int, error) {
	if limit <= 0 {
		return nil, -1, fmt.Errorf("%w: output limit must be positive, got %d", runbox.ErrInvalidCommand, limit)
	}
	return e.runArgv(ctx, dir, argv, limit)
}

func (e *Executor) runArgv(ctx context.Context, dir string, argv []string, limit int) ([]byte, int, error) {
	if err := (runbox.Command{Args: argv, Dir: dir}).Validate(); err != nil {
		return nil, -1, err
	}
	return e.runCombined(ctx, launchRequest{dir: dir, argv: argv}, limit)
}

// runCombined runs req with stdout and stderr collected into one buffer,
// bounded by limit when it is positive, and reports a signal that ended
// the process as ErrSignaled.
func (e *Executor) runCombined(ctx context.Context, req launchRequest, limit int) ([]byte, int, error) {
	spec, err := e.compile(req)
	if err != nil {
		return nil, -1, err
	}
	res, b, err := e.runLaunch(ctx, runRequest{spec: spec, combined: true, limit: limit})
	switch {
	case err != nil:
		return b, -1, err
	case res.Signal != "":
		return b, -1, fmt.Errorf("%w: %s", ErrSignaled, res.Signal)
	}
	return b, res.ExitCode, nil
}

// await waits for a process supervised by another goroutine. When ctx ends
// first it kills the tree, waits for the supervisor, and returns the
// cancellation error.
func (e *Executor) await(ctx context.Context, p *proc) error {
	for {
		select {
		case <-p.done:
			return nil
		case <-ctx.Done():
			select {
			case <-p.done:
				// It finished before we noticed: report what happened.
				return nil
			default:
			}
			p.kill()
			<-p.done
			return cancelled(ctx.Err())
		}
	}
}

// fileOrNil keeps a nil *os.File from becoming a non-nil io.Writer, which
// os/exec would try to use.
func fileOrNil(f *os.File) io.Writer {
	if f == nil {
		return nil
	}
	return f
}

// cancelled wraps a context error so that it matches both
// runbox.ErrCancelled and the context's own error.
func cancelled(ctxErr error) error {
	return fmt.Errorf("%w: %w", runbox.ErrCancelled, ctxErr)
}

// joinCleanup adds p's teardown failure, if any, to err so that both can be
// matched with errors.Is.
func joinCleanup(err error, p *proc) error {
	if p.cleanupErr != nil {
		return errors.Join(err, p.cleanupErr)
	}
	return err
}

// stdinCopier feeds a Command.Stdin reader that is not a file to the child
// through a pipe.
type stdinCopier struct {
	r      io.Reader
	file   *os.File // the reader itself when it is a file
	pr, pw *os.File
	done   chan struct{}
	once   sync.Once
}

func newStdinCopier(r io.Reader) (*stdinCopier, error) {
	s := &stdinCopier{r: r}
	if r == nil {
		return s, nil
	}
	if f, ok := r.(*os.File); ok {
		s.file = f
		return s, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.pr, s.pw = pr, pw
	return s, nil
}

// childSide returns what the child's stdin should be: nil (the null
// device), the caller's file, or the read end of our pipe.
func (s *stdinCopier) childSide() io.Reader {
	switch {
	case s.file != nil:
		return s.file
	case s.pr != nil:
		return s.pr
	}
	return nil
}

func (s *stdinCopier) abort() {
	if s.pr != nil {
		s.pr.Close()
		s.pw.Close()
	}
}

func (s *stdinCopier) start() {
	if s.pr == nil {
		return
	}
	// The child holds its own copy of the read end now.
	s.pr.Close()
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		// Errors are expected when the child stops reading (EPIPE) or when
		// finish closes the pipe; neither concerns the caller.
		_, _ = io.Copy(s.pw, s.r)
		s.closePipe()
	}()
}

func (s *stdinCopier) closePipe() { s.once.Do(func() { s.pw.Close() }) }

// finish runs after the process tree is gone: it closes the pipe so a
// pending write fails, and waits at most delay for a Read that may never
// return.
func (s *stdinCopier) finish(delay time.Duration) {
	if s.done == nil {
		return
	}
	s.closePipe()
	waitOrTimeout(s.done, delay)
}

// errUser refuses Command.User: host commands run as the calling user.
var errUser = fmt.Errorf("%w: host commands run as the calling user; Command.User is for sessions", runbox.ErrUnsupported)
