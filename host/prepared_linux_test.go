package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/runbox-dev/runbox"
)

// The probe's sandbox serves the first command and ends with it; the next
// one is prepared in the background, and each serves exactly one command
// with the caller's stdin, stdout and stderr.
func TestPreparedSandboxServesOneCommand(t *testing.T) {
	e := confined(t, Policy{})
	first := e.sys.sandboxes.readyPids()
	require.Len(t, first, 1, "New keeps its probe's sandbox ready")

	var out, errb strings.Builder
	res, err := e.Run(testCtx(t), runbox.Command{
		Args:  []string{"sh", "-c", "cat; echo err >&2; exit 3"},
		Stdin: strings.NewReader("in\n"),
	}, runbox.Streams{Stdout: &out, Stderr: &errb})
	require.NoError(t, err)
	assert.Equal(t, 3, res.ExitCode)
	assert.Equal(t, "in\n", out.String())
	assert.Equal(t, "err\n", errb.String())
	assert.False(t, alive(first[0]), "the probe's sandbox ended with its command")

	e.sys.sandboxes.waitFilled()
	next := e.sys.sandboxes.readyPids()
	require.Len(t, next, 1, "one sandbox is prepared after the launch")
	assert.NotEqual(t, first, next)
	o, code := sh(t, e, "", "echo second")
	assert.Equal(t, 0, code)
	assert.Equal(t, "second\n", o)
	assert.False(t, alive(next[0]), "a prepared sandbox serves one command")
}

func TestPreparedSandboxesZero(t *testing.T) {
	e := confined(t, Policy{}, WithPreparedSandboxes(0))
	require.Len(t, e.sys.sandboxes.readyPids(), 1, "the probe's sandbox serves the first command")
	for range 2 {
		o, code := sh(t, e, "", "echo x")
		assert.Equal(t, 0, code)
		assert.Equal(t, "x\n", o)
		e.sys.sandboxes.waitFilled()
		assert.Empty(t, e.sys.sandboxes.readyPids())
	}
	_, err := New(WithPolicy(Policy{}), WithPreparedSandboxes(-1))
	assert.ErrorIs(t, err, runbox.ErrInvalidCommand)
}

// A sandbox is shaped by the launch's directory: one prepared for another
// directory under the sandbox's private /tmp does not have this one bound
// in, so it is not used, and the next ones follow the new directory.
func TestPreparedSandboxFollowsTheDirectory(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(b, "mark"), []byte("b"), 0o644))
	e := confined(t, Policy{WritableRoots: []string{a, b}})
	o, code := sh(t, e, a, "pwd")
	require.Equal(t, 0, code)
	assert.Equal(t, a+"\n", o)
	e.sys.sandboxes.waitFilled()
	for range 2 {
		o, code = sh(t, e, b, "pwd; cat mark")
		require.Equal(t, 0, code, o)
		assert.Equal(t, b+"\nb", o)
		e.sys.sandboxes.waitFilled()
	}
}

func TestPreparedSandboxesEndAtClose(t *testing.T) {
	e, err := New(WithPolicy(Policy{}), WithPreparedSandboxes(2))
	require.NoError(t, err)
	sh(t, e, "", "true")
	e.sys.sandboxes.waitFilled()
	pids := e.sys.sandboxes.readyPids()
	require.Len(t, pids, 2)
	require.NoError(t, e.Close())
	for _, pid := range pids {
		assert.False(t, alive(pid), "a prepared sandbox outlived Close")
	}
	_, _, err = e.RunCommand(testCtx(t), "", "true")
	assert.ErrorIs(t, err, runbox.ErrStart, "a closed executor starts nothing")
}

// A prepared sandbox killed while it waits is replaced by a cold one: the
// command runs, once.
func TestPreparedSandboxKilledWhileWaiting(t *testing.T) {
	dir := t.TempDir()
	e := confined(t, Policy{WritableRoots: []string{dir}})
	pids := e.sys.sandboxes.readyPids()
	require.Len(t, pids, 1)
	require.NoError(t, unix.Kill(pids[0], unix.SIGKILL))
	o, code := sh(t, e, dir, "echo ran >> count; cat count")
	assert.Equal(t, 0, code)
	assert.Equal(t, "ran\n", o)
}

// The command's descriptors are exactly its stdio, through a prepared
// sandbox as through a cold one.
func TestPreparedSandboxDescriptors(t *testing.T) {
	for _, n := range []int{1, 0} {
		e := confined(t, Policy{}, WithPreparedSandboxes(n))
		for range 2 {
			o, code := sh(t, e, "", "ls /proc/self/fd")
			require.Equal(t, 0, code)
			// ls's own directory descriptor is the one beyond stdio.
			assert.Equal(t, "0\n1\n2\n3\n", o)
			e.sys.sandboxes.waitFilled()
		}
	}
}
