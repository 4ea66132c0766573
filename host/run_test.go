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

	"github.com/runbox-dev/runbox"
)

func TestRunArgvPassesMetacharactersLiterally(t *testing.T) {
	e := newExecutor(t)
	arg := `$HOME; echo pwned | cat && $(id) "q" 'x' * ? > /dev/null`
	out, code, err := e.RunArgv(testCtx(t), "", []string{"printf", "%s\n", arg})
	if err != nil || code != 0 {
		t.Fatalf("RunArgv: code %d err %v", code, err)
	}
	if got := string(out); got != arg+"\n" {
		t.Fatalf("argument was not passed literally:\n got %q\nwant %q", got, arg+"\n")
	}
}

func TestRunCommandUsesShell(t *testing.T) {
	e := newExecutor(t)
	out, code, err := e.RunCommand(testCtx(t), "", `x=shell; echo "$x"; echo err >&2; exit 3`)
	if err != nil {
		t.Fatal(err)
	}
	if code != 3 {
		t.Fatalf("code %d, want 3", code)
	}
	if string(out) != "shell\nerr\n" {
		t.Fatalf("combined output %q", out)
	}
	for _, bad := range []string{"", "   ", "a\x00b"} {
		if _, code, err := e.RunCommand(testCtx(t), "", bad); !errors.Is(err, runbox.ErrInvalidCommand) || code != -1 {
			t.Errorf("RunCommand(%q): code %d err %v, want ErrInvalidCommand", bad, code, err)
		}
	}
}

func TestRunArgvExitCodesAreNotErrors(t *testing.T) {
	e := newExecutor(t)
	for _, want := range []int{0, 1, 42} {
		out, code, err := e.RunArgv(testCtx(t), "", []string{"sh", "-c", `echo out; echo err >&2; exit "$1"`, "sh", strconv.Itoa(want)})
		if err != nil {
			t.Fatalf("exit %d: %v", want, err)
		}
		if code != want || string(out) != "out\nerr\n" {
			t.Fatalf("exit %d: got code %d output %q", want, code, out)
		}
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
				if err != nil || code != 0 || string(out) != want+"\n" {
					t.Errorf("%s: %q %d %v", want, out, code, err)
				}
			}
		}()
	}
	wg.Wait()
}

func TestRunArgvUsesDirectory(t *testing.T) {
	e := newExecutor(t)
	dir := t.TempDir()
	out, code, err := e.RunArgv(testCtx(t), dir, []string{"pwd", "-P"})
	if err != nil || code != 0 {
		t.Fatalf("code %d err %v", code, err)
	}
	want, _ := filepath.EvalSymlinks(dir)
	if strings.TrimSpace(string(out)) != want {
		t.Fatalf("pwd %q, want %q", out, want)
	}
	// A relative program path is taken relative to dir.
	script := filepath.Join(dir, "hello.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho relative\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, _, err = e.RunArgv(testCtx(t), dir, []string{"./hello.sh"})
	if err != nil || string(out) != "relative\n" {
		t.Fatalf("relative program: %q %v", out, err)
	}
}

func TestRunArgvStartFailures(t *testing.T) {
	e := newExecutor(t)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "data")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
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
		if !errors.Is(err, runbox.ErrStart) || code != -1 || len(out) != 0 {
			t.Errorf("%s: out %q code %d err %v, want ErrStart and -1", name, out, code, err)
		}
	}
	for _, argv := range [][]string{nil, {""}, {"a\x00"}} {
		if _, code, err := e.RunArgv(testCtx(t), "", argv); !errors.Is(err, runbox.ErrInvalidCommand) || code != -1 {
			t.Errorf("argv %q: code %d err %v, want ErrInvalidCommand", argv, code, err)
		}
	}
}

func TestSignalDeath(t *testing.T) {
	e := newExecutor(t)
	script := `echo before; kill -TERM $$; echo after`
	// The output helpers: an error, code -1, output so far.
	out, code, err := e.RunCommand(testCtx(t), "", script)
	if !errors.Is(err, ErrSignaled) || code != -1 || string(out) != "before\n" {
		t.Fatalf("RunCommand: out %q code %d err %v", out, code, err)
	}
	if !strings.Contains(err.Error(), "SIGTERM") {
		t.Errorf("error %q does not name the signal", err)
	}
	// runbox.Process: a Result with the signal, as a shell reports it.
	var buf bytes.Buffer
	res, err := e.Run(testCtx(t), runbox.ShellCommand(script), runbox.Streams{Stdout: &buf})
	if err != nil {
		t.Fatal(err)
	}
	if res != (runbox.Result{ExitCode: 128 + 15, Signal: "SIGTERM"}) || res.Success() {
		t.Fatalf("Result %+v", res)
	}
	if buf.String() != "before\n" {
		t.Fatalf("stdout %q", buf.String())
	}
}

func TestRunArgvCancelled(t *testing.T) {
	e := newExecutor(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	out, code, err := e.RunArgv(ctx, "", []string{"true"})
	if !errors.Is(err, runbox.ErrCancelled) || !errors.Is(err, context.Canceled) || code != -1 || out != nil {
		t.Fatalf("pre-cancelled: out %q code %d err %v", out, code, err)
	}
	res, err := e.Run(ctx, runbox.Command{Args: []string{"true"}}, runbox.Streams{})
	if !errors.Is(err, runbox.ErrCancelled) || !errors.Is(err, context.Canceled) || res.ExitCode != -1 {
		t.Fatalf("Run pre-cancelled: %+v %v", res, err)
	}
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
	if !errors.Is(err, runbox.ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want ErrCancelled and context.Canceled", err)
	}
	if res.ExitCode != -1 {
		t.Fatalf("Result %+v, want ExitCode -1", res)
	}
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
	if !errors.Is(err, runbox.ErrCancelled) || !errors.Is(err, context.Canceled) || code != -1 {
		t.Fatalf("code %d err %v", code, err)
	}
	if string(out) != "partial\nmore\n" {
		t.Fatalf("output so far %q", out)
	}
}

func TestRunDeadline(t *testing.T) {
	e := newExecutor(t)
	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Millisecond)
	defer cancel()
	res, err := e.Run(ctx, runbox.Command{Args: []string{"sleep", "1000"}}, runbox.Streams{})
	if !errors.Is(err, runbox.ErrCancelled) || !errors.Is(err, context.DeadlineExceeded) || res.ExitCode != -1 {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestRunArgvLimited(t *testing.T) {
	e := newExecutor(t)
	for _, bad := range []int{0, -1} {
		if _, code, err := e.RunArgvLimited(testCtx(t), "", []string{"true"}, bad); !errors.Is(err, runbox.ErrInvalidCommand) || code != -1 {
			t.Errorf("limit %d: code %d err %v, want ErrInvalidCommand", bad, code, err)
		}
	}
	// Exactly the limit is fine.
	out, code, err := e.RunArgvLimited(testCtx(t), "", []string{"printf", "12345"}, 5)
	if err != nil || code != 0 || string(out) != "12345" {
		t.Fatalf("at limit: %q %d %v", out, code, err)
	}
	// One byte more is not; stderr counts too.
	out, code, err = e.RunArgvLimited(testCtx(t), "", []string{"sh", "-c", "printf 123; printf 456 >&2"}, 5)
	if !errors.Is(err, runbox.ErrOutputLimit) || code != -1 || string(out) != "12345" {
		t.Fatalf("over limit: %q %d %v", out, code, err)
	}
	// A process that keeps writing is stopped; the kept prefix is exact.
	out, code, err = e.RunArgvLimited(testCtx(t), "", []string{"yes", "abcdefg"}, 100_000)
	if !errors.Is(err, runbox.ErrOutputLimit) || code != -1 || len(out) != 100_000 {
		t.Fatalf("endless writer: len %d code %d err %v", len(out), code, err)
	}
	if want := strings.Repeat("abcdefg\n", 100_000/8+1)[:100_000]; string(out) != want {
		t.Fatal("kept output is not the prefix the process wrote")
	}
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
	if !errors.Is(err, runbox.ErrOutputLimit) || code != -1 || len(out) != limit {
		t.Fatalf("len %d code %d err %v", len(out), code, err)
	}
	const budget = 8 << 20
	if d := after.TotalAlloc - before.TotalAlloc; d > budget {
		t.Errorf("allocated %d bytes for a %d-byte limit; budget %d", d, limit, budget)
	}
	if after.HeapInuse > before.HeapInuse && after.HeapInuse-before.HeapInuse > budget {
		t.Errorf("heap in use grew by %d bytes; budget %d", after.HeapInuse-before.HeapInuse, budget)
	}
}

func TestRunStreams(t *testing.T) {
	e := newExecutor(t)
	script := runbox.ShellCommand(`echo out; echo err >&2`)

	t.Run("nil writers discard", func(t *testing.T) {
		res, err := e.Run(testCtx(t), script, runbox.Streams{})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
	})
	t.Run("distinct writers", func(t *testing.T) {
		var o, x bytes.Buffer
		res, err := e.Run(testCtx(t), script, runbox.Streams{Stdout: &o, Stderr: &x})
		if err != nil || !res.Success() || o.String() != "out\n" || x.String() != "err\n" {
			t.Fatalf("%+v %v stdout %q stderr %q", res, err, o.String(), x.String())
		}
	})
	t.Run("files get the output directly", func(t *testing.T) {
		f, err := os.Create(filepath.Join(t.TempDir(), "out"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := e.Run(testCtx(t), script, runbox.Streams{Stdout: f, Stderr: f}); err != nil {
			t.Fatal(err)
		}
		// Still open: Run never closes a caller's writer.
		if _, err := f.WriteString("caller\n"); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(f.Name())
		if string(b) != "out\nerr\ncaller\n" {
			t.Fatalf("file holds %q", b)
		}
	})
	t.Run("writers are not closed and not used after Run", func(t *testing.T) {
		w := &closeTracker{}
		if _, err := e.Run(testCtx(t), runbox.ShellCommand("seq 1 1000; seq 1 1000 >&2"), runbox.Streams{Stdout: w, Stderr: w}); err != nil {
			t.Fatal(err)
		}
		w.done.Store(true)
		if w.closed.Load() {
			t.Fatal("Run closed the caller's writer")
		}
		if w.n.Load() == 0 {
			t.Fatal("writer received nothing")
		}
	})
	t.Run("writes are serialized", func(t *testing.T) {
		// A map-typed writer cannot be compared, so os/exec would treat the
		// two uses as different writers; runbox must still serialize.
		w := mapWriter{"state": &concurrencyState{}}
		cmd := runbox.ShellCommand("i=0; while [ $i -lt 2000 ]; do echo o$i; echo e$i >&2; i=$((i+1)); done")
		if _, err := e.Run(testCtx(t), cmd, runbox.Streams{Stdout: w, Stderr: w}); err != nil {
			t.Fatal(err)
		}
		if s := w["state"]; s.overlap.Load() {
			t.Fatal("two Write calls overlapped")
		}
	})
	t.Run("failing writer", func(t *testing.T) {
		boom := errors.New("disk full")
		res, err := e.Run(testCtx(t), runbox.ShellCommand("seq 1 100000"), runbox.Streams{Stdout: failWriter{boom}})
		if !errors.Is(err, boom) || res.ExitCode != -1 {
			t.Fatalf("%+v %v, want the writer's error", res, err)
		}
	})
}

func TestRunStdin(t *testing.T) {
	e := newExecutor(t)
	var out bytes.Buffer
	// nil Stdin: immediate EOF, so cat ends at once.
	res, err := e.Run(testCtx(t), runbox.Command{Args: []string{"cat"}}, runbox.Streams{Stdout: &out})
	if err != nil || !res.Success() || out.Len() != 0 {
		t.Fatalf("nil stdin: %+v %v %q", res, err, out.String())
	}
	in := strings.Repeat("line of input\n", 20000) // more than a pipe buffer
	res, err = e.Run(testCtx(t), runbox.Command{Args: []string{"cat"}, Stdin: strings.NewReader(in)}, runbox.Streams{Stdout: &out})
	if err != nil || !res.Success() || out.String() != in {
		t.Fatalf("reader stdin: %+v %v, %d bytes back", res, err, out.Len())
	}
	// A process that ignores its input is not held up by it.
	res, err = e.Run(testCtx(t), runbox.Command{Args: []string{"true"}, Stdin: strings.NewReader(in)}, runbox.Streams{})
	if err != nil || !res.Success() {
		t.Fatalf("ignored stdin: %+v %v", res, err)
	}
}

func TestRunValidates(t *testing.T) {
	e := newExecutor(t)
	for _, c := range []runbox.Command{{}, {Args: []string{""}}, {Args: []string{"true"}, Env: []string{"NOEQUALS"}}} {
		res, err := e.Run(testCtx(t), c, runbox.Streams{})
		if !errors.Is(err, runbox.ErrInvalidCommand) || res.ExitCode != -1 {
			t.Errorf("%+v: %+v %v", c, res, err)
		}
	}
}

func TestBaseEnvironment(t *testing.T) {
	t.Setenv("RUNBOX_TEST_SECRET", "hunter2")
	t.Setenv("LANG", "C")
	e := newExecutor(t)
	out, _, err := e.RunArgv(testCtx(t), "", []string{"env"})
	if err != nil {
		t.Fatal(err)
	}
	env := string(out)
	if strings.Contains(env, "hunter2") {
		t.Fatalf("planted secret reached the child:\n%s", env)
	}
	for _, k := range []string{"PATH=", "HOME=", "TMPDIR=", "LANG=C\n", "USER="} {
		if !strings.Contains(env, k) {
			t.Errorf("base environment lacks %q:\n%s", k, env)
		}
	}
	if strings.Contains(env, "TERM=") {
		t.Errorf("TERM set without a terminal:\n%s", env)
	}

	inherit := newExecutor(t, WithInheritEnv())
	out, _, err = inherit.RunArgv(testCtx(t), "", []string{"env"})
	if err != nil || !strings.Contains(string(out), "RUNBOX_TEST_SECRET=hunter2") {
		t.Fatalf("WithInheritEnv did not inherit: %v\n%s", err, out)
	}

	// Command.Env is applied on top and wins; CleanEnv gives only Env.
	var buf bytes.Buffer
	_, err = e.Run(testCtx(t), runbox.Command{Args: []string{"env"}, Env: []string{"LANG=fr_FR.UTF-8", "EXTRA=1"}}, runbox.Streams{Stdout: &buf})
	if err != nil || !strings.Contains(buf.String(), "LANG=fr_FR.UTF-8\n") || !strings.Contains(buf.String(), "EXTRA=1\n") || strings.Contains(buf.String(), "LANG=C\n") {
		t.Fatalf("Command.Env: %v\n%s", err, buf.String())
	}
	buf.Reset()
	_, err = e.Run(testCtx(t), runbox.Command{Args: []string{"env"}, Env: []string{"ONLY=1"}, CleanEnv: true}, runbox.Streams{Stdout: &buf})
	if err != nil || buf.String() != "ONLY=1\n" {
		t.Fatalf("CleanEnv: %v %q", err, buf.String())
	}
}

func TestProgramLookupUsesChildPATH(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "runbox-test-tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho found-in-child-path\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := newExecutor(t)
	var out bytes.Buffer
	res, err := e.Run(testCtx(t), runbox.Command{Args: []string{"runbox-test-tool"}, Env: []string{"PATH=" + dir}}, runbox.Streams{Stdout: &out})
	if err != nil || !res.Success() || out.String() != "found-in-child-path\n" {
		t.Fatalf("%+v %v %q", res, err, out.String())
	}
	// Not in the default PATH, so the same name fails without it.
	if _, err := e.Run(testCtx(t), runbox.Command{Args: []string{"runbox-test-tool"}}, runbox.Streams{}); !errors.Is(err, runbox.ErrStart) {
		t.Fatalf("without PATH: %v, want ErrStart", err)
	}
	// Relative PATH entries are ignored.
	if _, err := e.Run(testCtx(t), runbox.Command{Args: []string{"runbox-test-tool"}, Dir: filepath.Dir(dir), Env: []string{"PATH=" + filepath.Base(dir)}}, runbox.Streams{}); !errors.Is(err, runbox.ErrStart) {
		t.Fatalf("relative PATH entry: %v, want ErrStart", err)
	}
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
