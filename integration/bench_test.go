package integration

import (
	"context"
	"io"
	"testing"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// Each benchmark has a "runbox" and a "raw" sub-benchmark doing the same
// work, the raw one straight through the moby client, so that one run
// yields a ratio (see internal/benchtable).

const streamBytes = 64 << 20

// dd with 64 KiB blocks: busybox head writes in small pieces and would
// measure itself rather than the transport.
var streamCmd = []string{"dd", "if=/dev/zero", "bs=65536", "count=1024"}

func BenchmarkOpen(b *testing.B) {
	e := newExecutor(b)
	ctx := context.Background()
	b.Run("runbox", func(b *testing.B) {
		for b.Loop() {
			s, err := e.Open(ctx, baseSpec())
			require.NoError(b, err)
			b.StopTimer()
			require.NoError(b, s.Close(ctx))
			b.StartTimer()
		}
	})
	b.Run("raw", benchRawOpen(e.Client()))
}

func BenchmarkClose(b *testing.B) {
	e := newExecutor(b)
	ctx := context.Background()
	b.Run("runbox", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			s, err := e.Open(ctx, baseSpec())
			require.NoError(b, err)
			b.StartTimer()
			require.NoError(b, s.Close(ctx))
		}
	})
	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			id := rawOpen(b, e.Client())
			b.StartTimer()
			rawClose(b, e.Client(), id)
		}
	})
}

func BenchmarkRunTrue(b *testing.B) {
	e := newExecutor(b, docker.WithoutAgent())
	benchRunTrue(b, e, open(b, e, baseSpec()))
}

func BenchmarkStream64MiB(b *testing.B) {
	e := newExecutor(b, docker.WithoutAgent())
	benchStream(b, e, open(b, e, baseSpec()))
}

// benchRunTrue runs `true` in s beside a raw Engine exec in the same
// container.
func benchRunTrue(b *testing.B, e *docker.Executor, s runbox.Session) {
	ctx := context.Background()
	b.Run("runbox", func(b *testing.B) {
		for b.Loop() {
			_, err := s.Run(ctx, argv("true"), runbox.Streams{})
			require.NoError(b, err)
		}
	})
	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			rawExec(b, e.Client(), s.ID(), []string{"true"})
		}
	})
}

// benchStream streams 64 MiB of stdout from s beside a raw Engine exec.
func benchStream(b *testing.B, e *docker.Executor, s runbox.Session) {
	ctx := context.Background()
	b.Run("runbox", func(b *testing.B) {
		b.SetBytes(streamBytes)
		for b.Loop() {
			_, err := s.Run(ctx, runbox.Command{Args: streamCmd}, runbox.Streams{Stdout: io.Discard})
			require.NoError(b, err)
		}
	})
	b.Run("raw", func(b *testing.B) {
		b.SetBytes(streamBytes)
		for b.Loop() {
			rawExec(b, e.Client(), s.ID(), streamCmd)
		}
	})
}

func BenchmarkSnapshot(b *testing.B) {
	e := newExecutor(b)
	cli := e.Client()
	s := open(b, e, baseSpec())
	ctx := context.Background()
	require.NoError(b, run(b, s, runbox.ShellCommand("echo data > /tmp/file")).err)
	remove := func(id string) {
		b.StopTimer()
		_, err := cli.ImageRemove(ctx, id, client.ImageRemoveOptions{Force: true})
		require.NoError(b, err)
		b.StartTimer()
	}
	b.Run("runbox", func(b *testing.B) {
		for b.Loop() {
			img, err := s.Snapshot(ctx, runbox.SnapshotOptions{})
			require.NoError(b, err)
			remove(img.ID)
		}
	})
	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			res, err := cli.ContainerCommit(ctx, s.ID(), client.ContainerCommitOptions{NoPause: true})
			require.NoError(b, err)
			remove(res.ID)
		}
	})
}

// rawOpen creates and starts the same container Open would.
// benchRawOpen times a raw Engine create+start, the container removed
// outside the timer.
func benchRawOpen(cli *client.Client) func(*testing.B) {
	return func(b *testing.B) {
		for b.Loop() {
			id := rawOpen(b, cli)
			b.StopTimer()
			rawClose(b, cli, id)
			b.StartTimer()
		}
	}
}

func rawOpen(b *testing.B, cli *client.Client) string {
	ctx := context.Background()
	init := true
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: fixtureRef, Entrypoint: sleeper, Labels: runLabels()},
		HostConfig: &container.HostConfig{NetworkMode: "none", Init: &init},
	})
	require.NoError(b, err)
	_, err = cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{})
	require.NoError(b, err)
	return res.ID
}

func rawClose(b *testing.B, cli *client.Client, id string) {
	_, err := cli.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	require.NoError(b, err)
}

// rawExec is the minimal correct exec: create, attach, EOF on stdin, drain,
// then poll until the exec has finished.
func rawExec(b *testing.B, cli *client.Client, id string, cmd []string) {
	ctx := context.Background()
	ex, err := cli.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: cmd, AttachStdin: true, AttachStdout: true, AttachStderr: true})
	require.NoError(b, err)
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	require.NoError(b, err)
	_ = att.CloseWrite()
	_, err = stdcopy.StdCopy(io.Discard, io.Discard, att.Reader)
	require.NoError(b, err)
	att.Close()
	for {
		st, err := cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		require.NoError(b, err)
		if !st.Running {
			return
		}
	}
}
