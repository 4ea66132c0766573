package host

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// leakedFDs are descriptors the test process holds without close-on-exec,
// as a program holds what its own parent passed on: a writable file
// outside every writable root, a directory outside them (an openat and
// chmod escape), one end of a socket pair and the write end of a pipe.
type leakedFDs struct {
	file, dir, sock, pipe   int
	target, victim, outside string
	sockPeer, pipeR         *os.File
	closeAll                func()
}

// minLeakFD keeps the leaked descriptors clear of the low numbers the
// helper and the commands use themselves.
const minLeakFD = 100

// leak opens the descriptors of leakedFDs in outside.
func leak(t *testing.T, outside string) *leakedFDs {
	t.Helper()
	l := &leakedFDs{target: filepath.Join(outside, "outside.txt"), victim: filepath.Join(outside, "victim"), outside: outside}
	require.NoError(t, os.WriteFile(l.target, nil, 0o644))
	require.NoError(t, os.WriteFile(l.victim, []byte("v"), 0o644))
	require.NoError(t, os.Chmod(l.victim, 0o644))
	var toClose []io.Closer
	var raw []int
	inheritable := func(fd uintptr) int {
		n, err := unix.FcntlInt(fd, unix.F_DUPFD, minLeakFD) // no FD_CLOEXEC on the copy
		require.NoError(t, err)
		raw = append(raw, n)
		return n
	}
	f, err := os.OpenFile(l.target, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	toClose = append(toClose, f)
	l.file = inheritable(f.Fd())
	d, err := os.Open(outside)
	require.NoError(t, err)
	toClose = append(toClose, d)
	l.dir = inheritable(d.Fd())
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	mine := os.NewFile(uintptr(pair[0]), "sock")
	l.sockPeer = os.NewFile(uintptr(pair[1]), "peer")
	toClose = append(toClose, mine)
	l.sock = inheritable(mine.Fd())
	r, w, err := os.Pipe()
	require.NoError(t, err)
	l.pipeR = r
	toClose = append(toClose, w)
	l.pipe = inheritable(w.Fd())
	l.closeAll = func() {
		for _, fd := range raw {
			unix.Close(fd)
		}
		raw = nil
		for _, c := range toClose {
			c.Close()
		}
		toClose = nil
	}
	t.Cleanup(func() {
		l.closeAll()
		l.sockPeer.Close()
		l.pipeR.Close()
	})
	return l
}

// escapeScript uses every leaked descriptor as the reproduction
// does; each step may fail, and the script always exits 0.
func (l *leakedFDs) escapeScript() string {
	return strings.NewReplacer("F", strconv.Itoa(l.file), "D", strconv.Itoa(l.dir),
		"S", strconv.Itoa(l.sock), "P", strconv.Itoa(l.pipe)).Replace(`
echo via-file >&F
echo via-dir > /proc/self/fd/D/escape
chmod 600 /proc/self/fd/D/victim
echo via-socket >&S
echo via-pipe >&P
exit 0`)
}

// escaped closes the test's copies and reports what reached the outside.
func (l *leakedFDs) escaped(t *testing.T) []string {
	t.Helper()
	l.closeAll()
	var got []string
	if b, _ := os.ReadFile(l.target); len(b) > 0 {
		got = append(got, "file: "+string(b))
	}
	if _, err := os.Stat(filepath.Join(l.outside, "escape")); err == nil {
		got = append(got, "directory: created escape")
	}
	if fi, err := os.Stat(l.victim); err == nil && fi.Mode().Perm() != 0o644 {
		got = append(got, "directory: chmod "+fi.Mode().Perm().String())
	}
	// Every writer is gone now (the tree is torn down), so these end at EOF.
	if b, _ := io.ReadAll(l.sockPeer); len(b) > 0 {
		got = append(got, "socket: "+string(b))
	}
	if b, _ := io.ReadAll(l.pipeR); len(b) > 0 {
		got = append(got, "pipe: "+string(b))
	}
	return got
}

// fdList parses `ls -1 /proc/self/fd`.
func fdList(out string) []int {
	var fds []int
	for _, f := range strings.Fields(out) {
		if n, err := strconv.Atoi(f); err == nil {
			fds = append(fds, n)
		}
	}
	slices.Sort(fds)
	return fds
}

// TestConfinedInheritsNoDescriptors is the reproduction: a
// confined command must start with stdin, stdout and stderr only, whatever
// the calling program holds without close-on-exec.
func TestConfinedInheritsNoDescriptors(t *testing.T) {
	w, o := sandboxDirs(t)
	e := confined(t, Policy{WritableRoots: []string{w}})

	l := leak(t, o)
	// ls itself opens the directory it lists, as the lowest free number.
	out, code, err := e.RunArgv(testCtx(t), w, []string{"ls", "-1", "/proc/self/fd"})
	require.NoError(t, err)
	require.Equal(t, 0, code, string(out))
	assert.Equal(t, []int{0, 1, 2, 3}, fdList(string(out)), "descriptors of a confined command")
	out, code, err = e.RunArgv(testCtx(t), w, []string{"bash", "-c", l.escapeScript()})
	require.NoError(t, err)
	require.Equal(t, 0, code, string(out))
	assert.Empty(t, l.escaped(t), "through inherited descriptors (output %q)", out)

	t.Run("TTY", func(t *testing.T) {
		l := leak(t, o)
		pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Args: []string{"ls", "-1", "/proc/self/fd"}, TTY: true})
		require.NoError(t, err)
		p, err := pp.Start(testCtx(t))
		require.NoError(t, err)
		defer p.Close(context.Background())
		b, _ := io.ReadAll(p.Stdout())
		res, err := p.Wait(testCtx(t))
		require.NoError(t, err)
		require.True(t, res.Success(), "%v %s", res, b)
		assert.Equal(t, []int{0, 1, 2, 3}, fdList(string(b)))
		assert.Empty(t, l.escaped(t))
	})

	t.Run("PositiveControl", func(t *testing.T) {
		// Without a policy the host backend passes on what os/exec passes
		// on, so the very same script must get through every descriptor:
		// the probe can see a leak.
		l := leak(t, o)
		out, code, err := newExecutor(t).RunArgv(testCtx(t), w, []string{"bash", "-c", l.escapeScript()})
		require.NoError(t, err)
		require.Equal(t, 0, code, string(out))
		assert.Len(t, l.escaped(t), 5, "the unconfined control must reach through each descriptor (output %q)", out)
	})
}
