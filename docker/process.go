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
	"github.com/runbox-dev/runbox/internal/agent"
)

// Process is a command started in a session with Session.Start, whose
// streams the caller drives. It implements runbox.StreamingProcess. Its
// methods are safe for concurrent use.
type Process struct {
	s      *Session
	conn   *agent.Client // the connection that carries call
	call   *agent.Call
	tty    bool
	grace  time.Duration
	pid    int
	stdin  *processStdin
	stdout *streamBuffer
	stderr *streamBuffer

	closing   chan struct{} // closed by Close: unread output is dropped, never waited for
	abort     chan struct{} // closed by Close when the end was not confirmed in time
	abortErr  error         // why, set before abort is closed
	done      chan struct{}
	res       runbox.Result
	err       error
	termOnce  sync.Once
	closeOnce sync.Once
	closeErr  error
}

var _ runbox.StreamingProcess = (*Process)(nil)

// streamWindow is how much of one stream is buffered for a reader that is
// not reading it, like a pipe's buffer: beyond it the process waits (its
// output stops reaching the agent), but the other stream never waits for
// this one before that.
const streamWindow = 1 << 20

// Start starts cmd in the session and returns at once with a streaming
// handle (a *Process). It needs the session's agent; a plain-exec session
// returns an error wrapping runbox.ErrUnsupported. The handle's Stdin,
// Resize, Stdout and Stderr take the place of cmd.Stdin and cmd.Resize
// (refused when set) and of Run's Streams. The session's other calls wait until the process has ended
// or was closed, as calls on one session are serial; a Start that waits
// for them past ctx's end returns an error wrapping runbox.ErrCancelled.
func (s *Session) Start(ctx context.Context, cmd runbox.Command) (runbox.StreamingProcess, error) {
	if err := cmd.ValidateStart(); err != nil {
		return nil, err
	}
	if s.plan == nil {
		return nil, fmt.Errorf("%w: streaming processes need the session's agent", runbox.ErrUnsupported)
	}
	if ctx.Err() != nil {
		return nil, cancelled(ctx, "")
	}
	if err := s.mu.lock(ctx); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		s.mu.unlock()
		return nil, runbox.ErrSessionClosed
	}
	conn, err := s.agentConn(ctx)
	if err != nil {
		s.mu.unlock()
		return nil, err
	}
	if err := cmd.Starting(); err != nil {
		s.mu.unlock()
		return nil, err
	}
	call, err := conn.Start(agent.StartRequest{Args: cmd.Args, Env: cmd.Env, CleanEnv: cmd.CleanEnv, Dir: cmd.Dir, User: cmd.User,
		TTY: cmd.TTY, Rows: cmd.TermSize.Rows, Cols: cmd.TermSize.Cols})
	if err != nil {
		s.mu.unlock()
		return nil, s.lostOrTransport(ctx, err)
	}
	p := &Process{s: s, conn: conn, call: call, tty: cmd.TTY, grace: s.e.termGrace,
		closing: make(chan struct{}), abort: make(chan struct{}), done: make(chan struct{})}
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
				s.mu.unlock()
				return nil, startErr(sf.Error, sf.Reason)
			}
		case <-ctx.Done():
			_ = call.Cancel()
			call.Abandon()
			s.mu.unlock()
			return nil, cancelled(ctx, "")
		case <-conn.Done():
			call.Abandon()
			s.mu.unlock()
			return nil, s.lostOrTransport(ctx, agent.ErrConnectionLost)
		}
	}
	p.stdout, p.stderr = newStreamBuffer(streamWindow), newStreamBuffer(streamWindow)
	p.stdin = &processStdin{call: call}
	if cmd.TTY {
		p.stderr.finish(nil) // a terminal has one output stream
	}
	go p.pump()
	return p, nil
}

// pump delivers output until the exit, then releases the session. It never
// waits for a reader once Close was called, so Close always ends it.
func (p *Process) pump() {
	finish := func(res runbox.Result, err error) {
		p.res, p.err = res, err
		p.stdout.finish(err)
		p.stderr.finish(err)
		p.stdin.finish()
		p.call.Abandon()
		// Released before done: a call made after Wait or Close returned
		// never queues behind this process.
		p.s.mu.unlock()
		close(p.done)
	}
	for {
		select {
		case f := <-p.call.Events():
			switch f.Type {
			case agent.TypeStdout:
				p.deliver(p.stdout, f.Payload)
			case agent.TypeStderr:
				p.deliver(p.stderr, f.Payload)
			case agent.TypeExit:
				var ex agent.Exit
				if err := agent.Decode(f, &ex); err != nil {
					finish(runbox.Result{ExitCode: -1}, err)
					return
				}
				finish(runbox.Result{ExitCode: ex.Code, Signal: ex.Signal}, nil)
				return
			}
		case <-p.conn.Done():
			finish(runbox.Result{ExitCode: -1}, p.s.lostOrTransport(context.Background(), agent.ErrConnectionLost))
			return
		case <-p.abort:
			finish(runbox.Result{ExitCode: -1}, p.abortErr)
			return
		}
	}
}

// deliver buffers output for its reader, waiting while the stream's window
// is full (as a writer to a full pipe does) unless Close was called or the
// connection is gone; then what does not fit is dropped.
func (p *Process) deliver(b *streamBuffer, data []byte) {
	for !b.write(data) {
		select {
		case <-b.space:
		case <-p.closing:
			return
		case <-p.abort:
			return
		case <-p.conn.Done():
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

// Close kills the process if it still runs, waits for its end and
// releases its streams and the session. It waits at most until ctx ends or
// the terminate grace has passed: when the agent has not confirmed the end
// by then, the process is given up (Wait reports an error wrapping
// runbox.ErrTransport, or runbox.ErrCancelled when ctx ended) and the
// session is released all the same. Output nobody has read is dropped. It
// is idempotent: later calls return the first call's result.
func (p *Process) Close(ctx context.Context) error {
	p.closeOnce.Do(func() { p.closeErr = p.close(ctx) })
	return p.closeErr
}

func (p *Process) close(ctx context.Context) error {
	close(p.closing)
	// The kill is sent beside the wait: a connection that does not take
	// it must not hold Close past its bound.
	go func() {
		select {
		case <-p.done:
		default:
			_ = p.call.Cancel()
		}
		_ = p.stdin.Close()
	}()
	t := time.NewTimer(p.grace)
	defer t.Stop()
	var err error
	select {
	case <-p.done:
	case <-ctx.Done():
		err = cancelled(ctx, "the agent did not confirm the process's end; it was given up")
	case <-t.C:
		err = fmt.Errorf("%w: the agent did not confirm the process's end within %s; it was given up", runbox.ErrTransport, p.grace)
	}
	if err != nil {
		p.abortErr = err
		close(p.abort)
		<-p.done // the pump never blocks once abort is closed
		if p.err != err {
			err = nil // the exit arrived after all
		}
	}
	// Readers still blocked get the rest of what arrived, then the end;
	// later reads fail as on a closed pipe.
	p.stdout.closeRead()
	p.stderr.closeRead()
	return err
}

// processStdin writes through the agent's stdin window. Writers are
// serialized so that writes never interleave; Close does not wait for a
// writer that waits for the window.
type processStdin struct {
	call   *agent.Call
	wmu    sync.Mutex // serializes writers
	closed atomic.Bool
}

func (w *processStdin) Write(b []byte) (int, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.closed.Load() {
		return 0, runbox.ErrProcessStdinClosed
	}
	if err := w.call.WriteStdin(b); err != nil {
		return 0, fmt.Errorf("%w: %w", runbox.ErrProcessStdinClosed, err)
	}
	return len(b), nil
}

// Close delivers EOF once; later calls return nil.
func (w *processStdin) Close() error {
	if w.closed.Swap(true) {
		return nil
	}
	return w.call.CloseStdin()
}

// finish marks stdin closed once the process is gone.
func (w *processStdin) finish() { w.closed.Store(true) }
