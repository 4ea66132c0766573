package agent

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// ErrConnectionLost reports that the connection to the agent broke (or the
// agent died) while a command was pending: its outcome is unknown.
var ErrConnectionLost = errors.New("runbox/agent: connection to the agent lost")

// ErrSessionOver reports the agent's last word: the whole session ends
// (its lifetime process ended, or its lease expired).
var ErrSessionOver = errors.New("runbox/agent: the session is over")

// SessionOverError is the agent's last word: why the session ended and,
// when its lifetime process's end ended it, that process's exit status.
// It matches ErrSessionOver.
type SessionOverError struct {
	Message string
	Status  *int
}

// Error returns the agent's last word after ErrSessionOver's text.
func (e *SessionOverError) Error() string { return ErrSessionOver.Error() + ": " + e.Message }

// Is makes the error match ErrSessionOver.
func (e *SessionOverError) Is(target error) bool { return target == ErrSessionOver }

// StartError is the agent's reason for not starting a command.
type StartError struct {
	Message string
	Reason  string // ReasonNotFound, ReasonNotExecutable or ""
}

// Error implements error.
func (e *StartError) Error() string { return e.Message }

// Client multiplexes commands over one connection to an agent. It is safe
// for concurrent use.
type Client struct {
	rw  io.ReadWriteCloser
	wmu sync.Mutex

	mu     sync.Mutex
	calls  map[uint32]*Call
	nextID uint32
	err    error         // why the connection ended
	closed chan struct{} // closed when the connection ended

	noStdin bool // the agent honours StartRequest.NoStdin
	discard bool // the agent honours StartRequest.DiscardStdout and DiscardStderr
}

// ClientOptions configure a connection to an agent.
type ClientOptions struct {
	// Timeout bounds the handshake.
	Timeout time.Duration
	// Key is the session key, when the connection crosses a place where a
	// process in the session could stand in for the agent (the exec bridge
	// of a remote Engine). The agent must prove it before anything else is
	// sent, and the client proves it in turn. Nil for a connection whose
	// peer the kernel vouched for.
	Key []byte
}

// NewClient performs the handshake on rw and starts reading. The Client
// owns rw and closes it in Close.
func NewClient(rw io.ReadWriteCloser, o ClientOptions) (*Client, error) {
	c := &Client{rw: rw, calls: map[uint32]*Call{}, closed: make(chan struct{})}
	r := NewReader(rw)
	type result struct {
		h   Hello
		err error
	}
	got := make(chan result, 1)
	nonce := random(NonceSize)
	go func() {
		h, err := c.handshake(r, nonce, o.Key)
		got <- result{h, err}
	}()
	t := time.NewTimer(o.Timeout)
	defer t.Stop()
	select {
	case res := <-got:
		if res.err != nil {
			rw.Close()
			return nil, fmt.Errorf("runbox/agent: handshake: %w", res.err)
		}
		c.noStdin = res.h.NoStdin
		c.discard = res.h.Discard
	case <-t.C:
		rw.Close()
		<-got
		return nil, fmt.Errorf("runbox/agent: handshake: no answer within %s", o.Timeout)
	}
	go c.readLoop(r)
	return c, nil
}

func (c *Client) handshake(r *Reader, nonce, key []byte) (Hello, error) {
	// Written without failing the client, so that the agent's answer can
	// still be read: an agent whose session is over says so and hangs up.
	c.wmu.Lock()
	werr := WriteJSON(c.rw, TypeHello, 0, Hello{Version: Version, Nonce: nonce})
	c.wmu.Unlock()
	f, err := r.Next()
	if err != nil {
		if werr != nil {
			return Hello{}, fmt.Errorf("%w: %w", ErrConnectionLost, werr)
		}
		return Hello{}, err
	}
	if f.Type == TypeError {
		var fe Fatal
		_ = Decode(f, &fe)
		if fe.Ended {
			return Hello{}, &SessionOverError{Message: fe.Error, Status: fe.Status}
		}
		return Hello{}, fmt.Errorf("%w: agent refused: %s", ErrProtocol, fe.Error)
	}
	if f.Type != TypeHello {
		return Hello{}, fmt.Errorf("%w: expected hello, got %s", ErrProtocol, f.Type)
	}
	var h Hello
	if err := Decode(f, &h); err != nil {
		return Hello{}, err
	}
	if h.Version != Version {
		return Hello{}, fmt.Errorf("%w: agent speaks version %d, want %d", ErrProtocol, h.Version, Version)
	}
	if key == nil {
		return h, nil
	}
	if len(h.Nonce) != NonceSize || !hmac.Equal(h.Proof, AgentProof(key, nonce, h.Nonce)) {
		return Hello{}, fmt.Errorf("%w: the peer could not prove the session key: not the session's agent", ErrAuth)
	}
	err = c.write(func(w io.Writer) error {
		return WriteJSON(w, TypeAuth, 0, Auth{Proof: ClientProof(key, nonce, h.Nonce)})
	})
	return h, err
}

// Renew renews the session's lease.
func (c *Client) Renew() error { return c.sendJSON(TypeLease, 0, Lease{}) }

// Release makes the session persistent: it no longer expires when its
// callers stop renewing it.
func (c *Client) Release() error { return c.sendJSON(TypeLease, 0, Lease{Release: true}) }

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.closed }

// Err returns why the connection ended, or nil while it is open.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection; the agent kills the commands still running.
func (c *Client) Close() error {
	c.fail(errors.New("client closed"))
	return nil
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.closed)
		c.rw.Close()
	}
	c.mu.Unlock()
}

func (c *Client) write(fn func(io.Writer) error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := fn(c.rw); err != nil {
		c.fail(err)
		// When the reader already learnt why the connection ended (the
		// session is over), that is the answer, not the failed write.
		return fmt.Errorf("%w: %w", ErrConnectionLost, c.Err())
	}
	return nil
}

func (c *Client) send(t Type, id uint32, payload []byte) error {
	return c.write(func(w io.Writer) error { return WriteFrame(w, Frame{Type: t, ID: id, Payload: payload}) })
}

func (c *Client) sendJSON(t Type, id uint32, v any) error {
	return c.write(func(w io.Writer) error { return WriteJSON(w, t, id, v) })
}

func (c *Client) readLoop(r *Reader) {
	for {
		f, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the agent closed the connection")
			}
			c.fail(err)
			return
		}
		if f.ID == 0 {
			if f.Type == TypeError {
				var fe Fatal
				_ = Decode(f, &fe)
				if fe.Ended {
					c.fail(&SessionOverError{Message: fe.Error, Status: fe.Status})
				} else {
					c.fail(fmt.Errorf("agent: %s", fe.Error))
				}
				return
			}
			continue
		}
		c.mu.Lock()
		call := c.calls[f.ID]
		if call != nil && (f.Type == TypeExit || f.Type == TypeStartFailed) {
			delete(c.calls, f.ID)
		}
		c.mu.Unlock()
		if call == nil {
			continue
		}
		if f.Type == TypeStdinAck {
			var a StdinAck
			if Decode(f, &a) == nil {
				call.credit(a.Bytes)
			}
			continue
		}
		ev := Frame{Type: f.Type, ID: f.ID, Payload: copyPayload(f.Payload)}
		select {
		case call.events <- ev:
		case <-call.abandoned:
		case <-c.closed:
			return
		}
	}
}

// payloadPool recycles output buffers: a stream moves many MiB through
// frames of up to 256 KiB, and fresh buffers for each would mostly feed the
// garbage collector.
// poolBufSize matches the agent's read size.
const poolBufSize = 256 << 10

var payloadPool = sync.Pool{New: func() any { b := make([]byte, 0, poolBufSize); return &b }}

func copyPayload(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	if len(p) > poolBufSize {
		return append([]byte(nil), p...)
	}
	bp := payloadPool.Get().(*[]byte)
	return append((*bp)[:0], p...)
}

func releasePayload(p []byte) {
	if cap(p) == poolBufSize {
		payloadPool.Put(&p)
	}
}

// Call is one command started through the agent.
type Call struct {
	c         *Client
	id        uint32
	events    chan Frame
	abandoned chan struct{}
	abandon   sync.Once

	cmu      sync.Mutex
	ccond    *sync.Cond
	inflight int
	finished bool
}

// Start sends a start request. Read the call's outcome with Run-style
// helpers (Events) and always call Abandon when done.
func (c *Client) Start(req StartRequest) (*Call, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrConnectionLost, err)
	}
	c.nextID++
	call := &Call{c: c, id: c.nextID, events: make(chan Frame, 64), abandoned: make(chan struct{})}
	call.ccond = sync.NewCond(&call.cmu)
	c.calls[call.id] = call
	c.mu.Unlock()
	if err := c.sendStart(call.id, req); err != nil {
		call.Abandon()
		return nil, err
	}
	return call, nil
}

// ErrTooLarge reports a command whose arguments and environment exceed
// what Linux can exec; it was not sent.
var ErrTooLarge = errors.New("runbox/agent: command too large to exec")

// execMax is Linux's bound on the argument and environment strings of one
// exec (three quarters of the 8 MiB default stack limit, whatever the
// stack rlimit), counting each string's terminator and pointer.
const execMax = 6 << 20

// execSize is what the kernel counts for req's strings.
func execSize(req StartRequest) int {
	n := 0
	for _, l := range [][]string{req.Args, req.Env} {
		for _, s := range l {
			n += len(s) + 1 + 8
		}
	}
	return n
}

// sendStart sends a start request, in several frames when it is larger
// than one frame may be.
func (c *Client) sendStart(id uint32, req StartRequest) error {
	if n := execSize(req); n > execMax {
		return fmt.Errorf("%w: %d bytes of arguments and environment, Linux takes at most %d", ErrTooLarge, n, execMax)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	return c.write(func(w io.Writer) error {
		for len(b) > MaxPayload {
			if err := WriteFrame(w, Frame{Type: TypeStartPart, ID: id, Payload: b[:MaxPayload]}); err != nil {
				return err
			}
			b = b[MaxPayload:]
		}
		return WriteFrame(w, Frame{Type: TypeStart, ID: id, Payload: b})
	})
}

// Events delivers the call's frames: accepted, started, start-failed,
// stdout, stderr and exit.
func (call *Call) Events() <-chan Frame { return call.events }

// Abandon stops delivery; frames still arriving for the call are dropped.
func (call *Call) Abandon() {
	call.abandon.Do(func() {
		close(call.abandoned)
		call.c.mu.Lock()
		delete(call.c.calls, call.id)
		call.c.mu.Unlock()
		call.cmu.Lock()
		call.finished = true
		call.ccond.Broadcast()
		call.cmu.Unlock()
	})
}

func (call *Call) credit(n int) {
	call.cmu.Lock()
	call.inflight -= n
	call.ccond.Broadcast()
	call.cmu.Unlock()
}

// stdinChunk is the most stdin one frame carries: large enough that a
// bulk stream (a tree copied in) is not paced by one acknowledgement per
// small frame, and a quarter of StdinWindow, so that four are in flight.
const stdinChunk = StdinWindow / 4

// WriteStdin sends input within the stdin window, waiting for credit.
func (call *Call) WriteStdin(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), stdinChunk)
		call.cmu.Lock()
		for call.inflight+n > StdinWindow && !call.finished && call.c.Err() == nil {
			call.ccond.Wait()
		}
		if call.finished {
			call.cmu.Unlock()
			return io.ErrClosedPipe
		}
		call.inflight += n
		call.cmu.Unlock()
		if err := call.c.send(TypeStdin, call.id, b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// CloseStdin delivers EOF to the command's stdin.
func (call *Call) CloseStdin() error { return call.c.send(TypeStdinEOF, call.id, nil) }

// Signal sends sig (a signal number) to the command's process group.
func (call *Call) Signal(sig int) error {
	return call.c.sendJSON(TypeSignal, call.id, Signal{Signal: sig})
}

// Cancel kills the command's process group.
func (call *Call) Cancel() error { return call.c.send(TypeCancel, call.id, nil) }

// Resize sets the command's terminal size.
func (call *Call) Resize(rows, cols uint16) error {
	return call.c.sendJSON(TypeResize, call.id, Resize{Rows: rows, Cols: cols})
}

// wakeOnClose unblocks stdin writers when the connection ends.
func (call *Call) wakeOnClose() {
	select {
	case <-call.c.closed:
	case <-call.abandoned:
	}
	call.cmu.Lock()
	call.ccond.Broadcast()
	call.cmu.Unlock()
}

// cancelGrace bounds how long a cancelled Run waits for the agent to
// confirm the command's end.
const cancelGrace = 5 * time.Second

// RunOptions are the streams of one Run.
type RunOptions struct {
	Stdin          io.Reader // nil: EOF at once (without a terminal)
	Stdout, Stderr io.Writer // nil: discard
	// Resize delivers terminal sizes while the command runs.
	Resize <-chan Resize
}

// Run starts req and waits for it, writing its output to the writers from
// the calling goroutine only. A start failure is a *StartError; a lost
// connection wraps ErrConnectionLost; when ctx ends the command's process
// group is killed and ctx's error is returned.
func (c *Client) Run(ctx context.Context, req StartRequest, o RunOptions) (Exit, error) {
	// Without input, the command's stdin is at end of file from the start:
	// no started frame to wait for, no stdin-eof frame to send.
	req.NoStdin = c.noStdin && o.Stdin == nil && !req.TTY
	// Output nobody reads is not sent either.
	req.DiscardStdout = c.discard && o.Stdout == nil && !req.TTY
	req.DiscardStderr = c.discard && o.Stderr == nil && !req.TTY
	call, err := c.Start(req)
	if err != nil {
		return Exit{}, err
	}
	defer call.Abandon()
	if !req.NoStdin {
		go call.wakeOnClose() // wakes a stdin writer waiting for credit
	}
	stdout, stderr := o.Stdout, o.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	stdinStarted := false
	startStdin := func() {
		if stdinStarted {
			return
		}
		stdinStarted = true
		if req.NoStdin {
			return
		}
		if o.Stdin == nil {
			if !req.TTY {
				_ = call.CloseStdin()
			}
			return
		}
		go func() {
			buf := make([]byte, stdinChunk)
			for {
				n, err := o.Stdin.Read(buf)
				if n > 0 && call.WriteStdin(buf[:n]) != nil {
					return
				}
				if err != nil {
					if !req.TTY {
						_ = call.CloseStdin()
					}
					return
				}
			}
		}()
	}
	var writeErr error
	for {
		select {
		case f := <-call.events:
			switch f.Type {
			case TypeStarted:
				startStdin()
			case TypeStartFailed:
				var sf StartFailed
				_ = Decode(f, &sf)
				return Exit{}, &StartError{Message: sf.Error, Reason: sf.Reason}
			case TypeStdout, TypeStderr:
				if writeErr != nil {
					continue
				}
				w := stdout
				if f.Type == TypeStderr {
					w = stderr
				}
				if _, err := w.Write(f.Payload); err != nil {
					writeErr = err
					_ = call.Cancel()
				}
				releasePayload(f.Payload)
			case TypeExit:
				var ex Exit
				if err := Decode(f, &ex); err != nil {
					return Exit{}, err
				}
				if writeErr != nil {
					return Exit{}, fmt.Errorf("writing the command's output: %w", writeErr)
				}
				return ex, nil
			}
		case sz := <-o.Resize:
			_ = call.Resize(sz.Rows, sz.Cols)
		case <-ctx.Done():
			_ = call.Cancel()
			call.waitExit(cancelGrace)
			return Exit{}, context.Cause(ctx)
		case <-c.closed:
			return Exit{}, fmt.Errorf("%w: %w", ErrConnectionLost, c.Err())
		}
	}
}

// waitExit discards output until the command's exit arrives or grace
// passes, so that a cancelled Run returns only once the kill took effect.
func (call *Call) waitExit(grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	for {
		select {
		case f := <-call.events:
			if f.Type == TypeExit || f.Type == TypeStartFailed {
				return
			}
		case <-t.C:
			return
		case <-call.c.closed:
			return
		}
	}
}
