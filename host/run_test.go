//go:build unix

package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

func TestRunArgvPassesMetacharactersLiterally(t *testing.T) {
	e := newExecutor(t)
	arg := `$HOME; echo pwned | cat && $(id) "q" 'x' * ? > /dev/null`
	out, code, err := e.RunArgv(testCtx(t), "", []string{"printf", "%s\n", arg})
	require.NoError(t, err, "RunArgv: code %d err %v", code, err)
	require.EqualValues(t, 0, code, "RunArgv: code %d err %v", code, err)
	got := string(out)
	require.Equal(t, arg+"\n", got, "argument was not passed literally:\n got %q\nwant %q", got, arg+"\n")
}

func TestRunCommandUsesShell(t *testing.T) {
	e := newExecutor(t)
	out, code, err := e.RunCommand(testCtx(t), "", `x=shell; echo "$x"; echo err >&2; exit 3`)
	require.NoError(t, err)
	require.EqualValues(t, 3, code, "code %d, want 3", code)
	require.Equal(t, "shell\nerr\n", string(out), "combined output %q", out)
	for _, bad := range []string{"", "   ", "a\x00b"} {
		_, code, err := e.RunCommand(testCtx(t), "", bad)
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand, "RunCommand(%q): code %d err %v, want ErrInvalidCommand", bad, code, err)
		assert.EqualValues(t, -1, code, "RunCommand(%q): code %d err %v, want ErrInvalidCommand", bad, code, err)
	}
}

func TestRunArgvExitCodesAreNotErrors(t *testing.T) {
	e := newExecutor(t)
	for _, want := range []int{0, 1, 42} {
		out, code, err := e.RunArgv(testCtx(t), "", []string{"sh", "-c", `echo out; echo err >&2; exit "$1"`, "sh", strconv.Itoa(want)})
		require.NoError(t, err, "exit %d: %v", want, err)
		require.Equal(t, want, code, "exit %d: got code %d output %q", want, code, out)
		require.Equal(t, "out\nerr\n", string(out), "exit %d: got code %d output %q", want, code, out)
	}
}

func TestConcurrentRuns(t *testing.T) {
	e := newExecutor(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				want := fmt.Sprintf("g%d-i%d", g, i)
				out, code, err := e.RunArgv(testCtx(t), "", []string{"echo", want})
				assert.NoError(t, err, "%s: %q %d %v", want, out, code, err)
				assert.EqualValues(t, 0, code, "%s: %q %d %v", want, out, code, err)
				assert.Equal(t, want+"\n", string(out), "%s: %q %d %v", want, out, code, err)
			}
		}()
	}
	wg.Wait()
}

func TestRunArgvUsesDirectory(t *testing.T) {
	e := newExecutor(t)
	dir := t.TempDir()
	out, code, err := e.RunArgv(testCtx(t), dir, []string{"pwd", "-P"})
	require.NoError(t, err, "code %d err %v", code, err)
	require.EqualValues(t, 0, code, "code %d err %v", code, err)
	want, _ := filepath.EvalSymlinks(dir)
	require.Equal(t, want, strings.TrimSpace(string(out)), "pwd %q, want %q", out, want)
	// A relative program path is taken relative to dir.
	script := filepath.Join(dir, "hello.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho relative\n"), 0o755))
	out, _, err = e.RunArgv(testCtx(t), dir, []string{"./hello.sh"})
	require.NoError(t, err, "relative program: %q %v", out, err)
	require.Equal(t, "relative\n", string(out), "relative program: %q %v", out, err)
}

func TestRunArgvStartFailures(t *testing.T) {
	e := newExecutor(t)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "data")
	require.NoError(t, os.WriteFile(notExec, []byte("x"), 0o644))
	cases := map[string]struct {
		dir  string
		argv []string
	}{
		"missing program":     {"", []string{"runbox-no-such-program-xyz"}},
		"missing path":        {"", []string{filepath.Join(dir, "nope")}},
		"not executable":      {"", []string{notExec}},
		"missing directory":   {filepath.Join(dir, "gone"), []string{"true"}},
		"directory not a dir": {notExec, []string{"true"}},
	}
	for name, c := range cases {
		out, code, err := e.RunArgv(testCtx(t), c.dir, c.argv)
		assert.ErrorIs(t, err, runbox.ErrStart, "%s: out %q code %d err %v, want ErrStart and -1", name, out, code, err)
		assert.EqualValues(t, -1, code, "%s: out %q code %d err %v, want ErrStart and -1", name, out, code, err)
		assert.Empty(t, out, "%s: out %q code %d err %v, want ErrStart and -1", name, out, code, err)
	}
	for _, argv := range [][]string{nil, {""}, {"a\x00"}} {
		_, code, err := e.RunArgv(testCtx(t), "", argv)
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand, "argv %q: code %d err %v, want ErrInvalidCommand", argv, code, err)
		assert.EqualValues(t, -1, code, "argv %q: code %d err %v, want ErrInvalidCommand", argv, code, err)
	}
}

func TestSignalDeath(t *testing.T) {
	e := newExecutor(t)
	script := `echo before; kill -TERM $$; echo after`
	// The output helpers: an error, code -1, output so far.
	out, code, err := e.RunCommand(testCtx(t), "", script)
	require.ErrorIs(t, err, ErrSignaled, "RunCommand: out %q code %d err %v", out, code, err)
	require.EqualValues(t, -1, code, "RunCommand: out %q code %d err %v", out, code, err)
	require.Equal(t, "before\n", string(out), "RunCommand: out %q code %d err %v", out, code, err)
	assert.Contains(t, err.Error(), "SIGTERM", "error %q does not name the signal", err)
	// runbox.Process: a Result with the signal, as a shell reports it.
	var buf bytes.Buffer
	res, err := e.Run(testCtx(t), runbox.ShellCommand(script), runbox.Streams{Stdout: &buf})
	require.NoError(t, err)
	require.Equal(t, runbox.Result{ExitCode: 128 + 15, Signal: "SIGTERM"}, res)
	require.False(t, res.Success())
	require.Equal(t, "before\n", buf.String(), "stdout %q", buf.String())
}

func TestRunArgvCancelled(t *testing.T) {
	e := newExecutor(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	out, code, err := e.RunArgv(ctx, "", []string{"true"})
	require.ErrorIs(t, err, runbox.ErrCancelled, "pre-cancelled: out %q code %d err %v", out, code, err)
	require.ErrorIs(t, err, context.Canceled, "pre-cancelled: out %q code %d err %v", out, code, err)
	require.EqualValues(t, -1, code, "pre-cancelled: out %q code %d err %v", out, code, err)
	require.Nil(t, out, "pre-cancelled: out %q code %d err %v", out, code, err)
	res, err := e.Run(ctx, runbox.Command{Args: []string{"true"}}, runbox.Streams{})
	require.ErrorIs(t, err, runbox.ErrCancelled, "Run pre-cancelled: %+v %v", res, err)
	require.ErrorIs(t, err, context.Canceled, "Run pre-cancelled: %+v %v", res, err)
	require.EqualValues(t, -1, res.ExitCode, "Run pre-cancelled: %+v %v", res, err)
}

func TestRunCancelledWhileRunning(t *testing.T) {
	e := newExecutor(t)
	ctx, cancel := context.WithCancelCause(testCtx(t))
	defer cancel(nil)
	// The writer cancels as soon as the process has produced output, so the
	// cancellation certainly happens while it runs.
	w := &callbackWriter{fn: func(p []byte) {
		if bytes.Contains(p, []byte("started")) {
			cancel(context.DeadlineExceeded)
		}
	}}
	res, err := e.Run(ctx, runbox.ShellCommand("echo started; exec sleep 1000"), runbox.Streams{Stdout: w})
	require.ErrorIs(t, err, runbox.ErrCancelled, "err %v, want ErrCancelled and context.Canceled", err)
	require.ErrorIs(t, err, context.Canceled, "err %v, want ErrCancelled and context.Canceled", err)
	require.EqualValues(t, -1, res.ExitCode, "Result %+v, want ExitCode -1", res)
}

func TestRunArgvCancelledKeepsOutputSoFar(t *testing.T) {
	e := newExecutor(t)
	mark := filepath.Join(t.TempDir(), "mark")
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	go func() {
		// Cancel once the process has written its output and is waiting.
		for {
			if _, err := os.Stat(mark); err == nil {
				cancel()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	out, code, err := e.RunArgv(ctx, "", []string{"sh", "-c", `echo partial; echo more >&2; touch "$1"; exec sleep 1000`, "sh", mark})
	require.ErrorIs(t, err, runbox.ErrCancelled, "code %d err %v", code, err)
	require.ErrorIs(t, err, context.Canceled, "code %d err %v", code, err)
	require.EqualValues(t, -1, code, "code %d err %v", code, err)
	require.Equal(t, "partial\nmore\n", string(out), "output so far %q", out)
}

func TestRunDeadline(t *testing.T) {
	e := newExecutor(t)
	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Millisecond)
	defer cancel()
	res, err := e.Run(ctx, runbox.Command{Args: []string{"sleep", "1000"}}, runbox.Streams{})
	require.ErrorIs(t, err, runbox.ErrCancelled, "%+v %v", res, err)
	require.ErrorIs(t, err, context.DeadlineExceeded, "%+v %v", res, err)
	require.EqualValues(t, -1, res.ExitCode, "%+v %v", res, err)
}

func TestRunArgvLimited(t *testing.T) {
	e := newExecutor(t)
	for _, bad := range []int{0, -1} {
		_, code, err := e.RunArgvLimited(testCtx(t), "", []string{"true"}, bad)
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand, "limit %d", bad)
		assert.Equal(t, -1, code, "limit %d", bad)
	}
	// Exactly the limit is fine.
	out, code, err := e.RunArgvLimited(testCtx(t), "", []string{"printf", "12345"}, 5)
	require.NoError(t, err, "at limit: %q %d %v", out, code, err)
	require.EqualValues(t, 0, code, "at limit: %q %d %v", out, code, err)
	require.Equal(t, "12345", string(out), "at limit: %q %d %v", out, code, err)
	// One byte more is not; stderr counts too.
	out, code, err = e.RunArgvLimited(testCtx(t), "", []string{"sh", "-c", "printf 123; printf 456 >&2"}, 5)
	require.ErrorIs(t, err, runbox.ErrOutputLimit, "over limit: %q %d %v", out, code, err)
	require.EqualValues(t, -1, code, "over limit: %q %d %v", out, code, err)
	require.Equal(t, "12345", string(out), "over limit: %q %d %v", out, code, err)
	// A process that keeps writing is stopped; the kept prefix is exact.
	out, code, err = e.RunArgvLimited(testCtx(t), "", []string{"yes", "abcdefg"}, 100_000)
	require.ErrorIs(t, err, runbox.ErrOutputLimit, "endless writer: len %d code %d err %v", len(out), code, err)
	require.EqualValues(t, -1, code, "endless writer: len %d code %d err %v", len(out), code, err)
	require.Len(t, out, 100_000, "endless writer: len %d code %d err %v", len(out), code, err)
	want := strings.Repeat("abcdefg\n", 100_000/8+1)[:100_000]
	require.Equal(t, want, string(out), "kept output is not the prefix the process wrote")
}

func TestRunArgvLimitedMemoryBounded(t *testing.T) {
	e := newExecutor(t)
	const limit = 1 << 20
	argv := []string{"head", "-c", strconv.Itoa(1 << 30), "/dev/zero"} // 1 GiB
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, code, err := e.RunArgvLimited(testCtx(t), "", argv, limit)
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, runbox.ErrOutputLimit, "len %d code %d err %v", len(out), code, err)
	require.EqualValues(t, -1, code, "len %d code %d err %v", len(out), code, err)
	require.Len(t, out, limit, "len %d code %d err %v", len(out), code, err)
	const budget = 8 << 20
	d := after.TotalAlloc - before.TotalAlloc
	assert.LessOrEqual(t, d, uint64(budget), "allocated for a %d-byte limit", limit)
	if after.HeapInuse > before.HeapInuse {
		assert.LessOrEqual(t, after.HeapInuse-before.HeapInuse, uint64(budget), "growth of the heap in use")
	}
}

func TestRunStreams(t *testing.T) {
	e := newExecutor(t)
	script := runbox.ShellCommand(`echo out; echo err >&2`)

	t.Run("nil writers discard", func(t *testing.T) {
		res, err := e.Run(testCtx(t), script, runbox.Streams{})
		require.NoError(t, err, "%+v %v", res, err)
		require.EqualValues(t, 0, res.ExitCode, "%+v %v", res, err)
	})
	t.Run("distinct writers", func(t *testing.T) {
		var o, x bytes.Buffer
		res, err := e.Run(testCtx(t), script, runbox.Streams{Stdout: &o, Stderr: &x})
		require.NoError(t, err, "%+v %v stdout %q stderr %q", res, err, o.String(), x.String())
		require.True(t, res.Success(), "%+v %v stdout %q stderr %q", res, err, o.String(), x.String())
		require.Equal(t, "out\n", o.String(), "%+v %v stdout %q stderr %q", res, err, o.String(), x.String())
		require.Equal(t, "err\n", x.String(), "%+v %v stdout %q stderr %q", res, err, o.String(), x.String())
	})
	t.Run("files get the output directly", func(t *testing.T) {
		f, err := os.Create(filepath.Join(t.TempDir(), "out"))
		require.NoError(t, err)
		defer f.Close()
		_, err = e.Run(testCtx(t), script, runbox.Streams{Stdout: f, Stderr: f})
		require.NoError(t, err)
		// Still open: Run never closes a caller's writer.
		_, err = f.WriteString("caller\n")
		require.NoError(t, err)
		b, _ := os.ReadFile(f.Name())
		require.Equal(t, "out\nerr\ncaller\n", string(b), "file holds %q", b)
	})
	t.Run("writers are not closed and not used after Run", func(t *testing.T) {
		w := &closeTracker{}
		_, err := e.Run(testCtx(t), runbox.ShellCommand("seq 1 1000; seq 1 1000 >&2"), runbox.Streams{Stdout: w, Stderr: w})
		require.NoError(t, err)
		w.done.Store(true)
		require.False(t, w.closed.Load(), "Run closed the caller's writer")
		require.NotEqual(t, 0, w.n.Load(), "writer received nothing")
	})
	t.Run("writes are serialized", func(t *testing.T) {
		// A map-typed writer cannot be compared, so os/exec would treat the
		// two uses as different writers; runbox must still serialize.
		w := mapWriter{"state": &concurrencyState{}}
		cmd := runbox.ShellCommand("i=0; while [ $i -lt 2000 ]; do echo o$i; echo e$i >&2; i=$((i+1)); done")
		_, err := e.Run(testCtx(t), cmd, runbox.Streams{Stdout: w, Stderr: w})
		require.NoError(t, err)
		s := w["state"]
		require.False(t, s.overlap.Load(), "two Write calls overlapped")
	})
	t.Run("failing writer", func(t *testing.T) {
		boom := errors.New("disk full")
		res, err := e.Run(testCtx(t), runbox.ShellCommand("seq 1 100000"), runbox.Streams{Stdout: failWriter{boom}})
		require.ErrorIs(t, err, boom, "%+v %v, want the writer's error", res, err)
		require.EqualValues(t, -1, res.ExitCode, "%+v %v, want the writer's error", res, err)
	})
}

func TestRunStdin(t *testing.T) {
	e := newExecutor(t)
	var out bytes.Buffer
	// nil Stdin: immediate EOF, so cat ends at once.
	res, err := e.Run(testCtx(t), runbox.Command{Args: []string{"cat"}}, runbox.Streams{Stdout: &out})
	require.NoError(t, err, "nil stdin: %+v %v %q", res, err, out.String())
	require.True(t, res.Success(), "nil stdin: %+v %v %q", res, err, out.String())
	require.EqualValues(t, 0, out.Len(), "nil stdin: %+v %v %q", res, err, out.String())
	in := strings.Repeat("line of input\n", 20000) // more than a pipe buffer
	res, err = e.Run(testCtx(t), runbox.Command{Args: []string{"cat"}, Stdin: strings.NewReader(in)}, runbox.Streams{Stdout: &out})
	require.NoError(t, err, "reader stdin: %+v %v, %d bytes back", res, err, out.Len())
	require.True(t, res.Success(), "reader stdin: %+v %v, %d bytes back", res, err, out.Len())
	require.Equal(t, in, out.String(), "reader stdin: %+v %v, %d bytes back", res, err, out.Len())
	// A process that ignores its input is not held up by it.
	res, err = e.Run(testCtx(t), runbox.Command{Args: []string{"true"}, Stdin: strings.NewReader(in)}, runbox.Streams{})
	require.NoError(t, err, "ignored stdin: %+v %v", res, err)
	require.True(t, res.Success(), "ignored stdin: %+v %v", res, err)
}

func TestRunValidates(t *testing.T) {
	e := newExecutor(t)
	for _, c := range []runbox.Command{{}, {Args: []string{""}}, {Args: []string{"true"}, Env: []string{"NOEQUALS"}}} {
		res, err := e.Run(testCtx(t), c, runbox.Streams{})
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand, "%+v: %+v %v", c, res, err)
		assert.EqualValues(t, -1, res.ExitCode, "%+v: %+v %v", c, res, err)
	}
}

func TestBaseEnvironment(t *testing.T) {
	t.Setenv("RUNBOX_TEST_SECRET", "hunter2")
	t.Setenv("LANG", "C")
	e := newExecutor(t)
	out, _, err := e.RunArgv(testCtx(t), "", []string{"env"})
	require.NoError(t, err)
	env := string(out)
	require.NotContains(t, env, "hunter2", "planted secret reached the child:\n%s", env)
	for _, k := range []string{"PATH=", "HOME=", "TMPDIR=", "LANG=C\n", "USER="} {
		assert.Contains(t, env, k, "base environment lacks %q:\n%s", k, env)
	}
	assert.NotContains(t, env, "TERM=", "TERM set without a terminal:\n%s", env)

	inherit := newExecutor(t, WithInheritEnv())
	out, _, err = inherit.RunArgv(testCtx(t), "", []string{"env"})
	require.NoError(t, err, "WithInheritEnv did not inherit: %v\n%s", err, out)
	require.Contains(t, string(out), "RUNBOX_TEST_SECRET=hunter2", "WithInheritEnv did not inherit: %v\n%s", err, out)

	// Command.Env is applied on top and wins; CleanEnv gives only Env.
	var buf bytes.Buffer
	_, err = e.Run(testCtx(t), runbox.Command{Args: []string{"env"}, Env: []string{"LANG=fr_FR.UTF-8", "EXTRA=1"}}, runbox.Streams{Stdout: &buf})
	require.NoError(t, err, "Command.Env: %v\n%s", err, buf.String())
	require.Contains(t, buf.String(), "LANG=fr_FR.UTF-8\n", "Command.Env: %v\n%s", err, buf.String())
	require.Contains(t, buf.String(), "EXTRA=1\n", "Command.Env: %v\n%s", err, buf.String())
	require.NotContains(t, buf.String(), "LANG=C\n", "Command.Env: %v\n%s", err, buf.String())
	buf.Reset()
	_, err = e.Run(testCtx(t), runbox.Command{Args: []string{"env"}, Env: []string{"ONLY=1"}, CleanEnv: true}, runbox.Streams{Stdout: &buf})
	require.NoError(t, err, "CleanEnv: %v %q", err, buf.String())
	require.Equal(t, "ONLY=1\n", buf.String(), "CleanEnv: %v %q", err, buf.String())
}

func TestProgramLookupUsesChildPATH(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "runbox-test-tool")
	require.NoError(t, os.WriteFile(tool, []byte("#!/bin/sh\necho found-in-child-path\n"), 0o755))
	e := newExecutor(t)
	var out bytes.Buffer
	res, err := e.Run(testCtx(t), runbox.Command{Args: []string{"runbox-test-tool"}, Env: []string{"PATH=" + dir}}, runbox.Streams{Stdout: &out})
	require.NoError(t, err, "%+v %v %q", res, err, out.String())
	require.True(t, res.Success(), "%+v %v %q", res, err, out.String())
	require.Equal(t, "found-in-child-path\n", out.String(), "%+v %v %q", res, err, out.String())
	// Not in the default PATH, so the same name fails without it.
	_, err = e.Run(testCtx(t), runbox.Command{Args: []string{"runbox-test-tool"}}, runbox.Streams{})
	require.ErrorIs(t, err, runbox.ErrStart, "without PATH")
	// Relative PATH entries are ignored.
	_, err = e.Run(testCtx(t), runbox.Command{Args: []string{"runbox-test-tool"}, Dir: filepath.Dir(dir), Env: []string{"PATH=" + filepath.Base(dir)}}, runbox.Streams{})
	require.ErrorIs(t, err, runbox.ErrStart, "relative PATH entry")
}

// callbackWriter calls fn with each write.
type callbackWriter struct {
	mu sync.Mutex
	fn func([]byte)
}

func (w *callbackWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fn(p)
	return len(p), nil
}

// closeTracker records Close calls and writes that arrive after done.
type closeTracker struct {
	n      atomic.Int64
	closed atomic.Bool
	done   atomic.Bool
}

func (w *closeTracker) Write(p []byte) (int, error) {
	if w.done.Load() {
		panic("write after Run returned")
	}
	w.n.Add(int64(len(p)))
	return len(p), nil
}

func (w *closeTracker) Close() error { w.closed.Store(true); return nil }

type concurrencyState struct {
	active  atomic.Int32
	overlap atomic.Bool
}

// mapWriter is deliberately not comparable.
type mapWriter map[string]*concurrencyState

func (w mapWriter) Write(p []byte) (int, error) {
	s := w["state"]
	if s.active.Add(1) > 1 {
		s.overlap.Store(true)
	}
	runtime.Gosched()
	s.active.Add(-1)
	return len(p), nil
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

var _ io.Writer = mapWriter{}
