package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/agent"
)

// LogsOptions says which of the lifetime process's output Logs copies.
type LogsOptions struct {
	// Stdout and Stderr receive the lifetime process's two streams; a nil
	// writer discards its stream.
	Stdout, Stderr io.Writer
	// Follow keeps copying until the lifetime process ends or ctx is done.
	Follow bool
	// Tail, when positive, copies only the last Tail lines of the log,
	// both streams together (as docker logs --tail counts them).
	Tail int
}

// LogsResult reports the state of the lifetime process once Logs has
// copied its output.
type LogsResult struct {
	// Running says whether the lifetime process was still running.
	Running bool
	// ExitCode is the lifetime process's exit code when it has ended.
	ExitCode int
	// OOMKilled says that the kernel killed it for lack of memory.
	OOMKilled bool
	// Error is the Engine's reason when it could not run it at all.
	Error string
}

// Logs copies what the session's lifetime process wrote (the Engine keeps
// it; the output of commands run with Run or Start is not in it) and
// reports whether the process still runs or how it ended (for a leased
// session whose container the lease still keeps, as its agent reports
// it). A session that is gone or being removed wraps
// runbox.ErrSessionNotFound.
func (s *Session) Logs(ctx context.Context, opts LogsOptions) (LogsResult, error) {
	lopts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: opts.Follow}
	if opts.Tail > 0 {
		lopts.Tail = strconv.Itoa(opts.Tail)
	}
	rc, err := s.e.cli.ContainerLogs(ctx, s.id, lopts)
	if err != nil {
		switch {
		case cerrdefs.IsNotFound(err):
			return LogsResult{}, fmt.Errorf("%w: container %s no longer exists", runbox.ErrSessionNotFound, shortID(s.id))
		case cerrdefs.IsConflict(err):
			// A leased session's container is removed by the Engine as
			// soon as it stops; meanwhile it refuses its logs.
			return LogsResult{}, fmt.Errorf("%w: container %s is being removed: %w", runbox.ErrSessionNotFound, shortID(s.id), err)
		}
		return LogsResult{}, s.e.engineErr(err)
	}
	defer rc.Close()
	stdout, stderr := opts.Stdout, opts.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	// Sessions never have a terminal, so the stream is multiplexed.
	if _, err := stdcopy.StdCopy(stdout, stderr, rc); err != nil {
		if ctx.Err() != nil {
			return LogsResult{}, cancelled(ctx, "")
		}
		return LogsResult{}, fmt.Errorf("%w: reading the session's logs: %w", runbox.ErrTransport, err)
	}
	res, err := s.e.cli.ContainerInspect(context.WithoutCancel(ctx), s.id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return LogsResult{}, fmt.Errorf("%w: container %s no longer exists", runbox.ErrSessionNotFound, shortID(s.id))
		}
		return LogsResult{}, s.e.engineErr(err)
	}
	var lr LogsResult
	if st := res.Container.State; st != nil {
		lr = LogsResult{Running: st.Running, ExitCode: st.ExitCode, OOMKilled: st.OOMKilled, Error: st.Error}
	}
	if lr.Running && s.plan != nil && s.plan.lease > 0 {
		// A leased session's agent outlives the lifetime process until
		// the lease runs out, so that callers learn how it ended: ask it.
		var over *agent.SessionOverError
		if _, err := s.agentConn(ctx); errors.Is(err, runbox.ErrSessionEnded) && errors.As(err, &over) && over.Status != nil {
			lr = LogsResult{ExitCode: *over.Status}
		}
	}
	return lr, nil
}
