package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
)

// exec runs cmd through the Engine's exec API. The caller holds s.mu.
func (s *Session) exec(ctx context.Context, cmd runbox.Command, streams runbox.Streams) (runbox.Result, error) {
	cli := s.e.cli
	var size client.ConsoleSize
	if cmd.TTY && cmd.TermSize != (runbox.TermSize{}) {
		size = client.ConsoleSize{Height: uint(cmd.TermSize.Rows), Width: uint(cmd.TermSize.Cols)}
	}
	// Called before ExecCreate: the Engine has no call that deletes an
	// exec that was created and never started.
	if err := cmd.Starting(); err != nil {
		return runbox.Result{}, err
	}
	created, err := cli.ExecCreate(ctx, s.id, client.ExecCreateOptions{
		Cmd:         cmd.Args,
		Env:         cmd.Env,
		WorkingDir:  cmd.Dir,
		User:        cmd.User,
		TTY:         cmd.TTY,
		ConsoleSize: size,
		// Without a terminal, stdin is always attached so that nil Stdin is a
		// prompt EOF. A terminal's input is not half-closed: the Engine then
		// closes the terminal itself and the output is lost.
		AttachStdin:  !cmd.TTY || cmd.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return runbox.Result{}, s.execErr(ctx, "creating exec", err)
	}
	att, err := cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{TTY: cmd.TTY, ConsoleSize: size})
	if err != nil {
		return runbox.Result{}, s.execErr(ctx, "attaching exec", err)
	}
	defer att.Close()
	if cmd.TTY {
		// Engines before API 1.42 ignore the size given at creation. The
		// resize waits for the process to start; input is held until then
		// so that an interactive program sees its size before its input.
		s.e.resizeExec(ctx, created.ID, cmd.TermSize)
		done := make(chan struct{})
		defer close(done)
		go s.e.forwardResizes(ctx, created.ID, cmd.Resize, done)
	}
	// Closing the connection is the only way to unblock the stream reader
	// when ctx ends.
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()

	go func() {
		// The copy ends when Stdin does or when the connection is closed
		// after the process has finished. Like os/exec, a Stdin that never
		// returns from Read keeps this goroutine until it does.
		if cmd.Stdin != nil {
			_, _ = io.Copy(att.Conn, cmd.Stdin)
		}
		if !cmd.TTY {
			_ = att.CloseWrite() // EOF for the process
		}
	}()

	stdout, stderr := orDiscard(streams.Stdout), orDiscard(streams.Stderr)
	// The runtime reports an execve that failed after the process was
	// created on the process's own stderr (the terminal with a TTY): hold
	// back what could be that line until the exit decides.
	var lines *execveGate
	var copyErr error
	if cmd.TTY {
		lines = &execveGate{w: stdout, holding: true}
		gate := &startGate{w: lines, check: s.startCheck(ctx, created.ID)}
		// A terminal's output is one raw stream, not multiplexed frames.
		_, copyErr = io.Copy(gate, att.Reader)
		return s.execOutcome(ctx, cmd, created.ID, copyErr, gate, lines)
	}
	lines = &execveGate{w: stderr, holding: true}
	// Output on stdout means the program ran: release stderr first so that
	// a caller sharing one writer for both sees them in order.
	out := &otherStream{w: stdout, seen: lines}
	gate := &startGate{w: out, check: s.startCheck(ctx, created.ID)}
	_, copyErr = stdcopy.StdCopy(gate, lines, att.Reader)
	return s.execOutcome(ctx, cmd, created.ID, copyErr, gate, lines)
}

// startCheck asks the Engine whether the exec's process exists.
func (s *Session) startCheck(ctx context.Context, execID string) func() (bool, error) {
	return func() (bool, error) {
		st, err := s.e.inspectExec(ctx, execID)
		return st.Running || st.Pid != 0, err
	}
}

// execOutcome turns the finished stream and the exec's status into the
// command's outcome.
func (s *Session) execOutcome(ctx context.Context, cmd runbox.Command, execID string, copyErr error, gate *startGate, lines *execveGate) (res runbox.Result, err error) {
	notStarted := false
	defer func() {
		// Whatever was held is the program's output, unless it was the
		// runtime's report that the program never started.
		if !notStarted {
			if rerr := lines.release(); rerr != nil && err == nil {
				res, err = runbox.Result{}, rerr
			}
		}
	}()
	if ctx.Err() != nil {
		return runbox.Result{}, cancelled(ctx, "the command may still be running in the session")
	}
	if copyErr != nil {
		return runbox.Result{}, fmt.Errorf("%w: reading the command's output: %w", runbox.ErrTransport, copyErr)
	}
	st, err := s.e.waitExec(ctx, execID)
	if err != nil {
		if ctx.Err() != nil {
			return runbox.Result{}, cancelled(ctx, "the command's status is unknown")
		}
		return runbox.Result{}, s.execErr(ctx, "reading the exec status", err)
	}
	if st.Pid == 0 {
		if err := s.checkRunning(context.WithoutCancel(ctx)); err != nil {
			return runbox.Result{}, err
		}
		// The Engine never started the process and wrote its reason where
		// stdout would be; report it as a launch failure, not as output.
		msg := strings.TrimSpace(gate.held.String())
		if msg == "" {
			msg = fmt.Sprintf("the Engine reported exit code %d without starting a process", *st.ExitCode)
		}
		return runbox.Result{}, startErr(msg, engineStartReason(msg))
	}
	if err := gate.release(); err != nil {
		return runbox.Result{}, err
	}
	if msg, errno, ok := lines.failure(*st.ExitCode, cmd.Args[0]); ok && s.execveCouldFail(ctx, cmd, errno) {
		notStarted = true
		return runbox.Result{}, startErr(msg, engineStartReason(errno))
	}
	return runbox.Result{ExitCode: *st.ExitCode}, nil
}

// resizeExec sets an exec's terminal size. A failed resize does not fail
// the command: the terminal keeps its previous size.
func (e *Executor) resizeExec(ctx context.Context, execID string, sz runbox.TermSize) {
	if sz.Rows == 0 || sz.Cols == 0 {
		return
	}
	_, _ = e.cli.ExecResize(ctx, execID, client.ExecResizeOptions{Height: uint(sz.Rows), Width: uint(sz.Cols)})
}

// forwardResizes applies every size from sizes until done is closed.
func (e *Executor) forwardResizes(ctx context.Context, execID string, sizes <-chan runbox.TermSize, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case sz, ok := <-sizes:
			if !ok {
				return
			}
			e.resizeExec(ctx, execID, sz)
		}
	}
}

// execErr classifies an exec API failure: a session whose lifetime process
// has ended, a cancellation, or an Engine error.
func (s *Session) execErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return cancelled(ctx, "")
	}
	// The Engine words "the container is gone" in several ways (409, 404,
	// or a 500 on attach), so ask it directly.
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if rerr := s.checkRunning(ictx); rerr != nil && errors.Is(rerr, runbox.ErrSessionEnded) {
		return fmt.Errorf("%w (%s: %w)", rerr, what, err)
	}
	return fmt.Errorf("runbox/docker: %s: %w", what, s.e.engineErr(err))
}

func cancelled(ctx context.Context, note string) error {
	if note != "" {
		return fmt.Errorf("%w (%s): %w", runbox.ErrCancelled, note, context.Cause(ctx))
	}
	return fmt.Errorf("%w: %w", runbox.ErrCancelled, context.Cause(ctx))
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// startGate passes stdout through once the process is known to have
// started. When the Engine fails to start an exec it writes its error text
// on the stdout stream; the gate holds that text back so that it becomes the
// launch error instead of the caller's output.
type startGate struct {
	w       io.Writer
	check   func() (started bool, err error)
	decided bool
	holding bool
	held    bytes.Buffer
}

const maxHeld = 64 << 10

func (g *startGate) Write(p []byte) (int, error) {
	if !g.decided {
		started, err := g.check()
		if err != nil {
			return 0, err
		}
		g.decided, g.holding = true, !started
	}
	if g.holding {
		if g.held.Len()+len(p) > maxHeld {
			// Far more than an Engine error message: it is real output.
			if err := g.release(); err != nil {
				return 0, err
			}
			return g.w.Write(p)
		}
		return g.held.Write(p)
	}
	return g.w.Write(p)
}

// release forwards anything held: the process did start after all.
func (g *startGate) release() error {
	g.holding = false
	if g.held.Len() == 0 {
		return nil
	}
	_, err := g.w.Write(g.held.Bytes())
	g.held.Reset()
	return err
}

// execveErrors are execve(2)'s failures as Go (and so runc) words them on
// Linux.
var execveErrors = map[string]bool{
	"argument list too long": true, "permission denied": true, "invalid argument": true,
	"input/output error": true, "is a directory": true, "accessing a corrupted shared library": true,
	"too many levels of symbolic links": true, "too many open files": true, "file name too long": true,
	"too many open files in system": true, "no such file or directory": true, "exec format error": true,
	"cannot allocate memory": true, "not a directory": true, "operation not permitted": true,
	"text file busy": true,
}

const errnoE2BIG = "argument list too long"

// maxExecveLine bounds what execveGate holds: "exec ", a path of at most
// PATH_MAX and an errno's text.
const maxExecveLine = 5 + 4096 + 64

// execveGate holds back the start of a stream while it may still be the
// line the runtime (runc) prints when execve fails in a process it has
// already created: "exec NAME: ERRNO", followed by exit code 1. The Engine
// then reports a started process, so the line and the exit code are the
// only trace; the gate keeps the line out of the caller's output until the
// exit code decides. Anything else (other bytes, more output, output on the
// other stream) releases it at once, in order.
type execveGate struct {
	w       io.Writer
	holding bool
	other   bool // the other stream carried output: the program ran
	held    bytes.Buffer
}

func (g *execveGate) Write(p []byte) (int, error) {
	if !g.holding {
		return g.w.Write(p)
	}
	g.held.Write(p)
	if !execveLinePrefix(g.held.Bytes()) {
		if err := g.release(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// release forwards anything held and stops holding.
func (g *execveGate) release() error {
	g.holding = false
	if g.held.Len() == 0 {
		return nil
	}
	_, err := g.w.Write(g.held.Bytes())
	g.held.Reset()
	return err
}

// failure reports the runtime's line when the process's whole output was
// exactly that line about this command's program, and it exited 1.
func (g *execveGate) failure(exitCode int, arg0 string) (msg, errno string, ok bool) {
	if !g.holding || g.other || exitCode != 1 {
		return "", "", false
	}
	line, found := strings.CutSuffix(g.held.String(), "\n")
	if !found {
		return "", "", false
	}
	line = strings.TrimSuffix(line, "\r") // a terminal's line end
	rest, found := strings.CutPrefix(line, "exec ")
	i := strings.LastIndex(rest, ": ")
	if !found || i <= 0 {
		return "", "", false
	}
	name, errno := rest[:i], rest[i+2:]
	if !execveErrors[errno] {
		return "", "", false
	}
	// runc execs the path exec.LookPath found: arg0 itself when it has a
	// slash, else a directory of $PATH joined with it.
	if strings.Contains(arg0, "/") {
		if name != arg0 {
			return "", "", false
		}
	} else if name != arg0 && !strings.HasSuffix(name, "/"+arg0) {
		return "", "", false
	}
	return line, errno, true
}

// execveLinePrefix reports whether b can still become one runtime line.
func execveLinePrefix(b []byte) bool {
	if len(b) > maxExecveLine {
		return false
	}
	const prefix = "exec "
	if len(b) < len(prefix) {
		return bytes.HasPrefix([]byte(prefix), b)
	}
	if !bytes.HasPrefix(b, []byte(prefix)) {
		return false
	}
	i := bytes.IndexByte(b, '\n')
	return i < 0 || i == len(b)-1
}

// otherStream marks, before anything reaches w, that the program produced
// output, and releases the held stream first so the order is kept.
type otherStream struct {
	w    io.Writer
	seen *execveGate
}

func (o *otherStream) Write(p []byte) (int, error) {
	if len(p) > 0 {
		o.seen.other = true
		if err := o.seen.release(); err != nil {
			return 0, err
		}
	}
	return o.w.Write(p)
}

// argMax is Linux's smallest limit on execve's arguments and environment
// together (ARG_MAX, 128 KiB); the real limit is a quarter of the stack
// limit when that is larger. MAX_ARG_STRLEN, the limit for one string, is
// 32 pages, never less either.
const argMax = 128 << 10

// execveCouldFail corroborates the runtime's line where it can: "argument
// list too long" is impossible for a command whose arguments and whole
// environment (the container's, which the Engine adds, and the command's)
// fit in argMax, so a program that printed it about itself is output.
func (s *Session) execveCouldFail(ctx context.Context, cmd runbox.Command, errno string) bool {
	if errno != errnoE2BIG {
		return true
	}
	size := 0
	add := func(strs []string) {
		for _, v := range strs {
			size += len(v) + 1 + 8 // the string, its NUL, its pointer
		}
	}
	add(cmd.Args)
	add(cmd.Env)
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	res, err := s.e.cli.ContainerInspect(ictx, s.id, client.ContainerInspectOptions{})
	if err != nil {
		return true // cannot tell: the runtime's word stands
	}
	if c := res.Container.Config; c != nil {
		add(c.Env)
	}
	// The Engine may add PATH, HOSTNAME and TERM; the kernel copies the
	// program's path too.
	size += 4096 + 512
	return size > argMax
}

// execState is the part of the Engine's exec status that matters here. The
// client's own ExecInspect turns a missing exit code into 0, which would make
// "not finished" read as success, so it is decoded here instead.
type execState struct {
	Running  bool
	ExitCode *int
	Pid      int
}

func (e *Executor) inspectExec(ctx context.Context, id string) (execState, error) {
	url := "http://docker/v" + e.cli.ClientVersion() + "/exec/" + id + "/json"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return execState{}, err
	}
	resp, err := e.raw.Do(req)
	if err != nil {
		return execState{}, fmt.Errorf("%w: %w", runbox.ErrTransport, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return execState{}, fmt.Errorf("%w: %w", runbox.ErrTransport, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		var m struct{ Message string }
		if json.Unmarshal(body, &m) == nil && m.Message != "" {
			msg = m.Message
		}
		if resp.StatusCode == http.StatusNotFound {
			return execState{}, cerrdefs.ErrNotFound.WithMessage(msg)
		}
		return execState{}, fmt.Errorf("engine answered %s: %s", resp.Status, msg)
	}
	var r container.ExecInspectResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return execState{}, fmt.Errorf("decoding exec status: %w", err)
	}
	return execState{Running: r.Running, ExitCode: r.ExitCode, Pid: r.Pid}, nil
}

// waitExec polls until the exec has really finished: not running and with
// an exit code. Right after the stream ends the Engine may still report the
// exec as running; a nil exit code means "not finished", never 0.
func (e *Executor) waitExec(ctx context.Context, id string) (execState, error) {
	for polls := 0; ; polls++ {
		st, err := e.inspectExec(ctx, id)
		if err != nil {
			return st, err
		}
		if !st.Running && st.ExitCode != nil {
			return st, nil
		}
		// The Engine usually catches up within milliseconds: poll closely
		// at first, then back off for a process that really lingers.
		delay := 500 * time.Microsecond
		if polls > 40 {
			delay = min(time.Duration(polls-40)*5*time.Millisecond, 50*time.Millisecond)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return st, ctx.Err()
		case <-t.C:
		}
	}
}
