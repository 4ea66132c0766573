//go:build linux

package integration

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/host"
	"github.com/runbox-dev/runbox/runboxtest"
)

// TestStreamingProcessLifecycle runs one table of lifecycle cases against
// both backends through runbox.StreamingProcess. For the session, every
// case ends with a Run under a deadline: a process that was closed, or
// left unread, must never wedge the session.
func TestStreamingProcessLifecycle(t *testing.T) {
	s := open(t, agentExecutor(t), baseSpec())
	h, err := host.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })

	backends := []runboxtest.Lifecycle{
		{
			Name: "docker session",
			Start: func(ctx context.Context, script string) (runbox.StreamingProcess, error) {
				return s.Start(ctx, runbox.ShellCommand(script))
			},
			Usable: func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				res, err := s.Run(ctx, argv("true"), runbox.Streams{})
				if err == nil && res.ExitCode != 0 {
					err = errors.New("true failed")
				}
				return err
			},
		},
		{
			Name: "host",
			Start: func(ctx context.Context, script string) (runbox.StreamingProcess, error) {
				pp, err := h.PrepareProcess(ctx, host.ProcessOptions{Args: []string{"sh", "-c", script}, Directory: os.TempDir()})
				if err != nil {
					return nil, err
				}
				return pp.Start(ctx)
			},
		},
	}
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) { runboxtest.RunLifecycle(t, b) })
	}
}

// TestBusySessionHonoursContext: calls on one session are serial, and a
// call that waits for its turn gives up when its own context ends.
func TestBusySessionHonoursContext(t *testing.T) {
	s := open(t, agentExecutor(t), baseSpec())
	ctx := context.Background()
	p, err := s.Start(ctx, runbox.ShellCommand("echo hello; sleep 1000"))
	require.NoError(t, err)

	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, 300*time.Millisecond)
	}
	bound := 10 * time.Second // far above the 300 ms deadline; only a hang exceeds it

	c, cancel := short()
	t0 := time.Now()
	var res runbox.Result
	bounded(t, "Run", func() { res, err = s.Run(c, argv("true"), runbox.Streams{}) })
	cancel()
	assert.ErrorIs(t, err, runbox.ErrCancelled, "Run queued behind a process")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, -1, res.ExitCode)
	assert.Less(t, time.Since(t0), bound)

	c, cancel = short()
	t0 = time.Now()
	bounded(t, "Snapshot", func() { _, err = s.Snapshot(c, runbox.SnapshotOptions{}) })
	cancel()
	assert.ErrorIs(t, err, runbox.ErrCancelled, "Snapshot queued behind a process")
	assert.Less(t, time.Since(t0), bound)

	c, cancel = short()
	t0 = time.Now()
	bounded(t, "Start", func() { _, err = s.Start(c, argv("true")) })
	cancel()
	assert.ErrorIs(t, err, runbox.ErrCancelled, "Start queued behind a process")
	assert.Less(t, time.Since(t0), bound)

	// The process was never read: Close still ends it at once and frees
	// the session.
	c, cancel = context.WithTimeout(ctx, 5*time.Second)
	t0 = time.Now()
	bounded(t, "Close", func() { err = p.Close(c) })
	cancel()
	require.NoError(t, err)
	assert.Less(t, time.Since(t0), 5*time.Second)
	c, cancel = context.WithTimeout(ctx, time.Second)
	bounded(t, "Wait", func() { res, err = p.Wait(c) })
	cancel()
	require.NoError(t, err, "Wait after Close returns")
	assert.Equal(t, "SIGKILL", res.Signal)
	_, err = io.ReadAll(p.Stdout())
	assert.Error(t, err, "the streams are released")

	c, cancel = context.WithTimeout(ctx, 10*time.Second)
	var o runbox.Result
	bounded(t, "Run after Close", func() { o, err = s.Run(c, argv("true"), runbox.Streams{}) })
	cancel()
	require.NoError(t, err, "the session is free after Close")
	assert.Equal(t, 0, o.ExitCode)
}

// bounded runs fn and fails the test at once if it has not returned after
// 20 s: a call that ignores its context must fail the test, not hang it.
func bounded(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		require.FailNow(t, "no return within 20s", what)
	}
}
