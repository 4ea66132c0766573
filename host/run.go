package host

import (
	"context"
	"fmt"
	"io"
	"os/exec"

	"github.com/runbox-dev/runbox"
)

// runRequest is one run to the end of its process: a compiled launch and
// where its streams go. Run, the output helpers (RunArgv and friends) and
// Run with a terminal all go through [Executor.runLaunch] with one.
type runRequest struct {
	spec *launchSpec
	// stdin feeds the process: through a pipe (nil is the null device),
	// or typed into the terminal with spec.tty.
	stdin io.Reader
	// streams receive the output; under a terminal everything goes to
	// streams.Stdout.
	streams runbox.Streams
	// combined collects stdout and stderr in one buffer, in the order the
	// process wrote them, instead of writing them to streams; limit bounds
	// it when positive.
	combined bool
	limit    int
	// size and resize are the terminal's first size and its later ones.
	size   runbox.TermSize
	resize <-chan runbox.TermSize
	// starting runs once everything is ready, just before the spawn
	// (runbox.Command.Starting); an error stops the run there.
	starting func() error
}

// runLaunch runs r's process to its end and tears its tree down. It
// returns the Result and, with r.combined, the output collected (even
// with an error). With an error the Result's ExitCode is -1.
func (e *Executor) runLaunch(ctx context.Context, r runRequest) (runbox.Result, []byte, error) {
	if err := ctx.Err(); err != nil {
		return runbox.Result{ExitCode: -1}, nil, cancelled(err)
	}
	if r.spec.tty {
		res, err := e.runTTY(ctx, r)
		return res, nil, err
	}
	return e.runPipes(ctx, r)
}

// runPipes is runLaunch with pipes, supervised in the calling goroutine.
func (e *Executor) runPipes(ctx context.Context, r runRequest) (runbox.Result, []byte, error) {
	failed := runbox.Result{ExitCode: -1}
	p := e.newProc()
	var sink *capture
	var out *outputs
	if r.combined {
		sink = newCapture(r.limit, p.kill)
		// One pipe for both streams keeps the interleaving the process
		// produced.
		op, err := newOutputPipe(sink)
		if err != nil {
			return failed, nil, fmt.Errorf("%w: output pipe: %w", runbox.ErrStart, err)
		}
		out = &outputs{stdout: op.w, stderr: op.w, pipes: []*outputPipe{op}}
	} else {
		o, err := newOutputs(r.streams.Stdout, r.streams.Stderr)
		if err != nil {
			return failed, nil, fmt.Errorf("%w: output pipe: %w", runbox.ErrStart, err)
		}
		out = o
	}
	in, err := newStdinCopier(r.stdin)
	if err != nil {
		out.abort()
		return failed, nil, fmt.Errorf("%w: stdin pipe: %w", runbox.ErrStart, err)
	}
	build := func() *exec.Cmd {
		c := r.spec.cmd(e.cfg.waitDelay)
		c.Stdin = in.childSide()
		c.Stdout, c.Stderr = fileOrNil(out.stdout), fileOrNil(out.stderr)
		return c
	}
	if r.starting != nil {
		if err := r.starting(); err != nil {
			in.abort()
			out.abort()
			return failed, nil, err
		}
	}
	if err := e.start(p, r.spec, build, false); err != nil {
		in.abort()
		out.abort()
		return failed, nil, err
	}
	out.start()
	in.start()
	waitErr := p.superviseInline(ctx)
	out.finish(e.cfg.waitDelay)
	in.finish(e.cfg.waitDelay)
	var b []byte
	if sink != nil {
		b = sink.bytes()
	}
	res, err := p.outcome()
	switch {
	case waitErr != nil:
		return failed, b, joinCleanup(waitErr, p)
	case sink != nil && sink.exceeded():
		return failed, b, joinCleanup(fmt.Errorf("%w: more than %d bytes of output", runbox.ErrOutputLimit, r.limit), p)
	case err != nil:
		return failed, b, err
	}
	if werr := out.err(); werr != nil {
		return failed, b, werr
	}
	return res, b, nil
}
