//go:build linux

package integration

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// Session.Logs copies the lifetime process's output (never that of
// commands) and says whether it still runs or how it ended; Spec.Dir is
// the working directory of the lifetime process and of commands that name
// none. Both with the agent as PID 1 and with the Engine's init.
func TestSessionLogsAndDir(t *testing.T) {
	// Persistent sessions, as runbox open makes: a leased one stays until
	// its lease runs out after its lifetime process ended (below).
	for name, e := range map[string]*docker.Executor{"agent": agentExecutor(t, docker.WithoutLease()), "plain": newExecutor(t, docker.WithoutAgent())} {
		t.Run(name, func(t *testing.T) {
			ctx := fctx(t)
			spec := baseSpec()
			spec.Init = name == "plain"
			spec.Dir = "/tmp"
			spec.Process = []string{"sh", "-c", "pwd; echo two; echo err >&2; exec sleep 1000000"}
			s := open(t, e, spec)
			assert.Equal(t, "/tmp", s.Spec().Dir)

			var stdout, stderr bytes.Buffer
			require.Eventually(t, func() bool {
				stdout.Reset()
				stderr.Reset()
				lr, err := s.Logs(ctx, docker.LogsOptions{Stdout: &stdout, Stderr: &stderr})
				require.NoError(t, err)
				require.True(t, lr.Running)
				return stdout.String() == "/tmp\ntwo\n" && stderr.String() == "err\n"
			}, time.Minute, 20*time.Millisecond, "the lifetime process's output, in its working directory: %q %q", &stdout, &stderr)

			o := run(t, s, argv("sh", "-c", "pwd; echo not in the logs"))
			require.NoError(t, o.err)
			assert.Equal(t, "/tmp\nnot in the logs\n", o.stdout, "commands start in the session's directory")
			o = run(t, s, runbox.Command{Args: []string{"pwd"}, Dir: "/"})
			assert.Equal(t, "/\n", o.stdout, "a command's own directory wins")

			stdout.Reset()
			stderr.Reset()
			_, err := s.Logs(ctx, docker.LogsOptions{Stdout: &stdout, Stderr: &stderr, Tail: 1})
			require.NoError(t, err)
			assert.Contains(t, []string{"two\n", "err\n"}, stdout.String()+stderr.String(), "the last line of both streams only")

			// Follow returns when the lifetime process ends, with its status.
			done := make(chan docker.LogsResult, 1)
			go func() {
				lr, err := s.Logs(ctx, docker.LogsOptions{Follow: true})
				assert.NoError(t, err)
				done <- lr
			}()
			run(t, s, runbox.ShellCommand("kill -TERM $(pidof sleep)")) // the session may end under it
			var lr docker.LogsResult
			select {
			case lr = <-done:
			case <-ctx.Done():
				t.Fatal("Logs with Follow did not return when the lifetime process ended")
			}
			waitStopped(t, e.Client(), s.ID())
			lr, err = s.Logs(ctx, docker.LogsOptions{})
			require.NoError(t, err)
			assert.False(t, lr.Running)
			assert.Equal(t, 143, lr.ExitCode)

			_, err = e.Client().ContainerRemove(ctx, s.ID(), client.ContainerRemoveOptions{Force: true})
			require.NoError(t, err)
			_, err = s.Logs(ctx, docker.LogsOptions{})
			assert.ErrorIs(t, err, runbox.ErrSessionNotFound)
		})
	}

	// A leased session whose lifetime process ended stays until its lease
	// runs out, and Logs reports the end meanwhile (the agent knows it);
	// then the Engine removes it: its logs are then "not found", never the
	// Engine's refusal of a container being removed.
	t.Run("leased", func(t *testing.T) {
		ctx := fctx(t)
		e := agentExecutor(t, docker.WithLease(3*time.Second))
		spec := baseSpec()
		spec.Init = false
		s := open(t, e, spec)
		run(t, s, runbox.ShellCommand("kill -TERM $(pidof sleep)"))
		var lr docker.LogsResult
		require.Eventually(t, func() bool {
			var err error
			lr, err = s.Logs(ctx, docker.LogsOptions{})
			require.NoError(t, err)
			return !lr.Running
		}, time.Minute, 20*time.Millisecond, "the lifetime process's end is reported while the lease keeps the session")
		assert.Equal(t, 143, lr.ExitCode)
		_, err := s.Logs(ctx, docker.LogsOptions{Follow: true})
		if err != nil {
			require.ErrorIs(t, err, runbox.ErrSessionNotFound)
		}
		_, err = s.Logs(ctx, docker.LogsOptions{})
		require.ErrorIs(t, err, runbox.ErrSessionNotFound)
	})

	// A relative directory is refused before anything is created.
	e := newExecutor(t, docker.WithoutAgent())
	spec := baseSpec()
	spec.Dir = "tmp"
	_, err := e.Open(context.Background(), spec)
	require.ErrorIs(t, err, runbox.ErrInvalidSpec)
	assert.Empty(t, containersOfRun(t, e.Client()))
}
