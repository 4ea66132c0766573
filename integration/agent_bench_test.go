//go:build linux

package integration

import (
	"context"
	"io"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox/docker"
)

// The agent's measured goals, each in one run beside its baseline:
// "runbox" goes through the agent, "raw" is plain Engine exec through the
// moby client, "dockercli" is `docker exec`, "plain" is Open without agent,
// "floor" is one fork and exec on the host (os/exec), the least any
// command can cost, and "hostpipe" the same bytes through a host pipe.

func BenchmarkAgentRunTrue(b *testing.B) {
	e := agentExecutor(b)
	s := open(b, e, baseSpec())
	benchRunTrue(b, e, s)
	b.Run("floor", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("dockercli", func(b *testing.B) {
		if _, err := exec.LookPath("docker"); err != nil {
			b.Skip("no docker CLI")
		}
		for b.Loop() {
			out, err := exec.Command("docker", "exec", s.ID(), "true").CombinedOutput()
			require.NoError(b, err, string(out))
		}
	})
}

func BenchmarkAgentStream64MiB(b *testing.B) {
	e := agentExecutor(b)
	benchStream(b, e, open(b, e, baseSpec()))
	b.Run("hostpipe", func(b *testing.B) {
		b.SetBytes(streamBytes)
		for b.Loop() {
			// A writer that is not a file: os/exec copies from a pipe, as
			// the agent's caller does.
			cmd := exec.Command(streamCmd[0], streamCmd[1:]...)
			cmd.Stdout = io.Discard
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkAgentOpen(b *testing.B) {
	withAgent := agentExecutor(b)
	plain := newExecutor(b, docker.WithoutAgent())
	ctx := context.Background()
	bench := func(e *docker.Executor) func(b *testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				s, err := e.Open(ctx, baseSpec())
				require.NoError(b, err)
				b.StopTimer()
				require.NoError(b, s.Close(ctx))
				b.StartTimer()
			}
		}
	}
	b.Run("runbox", bench(withAgent))
	b.Run("plain", bench(plain))
}
