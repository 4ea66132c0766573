package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runbox-dev/runbox"
)

// proc is one started process tree and its supervisor. Run, the output
// helpers and Process all share it.
type proc struct {
	cmd   *exec.Cmd
	sys   *treeSys
	grace time.Duration

	mu sync.Mutex
	// exited is set once the leader has exited and teardown begins. From
	// then on the leader's pid may be reaped and reused, so no signal is
	// sent through it any more.
	exited      bool
	pendingKill bool        // Kill was asked for before the spawn completed
	terminating bool        // a Terminate escalation has been armed
	timer       *time.Timer // the armed escalation
	escalations atomic.Int32

	done chan struct{} // closed when the supervisor has finished
	// Set by the supervisor before done is closed.
	waitErr    error
	cleanupErr error
	result     runbox.Result
	limitsHit  []string
}

// newProc returns an unstarted proc, so that callbacks that may kill it
// (an output limit) can be wired before the spawn.
func (e *Executor) newProc() *proc {
	return &proc{grace: e.cfg.grace, done: make(chan struct{})}
}

// start spawns the process for p; build is called once per attempt. A kill
// requested before the spawn completed is delivered right after it. The
// caller must then run p.supervise exactly once.
func (e *Executor) start(p *proc, spec *launchSpec, build func() *exec.Cmd, tty bool) error {
	if e.conf != nil && e.closed.Load() {
		return fmt.Errorf("%w: the executor is closed", runbox.ErrStart)
	}
	cmd, sys, err := e.startTree(spec, build, tty)
	if err != nil {
		return fmt.Errorf("%w: %w", runbox.ErrStart, err)
	}
	p.mu.Lock()
	p.cmd, p.sys = cmd, sys
	pending := p.pendingKill
	p.mu.Unlock()
	if pending {
		p.kill()
	}
	return nil
}

// spawn starts a process and hands it to a supervisor goroutine that always
// waits for it, for callers that do not wait themselves.
func (e *Executor) spawn(spec *launchSpec, build func() *exec.Cmd, tty bool) (*proc, error) {
	p := e.newProc()
	if err := e.start(p, spec, build, tty); err != nil {
		return nil, err
	}
	go p.supervise()
	return p, nil
}

// superviseInline supervises p in the calling goroutine, as Cmd.Wait does:
// the wake-up when the process exits lands directly on the caller, with no
// hand-off between goroutines. ctx is watched with context.AfterFunc, which
// costs no goroutine unless it fires; the returned error reports a
// cancellation that killed the still-running tree.
func (p *proc) superviseInline(ctx context.Context) error {
	var killed atomic.Bool
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		if p.signal(runbox.ProcessSignalKill) == nil {
			killed.Store(true)
		}
	})
	p.supervise()
	if !stop() {
		<-fired
	}
	if killed.Load() {
		return cancelled(ctx.Err())
	}
	return nil
}

// supervise waits for the leader, tears down whatever it left behind, reaps
// it, and releases the platform resources. Where the platform can wait
// without reaping, teardown happens while the leader is a zombie, which
// keeps its process-group id from being reused.
func (p *proc) supervise() {
	defer close(p.done)
	var cleanup []error
	waited := p.sys.awaitExit(p.cmd.Process)
	if !waited {
		p.waitErr = p.reap()
	}
	if err := p.finish(); err != nil {
		cleanup = append(cleanup, err)
	}
	if h, ok := any(p.sys).(interface{ limitsHit() []string }); ok {
		p.limitsHit = h.limitsHit()
	}
	if waited {
		p.waitErr = p.reap()
	}
	if p.waitErr == nil {
		p.result = p.sys.result(p.cmd.ProcessState)
	}
	if err := p.sys.release(); err != nil {
		cleanup = append(cleanup, err)
	}
	if len(cleanup) > 0 {
		p.cleanupErr = fmt.Errorf("%w: %w", runbox.ErrCleanup, errors.Join(cleanup...))
	}
}

// finish marks the leader as exited, disarms a pending escalation and
// kills the rest of the tree.
func (p *proc) finish() error {
	p.mu.Lock()
	p.exited = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	return p.sys.teardown(p.cmd.Process)
}

// reap waits for the leader and for os/exec's copying goroutines. An exit
// status is not an error here, and neither is an expired WaitDelay: the
// leader completed, a descendant that escaped teardown merely kept a pipe.
func (p *proc) reap() error {
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if err == nil || errors.As(err, &ee) || errors.Is(err, exec.ErrWaitDelay) {
		return nil
	}
	return err
}

// outcome returns the Result of a finished process, or the error that
// kept it from completing cleanly.
func (p *proc) outcome() (runbox.Result, error) {
	<-p.done
	if p.waitErr != nil {
		return runbox.Result{ExitCode: -1}, fmt.Errorf("host: waiting for process: %w", p.waitErr)
	}
	if p.cleanupErr != nil {
		return runbox.Result{ExitCode: -1}, p.cleanupErr
	}
	return p.result, nil
}

// signal delivers sig to the whole tree. Terminate arms one escalation to
// Kill after the grace period; repeating Terminate re-sends SIGTERM but
// never arms a second escalation.
func (p *proc) signal(sig runbox.ProcessSignal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return fmt.Errorf("host: %w", os.ErrProcessDone)
	}
	if p.cmd == nil {
		if sig == runbox.ProcessSignalKill {
			p.pendingKill = true
			return nil
		}
		return errors.New("host: process not started")
	}
	if err := p.sys.signal(p.cmd.Process, sig); err != nil {
		return err
	}
	if sig == runbox.ProcessSignalTerminate && !p.terminating {
		p.terminating = true
		p.timer = time.AfterFunc(p.grace, p.escalate)
	}
	return nil
}

// escalate kills the tree when it outlived a Terminate's grace period.
func (p *proc) escalate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return
	}
	if p.sys.signal(p.cmd.Process, runbox.ProcessSignalKill) == nil {
		p.escalations.Add(1)
	}
}

// kill kills the tree unless it is already gone.
func (p *proc) kill() { _ = p.signal(runbox.ProcessSignalKill) }
