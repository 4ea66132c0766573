//go:build unix

package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

// start prepares and starts o, closing the process when the test ends.
func start(t *testing.T, e *Executor, o ProcessOptions) *Process {
	t.Helper()
	pp, err := e.PrepareProcess(testCtx(t), o)
	require.NoError(t, err, "PrepareProcess")
	p, err := pp.Start(testCtx(t))
	require.NoError(t, err, "Start")
	t.Cleanup(func() {
		assert.NoError(t, p.Close(context.Background()), "Close")
	})
	return p
}

// readUntil reads from r until the accumulated output contains want.
func readUntil(t *testing.T, r *bufio.Reader, want string) string {
	t.Helper()
	var got strings.Builder
	buf := make([]byte, 1024)
	for !strings.Contains(got.String(), want) {
		n, err := r.Read(buf)
		got.Write(buf[:n])
		require.NoError(t, err, "waiting for %q: %v (got %q)", want, err, got.String())
	}
	return got.String()
}

func TestPrepareProcessValidation(t *testing.T) {
	e := newExecutor(t)
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		o    ProcessOptions
		want error
	}{
		{"both", nil, ProcessOptions{Command: "true", Args: []string{"true"}}, runbox.ErrInvalidCommand},
		{"neither", nil, ProcessOptions{}, runbox.ErrInvalidCommand},
		{"blank command", nil, ProcessOptions{Command: "  "}, runbox.ErrInvalidCommand},
		{"NUL in argv", nil, ProcessOptions{Args: []string{"echo", "a\x00"}}, runbox.ErrInvalidCommand},
		{"bad env", nil, ProcessOptions{Command: "true", Env: []string{"=x"}}, runbox.ErrInvalidCommand},
		{"missing directory", nil, ProcessOptions{Command: "true", Directory: filepath.Join(file, "x")}, runbox.ErrInvalidCommand},
		{"directory is a file", nil, ProcessOptions{Command: "true", Directory: file}, runbox.ErrInvalidCommand},
		{"size without tty", nil, ProcessOptions{Command: "true", TermSize: runbox.TermSize{Rows: 10, Cols: 10}}, runbox.ErrInvalidCommand},
		{"zero dimension", nil, ProcessOptions{Command: "true", TTY: true, TermSize: runbox.TermSize{Rows: 10}}, runbox.ErrInvalidCommand},
		{"missing program", nil, ProcessOptions{Args: []string{"runbox-no-such-program-xyz"}}, runbox.ErrStart},
		{"cancelled", cancelled, ProcessOptions{Command: "true"}, runbox.ErrCancelled},
	}
	for _, c := range cases {
		ctx := c.ctx
		if ctx == nil {
			ctx = testCtx(t)
		}
		pp, err := e.PrepareProcess(ctx, c.o)
		assert.ErrorIs(t, err, c.want, "%s: %v, want %v", c.name, err, c.want)
		assert.Nil(t, pp, "%s: %v, want %v", c.name, err, c.want)
	}
}

func TestPrepareProcessSpawnsNothing(t *testing.T) {
	e := newExecutor(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	o := ProcessOptions{Directory: dir, Command: "touch marker"}

	pp, err := e.PrepareProcess(testCtx(t), o)
	require.NoError(t, err)
	_, err = os.Stat(marker)
	require.ErrorIs(t, err, os.ErrNotExist, "preparation ran the command")
	require.NoError(t, pp.Close())
	_, err = pp.Start(testCtx(t))
	require.ErrorIs(t, err, ErrPreparedProcessUsed, "Start after Close")
	_, err = os.Stat(marker)
	require.ErrorIs(t, err, os.ErrNotExist, "a closed prepared process ran")

	// The same options, started, do run: the checks above can fail.
	p := start(t, e, o)
	res, err := p.Wait(testCtx(t))
	require.NoError(t, err, "%+v %v", res, err)
	require.True(t, res.Success(), "%+v %v", res, err)
	_, err = os.Stat(marker)
	require.NoError(t, err)
}

func TestPreparedProcessIsSingleUse(t *testing.T) {
	e := newExecutor(t)
	pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Args: []string{"cat"}})
	require.NoError(t, err)
	p, err := pp.Start(testCtx(t))
	require.NoError(t, err)
	defer p.Close(context.Background())
	_, err = pp.Start(testCtx(t))
	require.ErrorIs(t, err, ErrPreparedProcessUsed, "second Start")
	// Close after Start is a no-op: the process keeps running.
	require.NoError(t, pp.Close())
	io.WriteString(p.Stdin(), "still here\n")
	p.Stdin().Close()
	out, _ := io.ReadAll(p.Stdout())
	require.Equal(t, "still here\n", string(out), "stdout %q", out)
	res, err := p.Wait(testCtx(t))
	require.NoError(t, err, "%+v %v", res, err)
	require.True(t, res.Success(), "%+v %v", res, err)
}

func TestEffectiveAccessIsFrozenCopy(t *testing.T) {
	e := newExecutor(t)
	pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Command: "true"})
	require.NoError(t, err)
	defer pp.Close()
	a := pp.EffectiveAccess()
	require.Equal(t, ProcessAccessBroadWrite, a.Kind(), "access %v %v", a.Kind(), a.WritePaths())
	require.Empty(t, a.WritePaths(), "access %v %v", a.Kind(), a.WritePaths())
	b := pp.EffectiveAccess()
	require.Equal(t, a.Kind(), b.Kind(), "access changed between calls: %v", b.Kind())
	require.Empty(t, b.WritePaths(), "access changed between calls: %v", b.Kind())
}

func TestProcessPipesAreDistinct(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{Command: `test -t 0 || test -t 1 || test -t 2 || echo no-tty; echo to-err >&2`})
	require.Equal(t, runbox.ProcessStreamModePipes, p.StreamMode(), "mode %v", p.StreamMode())
	var wg sync.WaitGroup
	var stdout, stderr []byte
	wg.Add(2)
	go func() { defer wg.Done(); stdout, _ = io.ReadAll(p.Stdout()) }()
	go func() { defer wg.Done(); stderr, _ = io.ReadAll(p.Stderr()) }()
	wg.Wait()
	require.Equal(t, "no-tty\n", string(stdout), "stdout %q stderr %q", stdout, stderr)
	require.Equal(t, "to-err\n", string(stderr), "stdout %q stderr %q", stdout, stderr)
	res, err := p.Wait(testCtx(t))
	require.NoError(t, err, "%+v %v", res, err)
	require.True(t, res.Success(), "%+v %v", res, err)
	require.ErrorIs(t, p.Resize(runbox.TermSize{Rows: 1, Cols: 1}), runbox.ErrProcessTTYUnsupported, "Resize in pipe mode")
}

func TestProcessStdinConcurrentWriters(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{Args: []string{"cat"}})
	// Chunks larger than PIPE_BUF, which the kernel alone would not keep
	// whole.
	const writers, each, size = 8, 20, 6000
	chunk := func(w, i int) string {
		head := fmt.Sprintf("w%d-%d:", w, i)
		return head + strings.Repeat(string(rune('a'+w)), size-len(head)-1) + "\n"
	}
	var out []byte
	readDone := make(chan struct{})
	go func() { defer close(readDone); out, _ = io.ReadAll(p.Stdout()) }()

	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := io.WriteString(p.Stdin(), chunk(w, i)); !assert.NoError(t, err, "write") {
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, p.Stdin().Close())
	_, err := p.Stdin().Write([]byte("late"))
	require.ErrorIs(t, err, runbox.ErrProcessStdinClosed, "write after Close")
	<-readDone
	want := map[string]bool{}
	for w := range writers {
		for i := range each {
			want[chunk(w, i)] = true
		}
	}
	lines := strings.SplitAfter(string(out), "\n")
	lines = lines[:len(lines)-1] // after the final newline
	require.Len(t, lines, writers*each, "got %d lines, want %d", len(lines), writers*each)
	for _, l := range lines {
		require.True(t, want[l], "interleaved or corrupt line %.40q", l)
		delete(want, l)
	}
	res, err := p.Wait(testCtx(t))
	require.NoError(t, err, "%+v %v", res, err)
	require.True(t, res.Success(), "%+v %v", res, err)
}

func TestProcessWaitIsSharedAndCancellable(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{Command: "read x; exit 7"})

	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	res, err := p.Wait(ctx)
	require.ErrorIs(t, err, runbox.ErrCancelled, "cancelled Wait: %+v %v", res, err)
	require.ErrorIs(t, err, context.Canceled, "cancelled Wait: %+v %v", res, err)
	require.EqualValues(t, -1, res.ExitCode, "cancelled Wait: %+v %v", res, err)
	// The cancelled Wait did not touch the process: it still reads its
	// input and exits with its own status.
	results := make(chan runbox.Result, 4)
	for range 4 {
		go func() {
			res, err := p.Wait(testCtx(t))
			assert.NoError(t, err, "Wait")
			results <- res
		}()
	}
	io.WriteString(p.Stdin(), "go\n")
	for range 4 {
		require.Equal(t, runbox.Result{ExitCode: 7}, <-results)
	}
	res, err = p.Wait(testCtx(t))
	require.NoError(t, err, "cached Result %+v %v", res, err)
	require.EqualValues(t, 7, res.ExitCode, "cached Result %+v %v", res, err)
	err = p.Signal(runbox.ProcessSignalKill)
	require.ErrorIs(t, err, os.ErrProcessDone, "Signal after exit")
}

func TestProcessSignals(t *testing.T) {
	e := newExecutor(t, WithTerminateGrace(time.Hour))
	cases := []struct {
		sig  runbox.ProcessSignal
		want runbox.Result
	}{
		{runbox.ProcessSignalInterrupt, runbox.Result{ExitCode: 130, Signal: "SIGINT"}},
		{runbox.ProcessSignalTerminate, runbox.Result{ExitCode: 143, Signal: "SIGTERM"}},
		{runbox.ProcessSignalKill, runbox.Result{ExitCode: 137, Signal: "SIGKILL"}},
	}
	for _, c := range cases {
		t.Run(c.sig.String(), func(t *testing.T) {
			if c.sig == runbox.ProcessSignalInterrupt && signal.Ignored(syscall.SIGINT) {
				t.Skip("SIGINT is ignored by this test process and so by its children")
			}
			p := start(t, e, ProcessOptions{Command: "echo ready; exec sleep 1000"})
			readUntil(t, bufio.NewReader(p.Stdout()), "ready")
			require.NoError(t, p.Signal(c.sig))
			res, err := p.Wait(testCtx(t))
			require.NoError(t, err, "%+v %v, want %+v", res, err, c.want)
			require.Equal(t, c.want, res, "%+v %v, want %+v", res, err, c.want)
			n := p.p.escalations.Load()
			require.EqualValues(t, 0, n, "%d escalations, want none", n)
		})
	}
	p := start(t, e, ProcessOptions{Args: []string{"cat"}})
	err := p.Signal(runbox.ProcessSignal(99))
	require.ErrorIs(t, err, runbox.ErrProcessSignalUnsupported, "unknown signal")
}

func TestTerminateEscalatesExactlyOnce(t *testing.T) {
	e := newExecutor(t, WithTerminateGrace(50*time.Millisecond))
	// The exec'd sleep inherits the ignored SIGTERM.
	p := start(t, e, ProcessOptions{Command: "trap '' TERM; echo ready; exec sleep 1000"})
	readUntil(t, bufio.NewReader(p.Stdout()), "ready")
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Signal(runbox.ProcessSignalTerminate); !errors.Is(err, os.ErrProcessDone) {
				assert.NoError(t, err, "Terminate")
			}
		}()
	}
	wg.Wait()
	res, err := p.Wait(testCtx(t))
	require.NoError(t, err, "%+v %v, want death by SIGKILL", res, err)
	require.Equal(t, "SIGKILL", res.Signal, "%+v %v, want death by SIGKILL", res, err)
	n := p.p.escalations.Load()
	require.EqualValues(t, 1, n, "%d escalations, want exactly 1", n)
}

func TestProcessTTY(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{
		Command:  `test -t 0 && test -t 1 && test -t 2 && echo tty-ok; echo "term=$TERM"; stty size`,
		TTY:      true,
		TermSize: runbox.TermSize{Rows: 33, Cols: 101},
	})
	require.Equal(t, runbox.ProcessStreamModePTY, p.StreamMode(), "mode %v", p.StreamMode())
	out, err := io.ReadAll(p.Stdout())
	require.NoError(t, err)
	s := strings.ReplaceAll(string(out), "\r\n", "\n")
	require.Contains(t, s, "tty-ok\n", "terminal output %q", s)
	require.Contains(t, s, "33 101\n", "terminal output %q", s)
	require.NotContains(t, s, "term=\n", "terminal output %q", s)
	n, err := p.Stderr().Read(make([]byte, 1))
	require.EqualValues(t, 0, n, "Stderr in PTY mode: %d %v", n, err)
	require.Equal(t, io.EOF, err, "Stderr in PTY mode: %d %v", n, err)
	res, err := p.Wait(testCtx(t))
	require.NoError(t, err, "%+v %v", res, err)
	require.True(t, res.Success(), "%+v %v", res, err)
}

func TestProcessTTYResize(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{Command: `stty size; read x; stty size`, TTY: true})
	r := bufio.NewReader(p.Stdout())
	readUntil(t, r, fmt.Sprintf("%d %d", defaultTermSize.Rows, defaultTermSize.Cols))
	require.NoError(t, p.Resize(runbox.TermSize{Rows: 50, Cols: 120}))
	io.WriteString(p.Stdin(), "go\n")
	readUntil(t, r, "50 120")
	res, err := p.Wait(testCtx(t))
	require.NoError(t, err, "%+v %v", res, err)
	require.True(t, res.Success(), "%+v %v", res, err)
}

func TestProcessTTYStdinCloseIsEOF(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{Args: []string{"sh", "-c", "cat; echo cat-done"}, TTY: true})
	r := bufio.NewReader(p.Stdout())
	io.WriteString(p.Stdin(), "hello\n")
	readUntil(t, r, "hello")
	require.NoError(t, p.Stdin().Close())
	readUntil(t, r, "cat-done")
	_, err := p.Stdin().Write([]byte("x"))
	require.ErrorIs(t, err, runbox.ErrProcessStdinClosed, "write after Close")
	res, err := p.Wait(testCtx(t))
	require.NoError(t, err, "%+v %v", res, err)
	require.True(t, res.Success(), "%+v %v", res, err)
}

func TestProcessCloseKillsAndIsIdempotent(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{Command: "echo ready; exec sleep 1000"})
	r := bufio.NewReader(p.Stdout())
	readUntil(t, r, "ready")
	require.NoError(t, p.Close(testCtx(t)))
	require.NoError(t, p.Close(testCtx(t)))
	res, err := p.Wait(testCtx(t))
	require.NoError(t, err, "%+v %v", res, err)
	require.Equal(t, "SIGKILL", res.Signal, "%+v %v", res, err)
	_, err = p.Stdin().Write([]byte("x"))
	require.ErrorIs(t, err, runbox.ErrProcessStdinClosed, "stdin after Close")
	_, err = r.Read(make([]byte, 1))
	require.Error(t, err, "stdout still readable after Close")
}

func TestTTYEnvironmentHasTERM(t *testing.T) {
	e := newExecutor(t)
	t.Setenv("TERM", "")
	p := start(t, e, ProcessOptions{Args: []string{"env"}, TTY: true})
	out, _ := io.ReadAll(p.Stdout())
	require.Contains(t, string(out), "TERM=xterm", "no TERM fallback in a terminal")
}

func TestRunTTY(t *testing.T) {
	e := newExecutor(t)
	var out bytes.Buffer
	res, err := e.Run(testCtx(t), runbox.Command{
		Args:     []string{"sh", "-c", `test -t 0 && test -t 1 && test -t 2 && echo tty-ok; echo to-stderr >&2; stty size`},
		TTY:      true,
		TermSize: runbox.TermSize{Rows: 40, Cols: 100},
	}, runbox.Streams{Stdout: &out})
	require.NoError(t, err, "%+v %v", res, err)
	require.True(t, res.Success(), "%+v %v", res, err)
	s := strings.ReplaceAll(out.String(), "\r\n", "\n")
	for _, want := range []string{"tty-ok\n", "to-stderr\n", "40 100\n"} {
		require.Contains(t, s, want, "terminal output %q lacks %q", s, want)
	}
	_, err = e.Run(testCtx(t), runbox.Command{Args: []string{"true"}, TTY: true, TermSize: runbox.TermSize{Rows: 3}}, runbox.Streams{})
	require.ErrorIs(t, err, runbox.ErrInvalidCommand, "half a terminal size")
}

func TestRunTTYResizeAndStdin(t *testing.T) {
	e := newExecutor(t)
	lines := make(chan string, 100)
	var pending strings.Builder
	w := &callbackWriter{fn: func(p []byte) {
		pending.Write(p)
		for {
			s := pending.String()
			i := strings.IndexByte(s, '\n')
			if i < 0 {
				return
			}
			if l := strings.TrimSpace(s[:i]); strings.HasPrefix(l, "size ") {
				lines <- l
			}
			pending.Reset()
			pending.WriteString(s[i+1:])
		}
	}}
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	resize := make(chan runbox.TermSize)
	type outcome struct {
		res runbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := e.Run(testCtx(t), runbox.Command{
			// Report the size until it is the new one; each line typed
			// into the terminal asks again.
			Args:   []string{"sh", "-c", `while :; do s=$(stty size); echo "size $s"; [ "$s" = "50 120" ] && exit 0; read x; done`},
			TTY:    true,
			Stdin:  stdinR,
			Resize: resize,
		}, runbox.Streams{Stdout: w})
		done <- outcome{res, err}
	}()
	sent := false
	for l := range lines {
		if l == "size 50 120" {
			break
		}
		if !sent {
			require.Equal(t, fmt.Sprintf("size %d %d", defaultTermSize.Rows, defaultTermSize.Cols), l, "initial %q", l)
			resize <- runbox.TermSize{Rows: 50, Cols: 120}
			sent = true
		}
		// The resize is applied asynchronously: ask again until it shows.
		io.WriteString(stdinW, "again\n")
	}
	// Run does not wait for a Stdin that has not ended (beyond the wait
	// delay); ending it lets the copier finish at once.
	stdinW.Close()
	o := <-done
	require.Nil(t, o.err, "%+v %v", o.res, o.err)
	require.True(t, o.res.Success(), "%+v %v", o.res, o.err)
}

func TestRunTTYCancelled(t *testing.T) {
	e := newExecutor(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	w := &callbackWriter{fn: func(p []byte) {
		if bytes.Contains(p, []byte("ready")) {
			cancel()
		}
	}}
	res, err := e.Run(ctx, runbox.Command{Args: []string{"sh", "-c", "echo ready; exec sleep 1000"}, TTY: true}, runbox.Streams{Stdout: w})
	require.ErrorIs(t, err, runbox.ErrCancelled, "%+v %v", res, err)
	require.ErrorIs(t, err, context.Canceled, "%+v %v", res, err)
	require.EqualValues(t, -1, res.ExitCode, "%+v %v", res, err)
}
