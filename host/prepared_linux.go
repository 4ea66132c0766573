package host

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox-dev/runbox/internal/sandbox"
)

// The executor's side of prepared sandboxes (WithPreparedSandboxes): it
// starts helpers that build a sandbox before its command is known, keeps
// them in a pool, and hands each exactly one command. The helper's side,
// and why nothing is shared between commands, is in internal/sandbox.

// preparedSandbox is the executor's side of one prepared helper.
type preparedSandbox struct {
	cmd *exec.Cmd
	ts  *treeSys
	ctl *os.File // the executor's end of the control socket
	// shape is the launch the sandbox was built for: it serves launches
	// whose confinement is built the same way.
	shape *sandbox.Spec
	// mech is what the helper reported it applied.
	mech []byte
}

// serves reports whether a launch with confinement c runs in exactly the
// sandbox ps was built as.
func (ps *preparedSandbox) serves(c *sandbox.Spec) bool { return ps.shape.SameSandbox(c) }

// discard ends an unused prepared sandbox: its helper sees the control
// socket close and exits, and its cgroup is released.
func (ps *preparedSandbox) discard() {
	ps.ctl.Close()
	_ = ps.cmd.Wait()
	_ = ps.ts.teardown(ps.cmd.Process)
	_ = ps.ts.release()
}

// prepareSandbox starts a helper that builds the sandbox of a launch
// shaped like spec (its directory and program) and waits for a command.
// probe marks the executor's first one, whose report is what the
// executor then guarantees.
func (e *Executor) prepareSandbox(spec *launchSpec, probe bool) (*preparedSandbox, error) {
	conf := e.conf.newSpawnConf(spec)
	conf.Path, conf.Args, conf.Env = "", nil, nil
	conf.Probe, conf.Prepared = probe, true
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox control socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "control"), os.NewFile(uintptr(pair[1]), "control")
	build := func() *exec.Cmd { return &exec.Cmd{WaitDelay: e.cfg.waitDelay} }
	cmd, ts, payload, err := e.startConfined(conf, build, theirs)
	theirs.Close()
	if err != nil {
		ours.Close()
		return nil, err
	}
	return &preparedSandbox{cmd: cmd, ts: ts, ctl: ours, shape: conf, mech: payload}, nil
}

// start runs the launch in ps: it sends the command and stdio that build
// sets up and waits until the helper reports that the command runs. retry
// says that the helper was gone before it took the command (nothing of the
// command ran), so a cold sandbox may be tried instead.
func (ps *preparedSandbox) start(conf *sandbox.Spec, build func() *exec.Cmd) (cmd *exec.Cmd, ts *treeSys, retry bool, err error) {
	fail := func(retry bool, err error) (*exec.Cmd, *treeSys, bool, error) {
		ps.discard()
		return nil, nil, retry, err
	}
	c := build()
	if err := sandbox.SendCommand(ps.ctl, conf, c.Stdin, c.Stdout, c.Stderr); err != nil {
		var sendErr *sandbox.SendError
		return fail(errors.As(err, &sendErr), fmt.Errorf("sandbox: %w", err))
	}
	if _, err := sandbox.AwaitReport(ps.ts.status, false); err != nil {
		// A helper that died without a word may have been killed while it
		// waited, before the command could run.
		return fail(errors.Is(err, sandbox.ErrHelperGone), err)
	}
	return ps.cmd, ps.ts, false, nil
}

// sandboxPool keeps an executor's prepared sandboxes: up to size ready
// ones, refilled one at a time in the background after each launch, shaped
// like the last launch.
type sandboxPool struct {
	mu      sync.Mutex
	cond    *sync.Cond
	size    int
	ready   []*preparedSandbox
	filling bool
	closed  bool
	// retryAt holds back refills after a failure, so that a broken host
	// does not pay for a doomed helper at every launch.
	retryAt time.Time
}

// refillBackoff is how long a failed refill holds back the next one.
const refillBackoff = time.Second

func newSandboxPool(size int) *sandboxPool {
	p := &sandboxPool{size: size}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// add keeps ps ready, or discards it when the pool is closed.
func (p *sandboxPool) add(ps *preparedSandbox) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ps.discard()
		return
	}
	p.ready = append(p.ready, ps)
	p.mu.Unlock()
}

// take returns a ready sandbox that serves c, or nil. Ready sandboxes
// shaped for another launch are discarded: the next ones are shaped like
// this one.
func (p *sandboxPool) take(c *sandbox.Spec) *preparedSandbox {
	p.mu.Lock()
	var got *preparedSandbox
	var keep, stale []*preparedSandbox
	for _, ps := range p.ready {
		switch {
		case !ps.serves(c):
			stale = append(stale, ps)
		case got == nil:
			got = ps
		default:
			keep = append(keep, ps)
		}
	}
	p.ready = keep
	p.mu.Unlock()
	for _, ps := range stale {
		ps.discard()
	}
	return got
}

// refill prepares sandboxes shaped like spec, one at a time, until size
// are ready; prepare runs in a goroutine that Close waits for.
func (p *sandboxPool) refill(spec *launchSpec, prepare func(*launchSpec) (*preparedSandbox, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.filling || len(p.ready) >= p.size || time.Now().Before(p.retryAt) {
		return
	}
	p.filling = true
	go func() {
		for {
			ps, err := prepare(spec)
			p.mu.Lock()
			if err != nil {
				p.retryAt = time.Now().Add(refillBackoff)
			} else if !p.closed {
				p.ready = append(p.ready, ps)
				ps = nil
			}
			more := err == nil && !p.closed && len(p.ready) < p.size
			if !more {
				p.filling = false
				p.cond.Broadcast()
			}
			p.mu.Unlock()
			if ps != nil {
				ps.discard()
			}
			if !more {
				return
			}
		}
	}()
}

// waitFilled waits until no refill is under way.
func (p *sandboxPool) waitFilled() {
	p.mu.Lock()
	for p.filling {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

// close discards every ready sandbox, after any refill under way has
// ended; later refills do nothing.
func (p *sandboxPool) close() {
	p.mu.Lock()
	p.closed = true
	for p.filling {
		p.cond.Wait()
	}
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, ps := range ready {
		ps.discard()
	}
}

// readyPids returns the helper pids of the ready sandboxes (for tests).
func (p *sandboxPool) readyPids() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pids []int
	for _, ps := range p.ready {
		pids = append(pids, ps.cmd.Process.Pid)
	}
	return pids
}
