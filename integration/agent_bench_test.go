//go:build linux

package integration

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/internal/testimage"
	"golang.org/x/sys/unix"
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
	b.Run("floor", benchFloor)
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

// benchFloor is one fork and exec of the host's true by os/exec.
func benchFloor(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAgentRunTrueHostBinary runs a true that lives on the host's
// filesystem, bind-mounted into the session: the same fork and exec as
// Run(true) without the image's storage driver in the exec path (on an
// Engine whose driver is fuse-overlayfs, every exec from the image goes
// through the FUSE daemon).
func BenchmarkAgentRunTrueHostBinary(b *testing.B) {
	bb, err := testimage.Busybox()
	require.NoError(b, err)
	e := agentExecutor(b)
	spec := baseSpec()
	spec.Mounts = []runbox.Mount{{Source: bb, Target: "/hostbin/true", ReadOnly: true}}
	s := open(b, e, spec)
	ctx := context.Background()
	b.Run("runbox", func(b *testing.B) {
		for b.Loop() {
			_, err := s.Run(ctx, argv("/hostbin/true"), runbox.Streams{})
			require.NoError(b, err)
		}
	})
	b.Run("floor", benchFloor)
}

// BenchmarkAgentRunTrueCaptured is Run(true) with both streams taken by
// the caller, so that the agent gives the command pipes and reads them
// (Run with no writers gives it /dev/null, as os/exec does).
func BenchmarkAgentRunTrueCaptured(b *testing.B) {
	e := agentExecutor(b)
	s := open(b, e, baseSpec())
	ctx := context.Background()
	var out, errs bytes.Buffer
	b.Run("runbox", func(b *testing.B) {
		for b.Loop() {
			out.Reset()
			errs.Reset()
			_, err := s.Run(ctx, argv("true"), runbox.Streams{Stdout: &out, Stderr: &errs})
			require.NoError(b, err)
		}
	})
	b.Run("floor", benchFloor)
}

func BenchmarkAgentStream64MiB(b *testing.B) {
	e := agentExecutor(b)
	benchStream(b, e, open(b, e, baseSpec()))
	b.Run("hostpipe", func(b *testing.B) {
		b.SetBytes(streamBytes)
		buf := make([]byte, 256<<10) // the agent's read size
		for b.Loop() {
			// The pipe the agent gives a command (1 MiB), read as the agent
			// reads it: what remains is the agent's own cost.
			r, w, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			_, _ = unix.FcntlInt(r.Fd(), unix.F_SETPIPE_SZ, 1<<20)
			cmd := exec.Command(streamCmd[0], streamCmd[1:]...)
			cmd.Stdout = w
			err = cmd.Start()
			w.Close()
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := r.Read(buf); err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
			r.Close()
			if err := cmd.Wait(); err != nil {
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
