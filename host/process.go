package host

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/runbox-dev/runbox"
)

// Process is a started streaming process. Its methods are safe for
// concurrent use.
type Process struct {
	p      *proc
	mode   runbox.ProcessStreamMode
	stdin  *stdinWriter
	stdout io.Reader
	stderr io.Reader
	master *os.File   // the terminal's master side in PTY mode
	files  []*os.File // parent-side ends closed by Close

	stopOnce    sync.Once
	releaseOnce sync.Once
}

// startPipes spawns spec with three distinct pipes.
func (e *Executor) startPipes(spec *launchSpec) (*Process, error) {
	var fds [6]*os.File // in r/w, out r/w, err r/w
	for i := 0; i < 6; i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeFiles(fds[:i]...)
			return nil, fmt.Errorf("%w: pipe: %w", runbox.ErrStart, err)
		}
		fds[i], fds[i+1] = r, w
	}
	inR, inW, outR, outW, errR, errW := fds[0], fds[1], fds[2], fds[3], fds[4], fds[5]
	build := func() *exec.Cmd {
		c := spec.cmd(e.cfg.waitDelay)
		c.Stdin, c.Stdout, c.Stderr = inR, outW, errW
		return c
	}
	p, err := e.spawn(spec, build, false)
	// The child holds its own copies; keeping ours would hide EOF.
	closeFiles(inR, outW, errW)
	if err != nil {
		closeFiles(inW, outR, errR)
		return nil, err
	}
	return &Process{
		p:      p,
		mode:   runbox.ProcessStreamModePipes,
		stdin:  &stdinWriter{f: inW},
		stdout: outR,
		stderr: errR,
		files:  []*os.File{outR, errR},
	}, nil
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// PID returns the operating-system process id of the process (the leader
// of its tree).
func (p *Process) PID() int { return p.p.cmd.Process.Pid }

// Stdin returns the process's standard input. It is safe for concurrent
// writers: each Write is delivered whole, never interleaved with another.
// Close delivers end-of-file (in PTY mode, the terminal's end-of-file
// character, Ctrl-D, which a program in raw mode reads as a byte); later
// writes return [runbox.ErrProcessStdinClosed].
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Stdout returns the process's standard output (in PTY mode, everything
// the terminal displays). It reaches end-of-file once every process that
// held it has ended, which teardown ensures when containment is enforced;
// Close ends it in any case.
func (p *Process) Stdout() io.Reader { return p.stdout }

// Stderr returns the process's standard error, a pipe distinct from
// Stdout. In PTY mode stderr is merged into the terminal and this reader
// is at end-of-file immediately.
func (p *Process) Stderr() io.Reader { return p.stderr }

// StreamMode reports how the process's stdio is wired.
func (p *Process) StreamMode() runbox.ProcessStreamMode { return p.mode }

// LifetimeContainment reports the teardown guarantee actually achieved for
// this process: [runbox.LifetimeContainmentEnforced] only when the whole
// tree was placed in a kernel container that is killed as a unit (a Linux
// cgroup v2 with cgroup.kill), [runbox.LifetimeContainmentBestEffort] for
// process-group teardown that a descendant can escape.
func (p *Process) LifetimeContainment() runbox.LifetimeContainment {
	return p.p.sys.containment()
}

// LimitsHit names the resource limits of the executor's policy that
// stopped something in the process's tree once it has ended: "memory"
// when a task was killed for want of memory, "pids" when a fork was
// refused. It is empty while the process runs, and where no limits are
// enforced.
func (p *Process) LimitsHit() []string {
	select {
	case <-p.p.done:
		return slices.Clone(p.p.limitsHit)
	default:
		return nil
	}
}

// Wait waits for the process to finish and returns its Result, as
// exec.Cmd.Wait does, except that it may be called any number of times,
// from any goroutine: the single real wait is done by the supervisor and
// its outcome is shared. A signal death is a Result with Signal set and
// ExitCode 128+N. If ctx ends first, Wait returns an error wrapping
// [runbox.ErrCancelled] and ctx.Err() and leaves the process running.
// A failed teardown returns an error wrapping [runbox.ErrCleanup].
func (p *Process) Wait(ctx context.Context) (runbox.Result, error) {
	select {
	case <-p.p.done:
		return p.p.outcome()
	default:
	}
	select {
	case <-p.p.done:
		return p.p.outcome()
	case <-ctx.Done():
		return runbox.Result{ExitCode: -1}, cancelled(ctx.Err())
	}
}

// Signal delivers sig to the whole process tree.
// [runbox.ProcessSignalTerminate] sends SIGTERM and, if the process is
// still running after the executor's grace period, kills the tree; that
// escalation happens at most once however often Terminate is sent.
// Signals a platform cannot deliver return an error wrapping
// [runbox.ErrProcessSignalUnsupported]; a finished process returns an error
// wrapping os.ErrProcessDone.
func (p *Process) Signal(sig runbox.ProcessSignal) error {
	switch sig {
	case runbox.ProcessSignalInterrupt, runbox.ProcessSignalTerminate, runbox.ProcessSignalKill:
	default:
		return fmt.Errorf("%w: %v (%d)", runbox.ErrProcessSignalUnsupported, sig, int(sig))
	}
	return p.p.signal(sig)
}

// Resize changes the terminal size of a PTY-mode process; the kernel
// notifies it with SIGWINCH. In pipe mode it returns an error wrapping
// [runbox.ErrProcessTTYUnsupported].
func (p *Process) Resize(size runbox.TermSize) error {
	if p.mode != runbox.ProcessStreamModePTY {
		return fmt.Errorf("%w: process has no terminal", runbox.ErrProcessTTYUnsupported)
	}
	if size.Rows == 0 || size.Cols == 0 {
		return fmt.Errorf("%w: terminal size %dx%d has a zero dimension", runbox.ErrInvalidCommand, size.Rows, size.Cols)
	}
	return resizePTY(p.master, size)
}

// Close kills the process tree if it is still running, closes stdin, waits
// for the supervisor, and closes the parent's ends of the streams. It is
// idempotent. If ctx ends before teardown completes, Close returns an error
// wrapping [runbox.ErrCancelled] and ctx.Err(); the supervisor still
// finishes in the background and a later Close reports its outcome. A
// failed teardown returns an error wrapping [runbox.ErrCleanup].
func (p *Process) Close(ctx context.Context) error {
	p.stopOnce.Do(func() {
		p.p.kill()
		p.stdin.Close()
	})
	var err error
	select {
	case <-p.p.done:
	default:
		select {
		case <-p.p.done:
		case <-ctx.Done():
			err = cancelled(ctx.Err())
		}
	}
	// The tree has been killed; closing our ends also unblocks readers
	// that an escaped descendant would otherwise keep waiting.
	p.releaseOnce.Do(func() { closeFiles(p.files...) })
	if err != nil {
		return err
	}
	return p.p.cleanupErr
}

// stdinWriter is a process's stdin: the write end of a pipe, or the
// terminal's master side.
type stdinWriter struct {
	mu        sync.Mutex // serializes writers so writes never interleave
	f         *os.File
	tty       bool
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

func (w *stdinWriter) Write(b []byte) (int, error) {
	if w.closed.Load() {
		return 0, runbox.ErrProcessStdinClosed
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed.Load() {
		return 0, runbox.ErrProcessStdinClosed
	}
	n, err := w.f.Write(b)
	if err != nil && w.closed.Load() {
		// Close raced with this write and closed the pipe under it.
		err = runbox.ErrProcessStdinClosed
	}
	return n, err
}

// Close delivers end-of-file. A pipe is closed without waiting for pending
// writes (they fail); a terminal gets its EOF character after them.
func (w *stdinWriter) Close() error {
	w.closeOnce.Do(func() {
		w.closed.Store(true)
		if !w.tty {
			w.closeErr = w.f.Close()
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		// Ctrl-D at the start of a line is end-of-file for a terminal in
		// canonical mode. A failure means the terminal is already gone,
		// which is end-of-file as well.
		_, _ = w.f.Write([]byte{0x04})
	})
	return w.closeErr
}

// eofReader is Stderr in PTY mode.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

var _ runbox.StreamingProcess = (*Process)(nil)
