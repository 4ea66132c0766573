package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/agent"
)

// Process is a command started in a session with Session.Start, whose
// streams the caller drives. It implements runbox.StreamingProcess. Its
// methods are safe for concurrent use.
type Process struct {
	s      *Session
	call   *agent.Call
	tty    bool
	grace  time.Duration
	pid    int
	stdin  *processStdin
	stdout *io.PipeReader
	stderr *io.PipeReader
	outW   *io.PipeWriter
	errW   *io.PipeWriter

	done      chan struct{}
	res       runbox.Result
	err       error
	escalated atomic.Int32 // Terminate escalations (at most one)
	termOnce  sync.Once
	closeOnce sync.Once
}

var _ runbox.StreamingProcess = (*Process)(nil)

// DefaultTerminateGrace is how long Terminate waits before it kills.
const DefaultTerminateGrace = 5 * time.Second

// Start starts cmd in the session and returns at once with a streaming
// handle. It needs the session's agent; a plain-exec session returns an
// error wrapping runbox.ErrUnsupported. cmd.Stdin, cmd.Resize and the
// Streams are not used: the handle's Stdin, Resize, Stdout and Stderr take
// their place. The session's other calls wait until the process has ended,
// as calls on one session are serial.
func (s *Session) Start(ctx context.Context, cmd runbox.Command) (*Process, error) {
	if err := cmd.Validate(); err != nil {
		return nil, err
	}
	if s.agent == nil {
		return nil, fmt.Errorf("%w: streaming processes need the session's agent", runbox.ErrUnsupported)
	}
	if ctx.Err() != nil {
		return nil, cancelled(ctx, "")
	}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil, runbox.ErrSessionClosed
	}
	call, err := s.agent.Start(agent.StartRequest{Args: cmd.Args, Env: cmd.Env, CleanEnv: cmd.CleanEnv, Dir: cmd.Dir,
		TTY: cmd.TTY, Rows: cmd.TermSize.Rows, Cols: cmd.TermSize.Cols})
	if err != nil {
		s.mu.Unlock()
		return nil, s.lostOrTransport(ctx, err)
	}
	p := &Process{s: s, call: call, tty: cmd.TTY, grace: s.e.termGrace, done: make(chan struct{})}
	// Wait for the agent's verdict: started, or why not.
	for p.pid == 0 {
		select {
		case f := <-call.Events():
			switch f.Type {
			case agent.TypeStarted:
				var st agent.Started
				_ = agent.Decode(f, &st)
				p.pid = st.Pid
			case agent.TypeStartFailed:
				var sf agent.StartFailed
				_ = agent.Decode(f, &sf)
				call.Abandon()
				s.mu.Unlock()
				return nil, fmt.Errorf("%w: %s", runbox.ErrStart, sf.Error)
			}
		case <-ctx.Done():
			_ = call.Cancel()
			call.Abandon()
			s.mu.Unlock()
			return nil, cancelled(ctx, "")
		case <-s.agent.Done():
			call.Abandon()
			s.mu.Unlock()
			return nil, s.lostOrTransport(ctx, agent.ErrConnectionLost)
		}
	}
	p.stdout, p.outW = io.Pipe()
	p.stderr, p.errW = io.Pipe()
	p.stdin = &processStdin{call: call}
	if cmd.TTY {
		p.errW.Close() // a terminal has one output stream
	}
	go p.pump()
	return p, nil
}

// pump delivers output until the exit, then releases the session.
func (p *Process) pump() {
	defer p.s.mu.Unlock()
	defer p.call.Abandon()
	finish := func(res runbox.Result, err error) {
		p.res, p.err = res, err
		p.outW.CloseWithError(err)
		p.errW.CloseWithError(err)
		p.stdin.finish()
		close(p.done)
	}
	for {
		select {
		case f := <-p.call.Events():
			switch f.Type {
			case agent.TypeStdout:
				_, _ = p.outW.Write(f.Payload) // an abandoned reader closes its end
			case agent.TypeStderr:
				_, _ = p.errW.Write(f.Payload)
			case agent.TypeExit:
				var ex agent.Exit
				if err := agent.Decode(f, &ex); err != nil {
					finish(runbox.Result{ExitCode: -1}, err)
					return
				}
				finish(runbox.Result{ExitCode: ex.Code, Signal: ex.Signal}, nil)
				return
			}
		case <-p.s.agent.Done():
			finish(runbox.Result{ExitCode: -1}, p.s.lostOrTransport(context.Background(), agent.ErrConnectionLost))
			return
		}
	}
}

// lostOrTransport classifies a broken agent connection.
func (s *Session) lostOrTransport(ctx context.Context, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("%w: %w", runbox.ErrSessionClosed, err)
	}
	if rerr := s.endedAfterLoss(ctx); rerr != nil && errors.Is(rerr, runbox.ErrSessionEnded) {
		return fmt.Errorf("%w (%w)", rerr, err)
	}
	return fmt.Errorf("%w: %w", runbox.ErrTransport, err)
}

// PID is the process's ID inside the session.
func (p *Process) PID() int { return p.pid }

// Stdin is the process's input; Close delivers EOF (in PTY mode input
// just stops) and later writes return runbox.ErrProcessStdinClosed.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Stdout is the process's output (everything, in PTY mode).
func (p *Process) Stdout() io.Reader { return p.stdout }

// Stderr is the process's error output; empty in PTY mode.
func (p *Process) Stderr() io.Reader { return p.stderr }

// StreamMode reports pipes or PTY.
func (p *Process) StreamMode() runbox.ProcessStreamMode {
	if p.tty {
		return runbox.ProcessStreamModePTY
	}
	return runbox.ProcessStreamModePipes
}

// LifetimeContainment is best effort: signals and kills reach the
// process's group inside the session, which a descendant can leave; the
// session's Close removes everything.
func (p *Process) LifetimeContainment() runbox.LifetimeContainment {
	return runbox.LifetimeContainmentBestEffort
}

// Wait waits for the process's exit. A signal death is a Result with
// Signal set. If ctx ends first, Wait returns an error wrapping
// runbox.ErrCancelled and leaves the process running.
func (p *Process) Wait(ctx context.Context) (runbox.Result, error) {
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return runbox.Result{ExitCode: -1}, cancelled(ctx, "the process is still running")
	}
}

// Signal delivers sig to the process's group in the session. Terminate
// sends SIGTERM and, if the process is still running after the grace
// period, SIGKILL — at most once. A finished process returns an error
// wrapping os.ErrProcessDone.
func (p *Process) Signal(sig runbox.ProcessSignal) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	switch sig {
	case runbox.ProcessSignalInterrupt:
		return p.call.Signal(int(syscall.SIGINT))
	case runbox.ProcessSignalKill:
		return p.call.Cancel()
	case runbox.ProcessSignalTerminate:
		if err := p.call.Signal(int(syscall.SIGTERM)); err != nil {
			return err
		}
		p.termOnce.Do(func() {
			go func() {
				t := time.NewTimer(p.grace)
				defer t.Stop()
				select {
				case <-p.done:
				case <-t.C:
					p.escalated.Add(1)
					_ = p.call.Cancel()
				}
			}()
		})
		return nil
	}
	return fmt.Errorf("%w: %v", runbox.ErrProcessSignalUnsupported, sig)
}

// Resize sets the terminal size of a PTY-mode process.
func (p *Process) Resize(size runbox.TermSize) error {
	if !p.tty {
		return fmt.Errorf("%w: the process has no terminal", runbox.ErrProcessTTYUnsupported)
	}
	if size.Rows == 0 || size.Cols == 0 {
		return fmt.Errorf("%w: terminal size %dx%d", runbox.ErrInvalidCommand, size.Rows, size.Cols)
	}
	return p.call.Resize(size.Rows, size.Cols)
}

// Close kills the process if it still runs, waits for its end (bounded by
// ctx) and releases its streams. It is idempotent.
func (p *Process) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		select {
		case <-p.done:
		default:
			_ = p.call.Cancel()
		}
		_ = p.stdin.Close()
	})
	select {
	case <-p.done:
	case <-ctx.Done():
		return cancelled(ctx, "the process may still be ending")
	}
	p.stdout.Close()
	p.stderr.Close()
	return nil
}

// processStdin writes through the agent's stdin window.
type processStdin struct {
	call   *agent.Call
	mu     sync.Mutex
	closed bool
}

func (w *processStdin) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, runbox.ErrProcessStdinClosed
	}
	if err := w.call.WriteStdin(b); err != nil {
		return 0, fmt.Errorf("%w: %w", runbox.ErrProcessStdinClosed, err)
	}
	return len(b), nil
}

func (w *processStdin) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	return w.call.CloseStdin()
}

// finish marks stdin closed once the process is gone.
func (w *processStdin) finish() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}
