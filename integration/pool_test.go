//go:build linux

package integration

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// poolSpec is baseSpec with a label of its own, so that a test can list
// exactly its pool's sessions.
func poolSpec(t testing.TB) (runbox.Spec, string) {
	spec := baseSpec()
	value := fmt.Sprintf("%s-%d", runID, rand.Uint32())
	spec.Labels = map[string]string{labelRun: runID, labelRun + ".pool": value}
	return spec, labelRun + ".pool=" + value
}

// newPool makes a pool closed at the end of the test, and waits until it
// is full.
func newPool(t testing.TB, e *docker.Executor, spec runbox.Spec, opts docker.PoolOptions) *docker.Pool {
	t.Helper()
	p, err := e.NewPool(spec, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close(context.Background())) })
	waitFull(t, p)
	return p
}

func waitFull(t testing.TB, p *docker.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, p.WaitReady(ctx))
}

// TestPoolHandOut: Open of the pool's Spec takes a ready session, which
// has a fresh writable layer and works like any other; a name is given at
// hand-out; a Spec that differs in anything else is not served from the
// pool.
func TestPoolHandOut(t *testing.T) {
	e := agentExecutor(t)
	spec, _ := poolSpec(t)
	p := newPool(t, e, spec, docker.PoolOptions{Size: 2})
	ids := map[string]bool{}

	s1 := open(t, e, spec)
	ids[s1.ID()] = true
	assert.Equal(t, 1, p.Stats().HandedOut, "Open took a pooled session")
	o := run(t, s1, runbox.ShellCommand("echo mine > /marker; cat /marker"))
	require.NoError(t, o.err)
	assert.Equal(t, "mine\n", o.stdout)
	require.NoError(t, s1.Close(context.Background()))

	waitFull(t, p)
	s2 := open(t, e, spec)
	require.False(t, ids[s2.ID()], "a closed session came back from the pool")
	ids[s2.ID()] = true
	assert.Equal(t, 2, p.Stats().HandedOut)
	o = run(t, s2, runbox.ShellCommand("test -e /marker && echo leaked || echo fresh"))
	require.NoError(t, o.err)
	assert.Equal(t, "fresh\n", o.stdout, "a pooled session saw another session's writable layer")

	named := spec
	named.Name = "runbox-pool-" + runID
	s3 := open(t, e, named)
	require.False(t, ids[s3.ID()])
	assert.Equal(t, 3, p.Stats().HandedOut, "a Spec that differs only in its name is served from the pool")
	assert.Equal(t, named.Name, s3.Spec().Name)
	c, err := e.Client().ContainerInspect(context.Background(), s3.ID(), client.ContainerInspectOptions{})
	require.NoError(t, err)
	assert.Equal(t, "/"+named.Name, c.Container.Name)

	other := spec
	other.Env = []string{"DIFFERENT=1"}
	s4 := open(t, e, other)
	assert.Equal(t, 3, p.Stats().HandedOut, "a Spec with other env came from the pool")
	o = run(t, s4, argv("sh", "-c", "echo $DIFFERENT"))
	require.NoError(t, o.err)
	assert.Equal(t, "1\n", o.stdout)
}

// TestPoolNeverTwice: concurrent Opens, more than the pool holds, each get
// a session of their own; the extra ones are opened as without a pool.
func TestPoolNeverTwice(t *testing.T) {
	e := agentExecutor(t)
	spec, label := poolSpec(t)
	const size, opens = 3, 8
	p := newPool(t, e, spec, docker.PoolOptions{Size: size})

	var mu sync.Mutex
	var sessions []runbox.Session
	var wg sync.WaitGroup
	for range opens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			s, err := e.Open(ctx, spec)
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			sessions = append(sessions, s)
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, s := range sessions {
			assert.NoError(t, s.Close(context.Background()))
		}
	})
	require.Len(t, sessions, opens)
	seen := map[string]bool{}
	for _, s := range sessions {
		assert.False(t, seen[s.ID()], "session %s handed out twice", s.ID())
		seen[s.ID()] = true
		o := run(t, s, argv("true"))
		assert.NoError(t, o.err)
	}
	st := p.Stats()
	assert.GreaterOrEqual(t, st.HandedOut, size, "every ready session was taken")
	assert.LessOrEqual(t, st.HandedOut, st.Created)

	// Closed sessions never come back.
	for _, s := range sessions {
		require.NoError(t, s.Close(context.Background()))
		_, err := s.Run(context.Background(), argv("true"), runbox.Streams{})
		assert.ErrorIs(t, err, runbox.ErrSessionClosed)
	}
	waitFull(t, p)
	s := open(t, e, spec)
	assert.False(t, seen[s.ID()])
	waitFull(t, p)
	assert.Len(t, containersLabelled(t, e.Client(), label), size+1, "the pool holds its size and no more")
}

// TestPoolCloseRemovesUnused: Pool.Close removes the sessions it still
// holds and none that were handed out; after it, Open opens without the
// pool. Executor.Close closes its pools.
func TestPoolCloseRemovesUnused(t *testing.T) {
	e := agentExecutor(t)
	spec, label := poolSpec(t)
	p := newPool(t, e, spec, docker.PoolOptions{Size: 3})
	taken := open(t, e, spec)
	require.Equal(t, 1, p.Stats().HandedOut)

	require.NoError(t, p.Close(context.Background()))
	left := containersLabelled(t, e.Client(), label)
	require.Len(t, left, 1, "unused sessions survived Close: %v", left)
	assert.True(t, strings.HasPrefix(left[0], taken.ID()[:12]), "Close removed the session it had handed out")
	o := run(t, taken, argv("echo", "still"))
	require.NoError(t, o.err)
	assert.Equal(t, "still\n", o.stdout)
	require.NoError(t, p.Close(context.Background()), "Close is idempotent")
	require.ErrorIs(t, p.WaitReady(context.Background()), docker.ErrPoolClosed)

	after := open(t, e, spec)
	assert.Equal(t, 1, p.Stats().HandedOut, "a closed pool handed out a session")
	require.NoError(t, after.Close(context.Background()))
	require.NoError(t, taken.Close(context.Background()))

	// Executor.Close closes the pools it holds.
	e2 := agentExecutor(t)
	spec2, label2 := poolSpec(t)
	p2, err := e2.NewPool(spec2, docker.PoolOptions{Size: 2})
	require.NoError(t, err)
	waitFull(t, p2)
	require.NoError(t, e2.Close())
	assert.Empty(t, containersLabelled(t, e.Client(), label2))
	require.ErrorIs(t, p2.WaitReady(context.Background()), docker.ErrPoolClosed)
}

// TestPoolRefusedSpecs: what a pool cannot serve is refused when it is
// made, not discovered later.
func TestPoolRefusedSpecs(t *testing.T) {
	e := agentExecutor(t)
	spec, _ := poolSpec(t)
	named := spec
	named.Name = "x"
	for name, tc := range map[string]struct {
		e    *docker.Executor
		spec runbox.Spec
		opts docker.PoolOptions
	}{
		"size 0":          {e, spec, docker.PoolOptions{}},
		"named":           {e, named, docker.PoolOptions{Size: 1}},
		"persistent":      {agentExecutor(t, docker.WithoutLease()), spec, docker.PoolOptions{Size: 1}},
		"invalid spec":    {e, runbox.Spec{}, docker.PoolOptions{Size: 1}},
		"negative backof": {e, spec, docker.PoolOptions{Size: 1, MaxBackoff: -1}},
	} {
		_, err := tc.e.NewPool(tc.spec, tc.opts)
		assert.ErrorIs(t, err, runbox.ErrInvalidSpec, name)
	}
	p, err := e.NewPool(spec, docker.PoolOptions{Size: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close(context.Background())) })
	same := spec
	same.Env = []string{} // equal to none
	_, err = e.NewPool(same, docker.PoolOptions{Size: 1})
	assert.ErrorIs(t, err, runbox.ErrInvalidSpec, "a second pool for the same spec")
}

// TestPoolBackoff: while the Engine refuses to make the pool's sessions
// (its image is gone), the pool retries one at a time with growing waits
// and Open reports the Engine's answer; once the image is back, the pool
// fills again.
func TestPoolBackoff(t *testing.T) {
	e := agentExecutor(t)
	cli := e.Client()
	ctx := context.Background()
	ref := "runbox-test/pool-backoff:" + runID
	_, err := cli.ImageTag(ctx, client.ImageTagOptions{Source: fixtureRef, Target: ref})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{}) })

	spec, label := poolSpec(t)
	spec.Image = ref
	const maxBackoff = 400 * time.Millisecond
	p := newPool(t, e, spec, docker.PoolOptions{Size: 1, MaxBackoff: maxBackoff})
	_, err = cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{}) // untags: the fixture keeps the image
	require.NoError(t, err)

	taken := open(t, e, spec) // the ready session still runs
	require.Equal(t, 1, p.Stats().HandedOut)
	gone := time.Now()
	require.Eventually(t, func() bool { return p.Stats().Failures >= 4 }, time.Minute, 10*time.Millisecond)
	// Four failures in a row are three waits apart: 100, 200 and 400 ms at
	// least. Without backoff they would be milliseconds apart.
	assert.GreaterOrEqual(t, time.Since(gone), 700*time.Millisecond, "refills were retried without backing off")
	st := p.Stats()
	assert.ErrorIs(t, st.LastErr, runbox.ErrImageUnavailable)
	assert.Equal(t, 0, st.Ready)
	_, err = e.Open(ctx, spec)
	assert.ErrorIs(t, err, runbox.ErrImageUnavailable, "with the pool empty, Open reports what the Engine says")
	require.LessOrEqual(t, len(containersLabelled(t, cli, label)), 1, "failed refills left containers: %v", containersLabelled(t, cli, label))

	_, err = cli.ImageTag(ctx, client.ImageTagOptions{Source: fixtureRef, Target: ref})
	require.NoError(t, err)
	waitFull(t, p)
	st = p.Stats()
	assert.NoError(t, st.LastErr)
	s := open(t, e, spec)
	assert.NotEqual(t, taken.ID(), s.ID())
	assert.Equal(t, 2, p.Stats().HandedOut)
}

// TestPoolOwnerKilled: a program killed while its pool fills, or once it
// took a session from its full pool, leaves no running session once the
// lease's time to live has passed. A container it had created but not yet
// started (the Engine's create and start are two calls) has no agent to
// end it; the next Reap (any Executor's first Open) removes it.
func TestPoolOwnerKilled(t *testing.T) {
	prog := buildOwner(t)
	agentBin := runboxBinary(t)
	reaper := newExecutor(t)
	cli := reaper.Client()
	for trial := range 6 {
		label := fmt.Sprintf("%s=%s-pool-%d", labelRun, runID, trial)
		cmd := exec.Command(prog, fixtureRef, testLease.String(), label, "pool")
		cmd.Env = append(os.Environ(), docker.EnvAgent+"="+agentBin)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		if trial%2 == 0 {
			// While the pool fills.
			time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
		} else {
			line, err := bufio.NewReader(stdout).ReadString('\n')
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(line, "opened "), line)
			require.Eventually(t, func() bool { return len(containersLabelled(t, cli, label)) == 3 },
				time.Minute, 20*time.Millisecond, "the pool did not refill: %v", containersLabelled(t, cli, label))
		}
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		killed := time.Now()
		require.Eventually(t, func() bool {
			for _, c := range containersLabelled(t, cli, label) {
				if !strings.HasSuffix(c, " created") {
					return false
				}
			}
			return true
		}, testLease+5*time.Second, 50*time.Millisecond,
			"trial %d: still there %s after the kill: %v", trial, time.Since(killed), containersLabelled(t, cli, label))
		_, err = reaper.Reap(context.Background())
		require.NoError(t, err)
		assert.Empty(t, containersLabelled(t, cli, label), "trial %d: Reap left the dead program's containers", trial)
	}
}

// TestPoolSkipsEndedSessions: a pooled session whose lifetime process
// ended while it waited is removed, never handed out; Open then gets a
// live session.
func TestPoolSkipsEndedSessions(t *testing.T) {
	e := newExecutor(t, docker.WithoutAgent())
	cli := e.Client()
	ctx := context.Background()
	spec, label := poolSpec(t)
	p := newPool(t, e, spec, docker.PoolOptions{Size: 2})
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", label)})
	require.NoError(t, err)
	require.Len(t, res.Items, 2)
	ended := map[string]bool{}
	for _, c := range res.Items {
		ended[c.ID] = true
		_, err := cli.ContainerKill(ctx, c.ID, client.ContainerKillOptions{Signal: "KILL"})
		require.NoError(t, err)
		wait := cli.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		select {
		case <-wait.Result:
		case err := <-wait.Error:
			require.NoError(t, err)
		}
	}

	s := open(t, e, spec)
	assert.False(t, ended[s.ID()], "a session that had ended was handed out")
	assert.Equal(t, 0, p.Stats().HandedOut)
	o := run(t, s, argv("echo", "live"))
	require.NoError(t, o.err)
	assert.Equal(t, "live\n", o.stdout)
	require.Eventually(t, func() bool {
		for id := range ended {
			if _, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err == nil {
				return false
			}
		}
		return true
	}, time.Minute, 20*time.Millisecond, "the ended sessions were not removed")
}
