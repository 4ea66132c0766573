//go:build linux

package integration

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

func TestSessionReattach(t *testing.T) {
	e := newExecutor(t)
	spec := baseSpec()
	spec.Name = "runbox-test-" + runID
	opened := open(t, e, spec)
	o := run(t, opened, runbox.ShellCommand("echo kept > /tmp/state"))
	require.NoError(t, o.err)

	// Another executor (as another process would) finds it by ID, unique
	// prefix and name.
	other := newExecutor(t)
	for _, ref := range []string{opened.ID(), opened.ID()[:12], spec.Name} {
		s, err := other.Session(context.Background(), ref)
		require.NoError(t, err, ref)
		assert.Equal(t, opened.ID(), s.ID())
		o := run(t, s, argv("cat", "/tmp/state"))
		require.NoError(t, o.err)
		assert.Equal(t, "kept\n", o.stdout)
	}

	// A container that runbox did not open is not a session, even by full ID.
	raw, err := e.Client().ContainerCreate(context.Background(), client.ContainerCreateOptions{
		Config: &container.Config{Image: fixtureRef, Entrypoint: sleeper, Labels: runLabels()},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = e.Client().ContainerRemove(context.Background(), raw.ID, client.ContainerRemoveOptions{Force: true})
	})
	_, err = other.Session(context.Background(), raw.ID)
	assert.ErrorIs(t, err, runbox.ErrSessionNotFound)

	_, err = other.Session(context.Background(), "runbox-no-such-session-"+runID)
	assert.ErrorIs(t, err, runbox.ErrSessionNotFound)
	_, err = other.Session(context.Background(), "")
	assert.ErrorIs(t, err, runbox.ErrSessionNotFound)

	infos, err := other.Sessions(context.Background())
	require.NoError(t, err)
	var found bool
	for _, i := range infos {
		if i.ID == opened.ID() {
			found = true
			assert.Equal(t, spec.Name, i.Name)
			assert.Equal(t, "running", i.State)
			assert.Equal(t, fixtureRef, i.Image)
		}
	}
	assert.True(t, found)

	// A name already in use is refused before anything else is created.
	_, err = e.Open(context.Background(), spec)
	assert.ErrorIs(t, err, runbox.ErrInvalidSpec)
	spec.Name = "bad name!"
	_, err = e.Open(context.Background(), spec)
	assert.ErrorIs(t, err, runbox.ErrInvalidSpec)
}

func TestAmbiguousPrefix(t *testing.T) {
	e := newExecutor(t)
	// With 17 sessions, some pair shares a first hex digit.
	var mu sync.Mutex
	ids := map[byte][]string{}
	var wg sync.WaitGroup
	for range 17 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := open(t, e, baseSpec())
			mu.Lock()
			ids[s.ID()[0]] = append(ids[s.ID()[0]], s.ID())
			mu.Unlock()
		}()
	}
	wg.Wait()
	for c, group := range ids {
		if len(group) < 2 {
			continue
		}
		// Other runbox sessions on the Engine may share the digit too;
		// either way the one-character prefix is ambiguous.
		_, err := e.Session(context.Background(), string(c))
		require.ErrorIs(t, err, runbox.ErrAmbiguous)
		r := cli(t, nil, "exec", string(c), "--", "true")
		assert.Equal(t, 125, r.code)
		assert.Contains(t, r.stderr, "ambiguous")
		return
	}
	require.FailNow(t, "17 sessions and no shared first digit: impossible")
}

func TestRunTTY(t *testing.T) {
	e := newExecutor(t)
	s := open(t, e, baseSpec())

	o := run(t, s, runbox.Command{Args: []string{"sh", "-c", "test -t 0 && test -t 1 && echo tty; echo to-stderr >&2"}, TTY: true})
	require.NoError(t, o.err)
	assert.Equal(t, "tty\r\nto-stderr\r\n", o.stdout, "a terminal merges stderr into stdout")
	assert.Empty(t, o.stderr)

	o = run(t, s, runbox.ShellCommand("test -t 1 || echo not-a-tty"))
	require.NoError(t, o.err)
	assert.Equal(t, "not-a-tty\n", o.stdout)

	// The initial size reaches the terminal (on API 1.41 through a resize
	// right after start, so the script waits for it), and later sizes
	// from Resize too.
	resize := make(chan runbox.TermSize, 1)
	var out syncBuffer
	script := `until [ "$(stty size)" = "40 100" ]; do sleep 0.05; done; echo initial-ok
until [ "$(stty size)" = "50 132" ]; do sleep 0.05; done; echo resized-ok`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, runbox.Command{Args: []string{"sh", "-c", script}, TTY: true,
			TermSize: runbox.TermSize{Rows: 40, Cols: 100}, Resize: resize}, runbox.Streams{Stdout: &out})
		done <- err
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "initial-ok") }, time.Minute, 20*time.Millisecond)
	resize <- runbox.TermSize{Rows: 50, Cols: 132}
	require.NoError(t, <-done)
	assert.Contains(t, out.String(), "resized-ok")
}
