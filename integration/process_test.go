//go:build linux

package integration

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/host"
)

// driveStreams is the one caller-side code path for either backend: feed
// stdin, collect stdout and stderr, wait.
func driveStreams(t *testing.T, p runbox.StreamingProcess, input string) (stdout, stderr string, res runbox.Result, err error) {
	t.Helper()
	var wg sync.WaitGroup
	var out, errb []byte
	wg.Add(2)
	go func() { defer wg.Done(); out, _ = io.ReadAll(p.Stdout()) }()
	go func() { defer wg.Done(); errb, _ = io.ReadAll(p.Stderr()) }()
	// Two concurrent writers: Stdin is safe for that.
	half := len(input) / 2
	var ww sync.WaitGroup
	for _, part := range []string{input[:half], input[half:]} {
		ww.Add(1)
		go func() {
			defer ww.Done()
			_, werr := io.WriteString(p.Stdin(), part)
			assert.NoError(t, werr)
		}()
	}
	ww.Wait()
	require.NoError(t, p.Stdin().Close())
	_, werr := p.Stdin().Write([]byte("late"))
	assert.ErrorIs(t, werr, runbox.ErrProcessStdinClosed)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err = p.Wait(ctx)
	wg.Wait()
	return string(out), string(errb), res, err
}

func TestStreamingProcessSameCodePathBothBackends(t *testing.T) {
	e := agentExecutor(t)
	s := open(t, e, baseSpec())
	h, err := host.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })

	script := "wc -c; echo to-stderr >&2; exit 3"
	starts := map[string]func() (runbox.StreamingProcess, error){
		"docker": func() (runbox.StreamingProcess, error) {
			return s.Start(context.Background(), runbox.ShellCommand(script))
		},
		"host": func() (runbox.StreamingProcess, error) {
			pp, err := h.PrepareProcess(context.Background(), host.ProcessOptions{Command: script, Directory: os.TempDir()})
			if err != nil {
				return nil, err
			}
			return pp.Start(context.Background())
		},
	}
	for name, start := range starts {
		t.Run(name, func(t *testing.T) {
			p, err := start()
			require.NoError(t, err)
			defer p.Close(context.Background())
			assert.Equal(t, runbox.ProcessStreamModePipes, p.StreamMode())
			assert.NotEqual(t, runbox.LifetimeContainmentUnspecified, p.LifetimeContainment())
			stdout, stderr, res, err := driveStreams(t, p, strings.Repeat("x", 100000))
			require.NoError(t, err)
			assert.Equal(t, "100000", strings.TrimSpace(stdout))
			assert.Equal(t, "to-stderr\n", stderr)
			assert.Equal(t, 3, res.ExitCode)
			again, err := p.Wait(context.Background())
			require.NoError(t, err)
			assert.Equal(t, res, again, "Wait's result is shared")
			assert.ErrorIs(t, p.Resize(runbox.TermSize{Rows: 1, Cols: 1}), runbox.ErrProcessTTYUnsupported)
		})
	}
}

func TestStreamingProcessSignals(t *testing.T) {
	e := agentExecutor(t, docker.WithTerminateGrace(300*time.Millisecond))
	s := open(t, e, baseSpec())
	ctx := context.Background()

	p, err := s.Start(ctx, argv("sleep", "1004"))
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = p.Wait(short)
	cancel()
	require.ErrorIs(t, err, runbox.ErrCancelled, "a cancelled Wait releases only the caller")
	require.NoError(t, p.Signal(runbox.ProcessSignalInterrupt))
	res, err := p.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, runbox.Result{ExitCode: 130, Signal: "SIGINT"}, res)
	assert.ErrorIs(t, p.Signal(runbox.ProcessSignalKill), os.ErrProcessDone)
	require.NoError(t, p.Close(ctx))

	// A process that ignores SIGTERM is killed once the grace period has passed.
	p, err = s.Start(ctx, runbox.ShellCommand("trap '' TERM; echo ready; sleep 1005; echo survived"))
	require.NoError(t, err)
	buf := make([]byte, 6)
	_, err = io.ReadFull(p.Stdout(), buf)
	require.NoError(t, err)
	require.NoError(t, p.Signal(runbox.ProcessSignalTerminate))
	require.NoError(t, p.Signal(runbox.ProcessSignalTerminate))
	rest := p.Stdout()
	go func() { _, _ = io.Copy(io.Discard, rest) }()
	res, err = p.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, "SIGKILL", res.Signal, "Terminate escalated to a kill")
	require.NoError(t, p.Close(ctx))

	// Close kills a running process, and is idempotent.
	p, err = s.Start(ctx, argv("sleep", "1006"))
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))
	require.NoError(t, p.Close(ctx))
	res, err = p.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, "SIGKILL", res.Signal)

	// The session is usable afterwards: calls were only serialized.
	o := run(t, s, argv("echo", "next"))
	assert.Equal(t, "next\n", o.stdout)

	_, err = s.Start(ctx, argv("/no/such/program"))
	assert.ErrorIs(t, err, runbox.ErrStart)

	plain := open(t, newExecutor(t, docker.WithoutAgent()), baseSpec())
	_, err = plain.Start(ctx, argv("true"))
	assert.True(t, errors.Is(err, runbox.ErrUnsupported))
}

func TestStreamingProcessTTY(t *testing.T) {
	e := agentExecutor(t)
	s := open(t, e, baseSpec())
	p, err := s.Start(context.Background(), runbox.Command{
		Args: []string{"sh", "-c", `stty size; read line; echo "got $line"; until [ "$(stty size)" = "30 70" ]; do sleep 0.02; done; echo resized`},
		TTY:  true, TermSize: runbox.TermSize{Rows: 20, Cols: 60},
	})
	require.NoError(t, err)
	defer p.Close(context.Background())
	assert.Equal(t, runbox.ProcessStreamModePTY, p.StreamMode())
	var out syncBuffer
	go func() { _, _ = io.Copy(&out, p.Stdout()) }()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "20 60") }, time.Minute, 10*time.Millisecond)
	_, err = p.Stdin().Write([]byte("hello\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "got hello") }, time.Minute, 10*time.Millisecond)
	require.NoError(t, p.Resize(runbox.TermSize{Rows: 30, Cols: 70}))
	res, err := p.Wait(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "resized") }, time.Minute, 10*time.Millisecond)
}
