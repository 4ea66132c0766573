package runboxtest_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/host"
	"github.com/runbox-dev/runbox/runboxtest"
)

// TestCollectHost runs the outcome table of runbox.Collect against the host
// executor, unconfined and confined; integration runs the same table
// against Docker sessions.
func TestCollectHost(t *testing.T) {
	t.Run("unconfined", func(t *testing.T) {
		runboxtest.RunCollect(t, runboxtest.CollectBackend{Name: "host", Runner: newHost(t), ScratchDir: t.TempDir()})
	})
	t.Run("confined", func(t *testing.T) {
		w, _, _ := dirs(t)
		e := newHost(t, host.WithPolicy(host.Policy{WritableRoots: []string{w}}))
		runboxtest.RunCollect(t, runboxtest.CollectBackend{Name: "host sandbox", Runner: e, ScratchDir: w})
	})
}

// TestCollectMemoryBound: a command that writes 1 GiB under the default
// limit of 1 MiB per stream is stopped, and the caller's heap grows by far
// less than what it wrote.
func TestCollectMemoryBound(t *testing.T) {
	const bound = 8 << 20
	e := newHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := runbox.Command{Args: []string{"head", "-c", "1073741824", "/dev/zero"}}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := runbox.Collect(ctx, e, cmd, runbox.CollectOptions{Timeout: time.Minute})
	runtime.ReadMemStats(&after)

	var ce *runbox.CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, runbox.FailureOutputLimit, ce.Kind, "%v", err)
	require.Len(t, ce.RawStdout, runbox.DefaultStreamLimit, "bytes kept")
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("1 GiB under a 1 MiB limit: heap grew by %d KiB; %d KiB allocated in all", grown>>10, allocated>>10)
	assert.Less(t, grown, int64(bound), "heap growth")
	// Everything allocated during the call, garbage included, bounds its
	// peak: it must not follow what the command wrote.
	assert.Less(t, allocated, uint64(bound), "bytes allocated during the call")
	runtime.KeepAlive(ce)
}
