package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A prepared sandbox is a stage-2 helper that has built everything a
// confined command gets (namespaces, root, /proc, /dev, Landlock, seccomp,
// cgroup) before the command is known, and waits for exactly one command
// on a control socket. Most of a confined launch's cost is that set-up, so
// an executor keeps one ready (WithPreparedSandboxes) and a launch only
// sends its program, arguments, environment and stdio.
//
// Nothing is shared between commands: a prepared sandbox serves one
// command and ends with it, exactly as a cold one does. It waits with no
// descriptor of the caller's but its control socket and status pipe, and
// the restrictions are on its command thread before the command arrives.

// errNoCommand ends a prepared helper whose control socket closed without
// a command: the executor discarded it.
var errNoCommand = errors.New("the prepared sandbox was discarded")

// The control message: one byte, with the launch's spec (a sealed memory
// file) and the command's stdin, stdout and stderr as SCM_RIGHTS.
const (
	controlCommand = 'C'
	controlFiles   = 4
)

// awaitCommand (in the helper) waits for the command of a prepared
// sandbox and takes its program, arguments, directory, environment and
// what the executor expects to have been applied into conf; nothing that
// shapes the sandbox is taken from the message, since the sandbox is
// already built. It returns the command's stdio.
func awaitCommand(conf *spawnConf) ([]*os.File, error) {
	ctl := conf.ControlFD
	defer unix.Close(ctl)
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(controlFiles*4))
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(ctl, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("prepared sandbox: receive command: %w", err)
	}
	if n == 0 && oobn == 0 {
		return nil, errNoCommand
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if n != 1 || buf[0] != controlCommand || len(fds) != controlFiles {
		closeAll()
		return nil, fmt.Errorf("prepared sandbox: malformed command message (%d bytes, %d descriptors)", n, len(fds))
	}
	specF := os.NewFile(uintptr(fds[0]), "spec")
	var cmd spawnConf
	err = json.NewDecoder(specF).Decode(&cmd)
	specF.Close()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("prepared sandbox: read command: %w", err)
	}
	if cmd.Path == "" {
		closeAll()
		return nil, errHelperNoCommand
	}
	conf.Path, conf.Args, conf.Dir, conf.Env, conf.Expect = cmd.Path, cmd.Args, cmd.Dir, cmd.Env, cmd.Expect
	return []*os.File{
		os.NewFile(uintptr(fds[1]), "stdin"),
		os.NewFile(uintptr(fds[2]), "stdout"),
		os.NewFile(uintptr(fds[3]), "stderr"),
	}, nil
}

// preparedSandbox is the executor's side of one prepared helper.
type preparedSandbox struct {
	cmd *exec.Cmd
	ts  *treeSys
	ctl *os.File // the executor's end of the control socket
	// shape is the launch the sandbox was built for: it serves launches
	// whose confinement is built the same way.
	shape *spawnConf
	// mech is what the helper reported it applied.
	mech []byte
}

// serves reports whether a launch with confinement c runs in exactly the
// sandbox ps was built as: the paths bound into it and the Landlock rules
// come from the launch's directory and program, the rest from the policy.
func (ps *preparedSandbox) serves(c *spawnConf) bool {
	return !c.TTY && !ps.shape.TTY &&
		slices.Equal(c.Visible, ps.shape.Visible) &&
		(c.Readable == nil) == (ps.shape.Readable == nil) &&
		slices.Equal(c.Readable, ps.shape.Readable) &&
		slices.Equal(c.LimitNames, ps.shape.LimitNames)
}

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
func (ps *preparedSandbox) start(conf *spawnConf, build func() *exec.Cmd) (cmd *exec.Cmd, ts *treeSys, retry bool, err error) {
	fail := func(retry bool, err error) (*exec.Cmd, *treeSys, bool, error) {
		ps.discard()
		return nil, nil, retry, err
	}
	spec, err := specFile(conf)
	if err != nil {
		return fail(false, fmt.Errorf("sandbox spec: %w", err))
	}
	defer spec.Close()
	c := build()
	stdio := []any{c.Stdin, c.Stdout, c.Stderr}
	fds := []int{int(spec.Fd())}
	var devNull *os.File
	for _, s := range stdio {
		f, ok := s.(*os.File)
		if !ok || f == nil {
			if s != nil {
				return fail(false, fmt.Errorf("sandbox: stdio of type %T", s))
			}
			if devNull == nil {
				if devNull, err = os.Open(os.DevNull); err != nil {
					return fail(false, err)
				}
				defer devNull.Close()
			}
			f = devNull
		}
		fds = append(fds, int(f.Fd()))
	}
	if err := unix.Sendmsg(int(ps.ctl.Fd()), []byte{controlCommand}, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL); err != nil {
		return fail(true, fmt.Errorf("sandbox: send command: %w", err))
	}
	ps.ctl.Close()
	status := ps.ts.status
	_ = status.SetReadDeadline(time.Now().Add(helperStartTimeout))
	kind, payload, err := readStatus(status)
	_ = status.SetReadDeadline(time.Time{})
	switch {
	case err == nil && kind == statusRunning:
		return ps.cmd, ps.ts, false, nil
	case err == nil && kind == statusError:
		return fail(false, fmt.Errorf("sandbox: %s", payload))
	case err == nil:
		return fail(false, fmt.Errorf("sandbox helper sent unexpected status %q", kind))
	}
	// The helper died without a word: it may have been killed while it
	// waited, before the command could run.
	return fail(true, fmt.Errorf("sandbox helper ended before running the command: %w", err))
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
func (p *sandboxPool) take(c *spawnConf) *preparedSandbox {
	p.mu.Lock()
	var got *preparedSandbox
	var stale []*preparedSandbox
	for _, ps := range p.ready {
		if got == nil && ps.serves(c) {
			got = ps
		} else if !ps.serves(c) {
			stale = append(stale, ps)
		}
	}
	p.ready = slices.DeleteFunc(p.ready, func(ps *preparedSandbox) bool {
		return ps == got || slices.Contains(stale, ps)
	})
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
