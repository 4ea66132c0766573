//go:build linux

package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// BenchmarkPoolOpen: Open served by a warm pool ("runbox") beside Open
// without one ("open") and a raw Engine create+start ("raw"), in one run.
// The pooled figure is the median time of the Opens themselves: waiting
// for the pool to refill between them is not part of an Open, and is
// left out.
func BenchmarkPoolOpen(b *testing.B) {
	e := agentExecutor(b)
	ctx := context.Background()
	spec := baseSpec()
	b.Run("runbox", func(b *testing.B) { benchPooledOpen(b, e, spec, "") })
	b.Run("open", func(b *testing.B) {
		plain := agentExecutor(b)
		for b.Loop() {
			s, err := plain.Open(ctx, spec)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := s.Close(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("raw", benchRawOpen(e.Client()))
}

// BenchmarkPoolOpenNamed: a named Open costs the pool one Engine call,
// the rename; beside it a raw Engine create+start.
func BenchmarkPoolOpenNamed(b *testing.B) {
	e := agentExecutor(b)
	b.Run("runbox", func(b *testing.B) { benchPooledOpen(b, e, baseSpec(), "runbox-bench-"+runID) })
	b.Run("raw", benchRawOpen(e.Client()))
}

// benchPooledOpen times Opens of spec (named name) that a warm pool
// serves, and reports their median as ns/op.
func benchPooledOpen(b *testing.B, e *docker.Executor, spec runbox.Spec, name string) {
	ctx := context.Background()
	p, err := e.NewPool(spec, docker.PoolOptions{Size: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := p.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}()
	spec.Name = name
	var took []time.Duration
	for b.Loop() {
		if err := p.WaitReady(ctx); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		s, err := e.Open(ctx, spec)
		took = append(took, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if st := p.Stats(); st.HandedOut != len(took) {
		b.Fatalf("%d of %d Opens came from the pool", st.HandedOut, len(took))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "ns/op")
}
