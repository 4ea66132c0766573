package host

import (
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
	terminating bool        // a Terminate escalation has been armed
	timer       *time.Timer // the armed escalation
	escalations atomic.Int32

	done chan struct{} // closed when the supervisor has finished
	// Set by the supervisor before done is closed.
	waitErr    error
	cleanupErr error
}

// spawn starts a process built by build (called once per attempt) and hands
// it to a supervisor goroutine that always waits for it.
func (e *Executor) spawn(spec *launchSpec, build func() *exec.Cmd, tty bool) (*proc, error) {
	cmd, sys, err := e.startTree(spec, build, tty)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", runbox.ErrStart, err)
	}
	p := &proc{cmd: cmd, sys: sys, grace: e.cfg.grace, done: make(chan struct{})}
	go p.supervise()
	return p, nil
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
	if waited {
		p.waitErr = p.reap()
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
	return exitResult(p.cmd.ProcessState), nil
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
