//go:build linux

package integration

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// gVisor against runc in the same run: "runbox" is a session on runsc,
// "runc" the same session on runc, both with the agent (reached over an
// exec under gVisor, over a host socket under runc); "raw" is plain Engine
// exec into the gVisor session.

func gvisorSpec() runbox.Spec {
	spec := baseSpec()
	spec.Init = false // the agent is PID 1
	spec.Runtime = gvisor
	return spec
}

func BenchmarkGVisorOpen(b *testing.B) {
	e := agentExecutor(b)
	needRuntime(b, e, gvisor)
	ctx := context.Background()
	bench := func(spec runbox.Spec) func(b *testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				s, err := e.Open(ctx, spec)
				require.NoError(b, err)
				b.StopTimer()
				require.NoError(b, s.Close(ctx))
				b.StartTimer()
			}
		}
	}
	runc := gvisorSpec()
	runc.Runtime = "runc"
	b.Run("runbox", bench(gvisorSpec()))
	b.Run("runc", bench(runc))
}

// gvisorPair opens the same session on gVisor and on runc.
func gvisorPair(b *testing.B) (e *docker.Executor, gv, rc runbox.Session) {
	e = agentExecutor(b)
	needRuntime(b, e, gvisor)
	runc := gvisorSpec()
	runc.Runtime = "runc"
	return e, open(b, e, gvisorSpec()), open(b, e, runc)
}

func BenchmarkGVisorRunTrue(b *testing.B) {
	e, gv, rc := gvisorPair(b)
	ctx := context.Background()
	bench := func(s runbox.Session) func(b *testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				_, err := s.Run(ctx, argv("true"), runbox.Streams{})
				require.NoError(b, err)
			}
		}
	}
	b.Run("runbox", bench(gv))
	b.Run("runc", bench(rc))
	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			rawExec(b, e.Client(), gv.ID(), []string{"true"})
		}
	})
}

func BenchmarkGVisorStream64MiB(b *testing.B) {
	e, gv, rc := gvisorPair(b)
	ctx := context.Background()
	bench := func(s runbox.Session) func(b *testing.B) {
		return func(b *testing.B) {
			b.SetBytes(streamBytes)
			for b.Loop() {
				_, err := s.Run(ctx, runbox.Command{Args: streamCmd}, runbox.Streams{Stdout: io.Discard})
				require.NoError(b, err)
			}
		}
	}
	b.Run("runbox", bench(gv))
	b.Run("runc", bench(rc))
	b.Run("raw", func(b *testing.B) {
		b.SetBytes(streamBytes)
		for b.Loop() {
			rawExec(b, e.Client(), gv.ID(), streamCmd)
		}
	})
}
