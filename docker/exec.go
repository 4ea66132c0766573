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
	created, err := cli.ExecCreate(ctx, s.id, client.ExecCreateOptions{
		Cmd:         cmd.Args,
		Env:         cmd.Env,
		WorkingDir:  cmd.Dir,
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
	gate := &startGate{w: stdout, check: func() (bool, error) {
		st, err := s.e.inspectExec(ctx, created.ID)
		return st.Running || st.Pid != 0, err
	}}
	var copyErr error
	if cmd.TTY {
		// A terminal's output is one raw stream, not multiplexed frames.
		_, copyErr = io.Copy(gate, att.Reader)
	} else {
		_, copyErr = stdcopy.StdCopy(gate, stderr, att.Reader)
	}
	if ctx.Err() != nil {
		return runbox.Result{}, cancelled(ctx, "the command may still be running in the session")
	}
	if copyErr != nil {
		return runbox.Result{}, fmt.Errorf("%w: reading the command's output: %w", runbox.ErrTransport, copyErr)
	}
	st, err := s.e.waitExec(ctx, created.ID)
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
		return runbox.Result{}, fmt.Errorf("%w: %s", runbox.ErrStart, msg)
	}
	if err := gate.release(); err != nil {
		return runbox.Result{}, err
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
	return fmt.Errorf("runbox/docker: %s: %w", what, engineErr(err))
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
