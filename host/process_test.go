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

	"github.com/runbox-dev/runbox"
)

// start prepares and starts o, closing the process when the test ends.
func start(t *testing.T, e *Executor, o ProcessOptions) *Process {
	t.Helper()
	pp, err := e.PrepareProcess(testCtx(t), o)
	if err != nil {
		t.Fatalf("PrepareProcess: %v", err)
	}
	p, err := pp.Start(testCtx(t))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
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
		if err != nil {
			t.Fatalf("waiting for %q: %v (got %q)", want, err, got.String())
		}
	}
	return got.String()
}

func TestPrepareProcessValidation(t *testing.T) {
	e := newExecutor(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
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
		if !errors.Is(err, c.want) || pp != nil {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestPrepareProcessSpawnsNothing(t *testing.T) {
	e := newExecutor(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	o := ProcessOptions{Directory: dir, Command: "touch marker"}

	pp, err := e.PrepareProcess(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("preparation ran the command: %v", err)
	}
	if err := pp.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pp.Start(testCtx(t)); !errors.Is(err, ErrPreparedProcessUsed) {
		t.Fatalf("Start after Close: %v", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a closed prepared process ran: %v", err)
	}

	// The same options, started, do run: the checks above can fail.
	p := start(t, e, o)
	if res, err := p.Wait(testCtx(t)); err != nil || !res.Success() {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal(err)
	}
}

func TestPreparedProcessIsSingleUse(t *testing.T) {
	e := newExecutor(t)
	pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Args: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pp.Start(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if _, err := pp.Start(testCtx(t)); !errors.Is(err, ErrPreparedProcessUsed) {
		t.Fatalf("second Start: %v", err)
	}
	// Close after Start is a no-op: the process keeps running.
	if err := pp.Close(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.Stdin(), "still here\n")
	p.Stdin().Close()
	out, _ := io.ReadAll(p.Stdout())
	if string(out) != "still here\n" {
		t.Fatalf("stdout %q", out)
	}
	if res, err := p.Wait(testCtx(t)); err != nil || !res.Success() {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestEffectiveAccessIsFrozenCopy(t *testing.T) {
	e := newExecutor(t)
	pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	defer pp.Close()
	a := pp.EffectiveAccess()
	if a.Kind() != ProcessAccessBroadWrite || len(a.WritePaths()) != 0 {
		t.Fatalf("access %v %v", a.Kind(), a.WritePaths())
	}
	if b := pp.EffectiveAccess(); b.Kind() != a.Kind() || len(b.WritePaths()) != 0 {
		t.Fatalf("access changed between calls: %v", b.Kind())
	}
}

func TestProcessPipesAreDistinct(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{Command: `test -t 0 || test -t 1 || test -t 2 || echo no-tty; echo to-err >&2`})
	if p.StreamMode() != runbox.ProcessStreamModePipes {
		t.Fatalf("mode %v", p.StreamMode())
	}
	var wg sync.WaitGroup
	var stdout, stderr []byte
	wg.Add(2)
	go func() { defer wg.Done(); stdout, _ = io.ReadAll(p.Stdout()) }()
	go func() { defer wg.Done(); stderr, _ = io.ReadAll(p.Stderr()) }()
	wg.Wait()
	if string(stdout) != "no-tty\n" || string(stderr) != "to-err\n" {
		t.Fatalf("stdout %q stderr %q", stdout, stderr)
	}
	if res, err := p.Wait(testCtx(t)); err != nil || !res.Success() {
		t.Fatalf("%+v %v", res, err)
	}
	if err := p.Resize(runbox.TermSize{Rows: 1, Cols: 1}); !errors.Is(err, runbox.ErrProcessTTYUnsupported) {
		t.Fatalf("Resize in pipe mode: %v", err)
	}
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
				if _, err := io.WriteString(p.Stdin(), chunk(w, i)); err != nil {
					t.Errorf("write: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := p.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stdin().Write([]byte("late")); !errors.Is(err, runbox.ErrProcessStdinClosed) {
		t.Fatalf("write after Close: %v", err)
	}
	<-readDone
	want := map[string]bool{}
	for w := range writers {
		for i := range each {
			want[chunk(w, i)] = true
		}
	}
	lines := strings.SplitAfter(string(out), "\n")
	lines = lines[:len(lines)-1] // after the final newline
	if len(lines) != writers*each {
		t.Fatalf("got %d lines, want %d", len(lines), writers*each)
	}
	for _, l := range lines {
		if !want[l] {
			t.Fatalf("interleaved or corrupt line %.40q", l)
		}
		delete(want, l)
	}
	if res, err := p.Wait(testCtx(t)); err != nil || !res.Success() {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestProcessWaitIsSharedAndCancellable(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{Command: "read x; exit 7"})

	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	if res, err := p.Wait(ctx); !errors.Is(err, runbox.ErrCancelled) || !errors.Is(err, context.Canceled) || res.ExitCode != -1 {
		t.Fatalf("cancelled Wait: %+v %v", res, err)
	}
	// The cancelled Wait did not touch the process: it still reads its
	// input and exits with its own status.
	results := make(chan runbox.Result, 4)
	for range 4 {
		go func() {
			res, err := p.Wait(testCtx(t))
			if err != nil {
				t.Errorf("Wait: %v", err)
			}
			results <- res
		}()
	}
	io.WriteString(p.Stdin(), "go\n")
	for range 4 {
		if res := <-results; res != (runbox.Result{ExitCode: 7}) {
			t.Fatalf("Result %+v, want exit 7", res)
		}
	}
	if res, err := p.Wait(testCtx(t)); err != nil || res.ExitCode != 7 {
		t.Fatalf("cached Result %+v %v", res, err)
	}
	if err := p.Signal(runbox.ProcessSignalKill); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Signal after exit: %v", err)
	}
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
			if err := p.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			res, err := p.Wait(testCtx(t))
			if err != nil || res != c.want {
				t.Fatalf("%+v %v, want %+v", res, err, c.want)
			}
			if n := p.p.escalations.Load(); n != 0 {
				t.Fatalf("%d escalations, want none", n)
			}
		})
	}
	p := start(t, e, ProcessOptions{Args: []string{"cat"}})
	if err := p.Signal(runbox.ProcessSignal(99)); !errors.Is(err, runbox.ErrProcessSignalUnsupported) {
		t.Fatalf("unknown signal: %v", err)
	}
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
			if err := p.Signal(runbox.ProcessSignalTerminate); err != nil && !errors.Is(err, os.ErrProcessDone) {
				t.Errorf("Terminate: %v", err)
			}
		}()
	}
	wg.Wait()
	res, err := p.Wait(testCtx(t))
	if err != nil || res.Signal != "SIGKILL" {
		t.Fatalf("%+v %v, want death by SIGKILL", res, err)
	}
	if n := p.p.escalations.Load(); n != 1 {
		t.Fatalf("%d escalations, want exactly 1", n)
	}
}

func TestProcessTTY(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{
		Command:  `test -t 0 && test -t 1 && test -t 2 && echo tty-ok; echo "term=$TERM"; stty size`,
		TTY:      true,
		TermSize: runbox.TermSize{Rows: 33, Cols: 101},
	})
	if p.StreamMode() != runbox.ProcessStreamModePTY {
		t.Fatalf("mode %v", p.StreamMode())
	}
	out, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(out), "\r\n", "\n")
	if !strings.Contains(s, "tty-ok\n") || !strings.Contains(s, "33 101\n") || strings.Contains(s, "term=\n") {
		t.Fatalf("terminal output %q", s)
	}
	if n, err := p.Stderr().Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("Stderr in PTY mode: %d %v", n, err)
	}
	if res, err := p.Wait(testCtx(t)); err != nil || !res.Success() {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestProcessTTYResize(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{Command: `stty size; read x; stty size`, TTY: true})
	r := bufio.NewReader(p.Stdout())
	readUntil(t, r, fmt.Sprintf("%d %d", defaultTermSize.Rows, defaultTermSize.Cols))
	if err := p.Resize(runbox.TermSize{Rows: 50, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.Stdin(), "go\n")
	readUntil(t, r, "50 120")
	if res, err := p.Wait(testCtx(t)); err != nil || !res.Success() {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestProcessTTYStdinCloseIsEOF(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{Args: []string{"sh", "-c", "cat; echo cat-done"}, TTY: true})
	r := bufio.NewReader(p.Stdout())
	io.WriteString(p.Stdin(), "hello\n")
	readUntil(t, r, "hello")
	if err := p.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	readUntil(t, r, "cat-done")
	if _, err := p.Stdin().Write([]byte("x")); !errors.Is(err, runbox.ErrProcessStdinClosed) {
		t.Fatalf("write after Close: %v", err)
	}
	if res, err := p.Wait(testCtx(t)); err != nil || !res.Success() {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestProcessCloseKillsAndIsIdempotent(t *testing.T) {
	e := newExecutor(t)
	p := start(t, e, ProcessOptions{Command: "echo ready; exec sleep 1000"})
	r := bufio.NewReader(p.Stdout())
	readUntil(t, r, "ready")
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(testCtx(t))
	if err != nil || res.Signal != "SIGKILL" {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := p.Stdin().Write([]byte("x")); !errors.Is(err, runbox.ErrProcessStdinClosed) {
		t.Fatalf("stdin after Close: %v", err)
	}
	if _, err := r.Read(make([]byte, 1)); err == nil {
		t.Fatal("stdout still readable after Close")
	}
}

func TestTTYEnvironmentHasTERM(t *testing.T) {
	e := newExecutor(t)
	t.Setenv("TERM", "")
	p := start(t, e, ProcessOptions{Args: []string{"env"}, TTY: true})
	out, _ := io.ReadAll(p.Stdout())
	if !bytes.Contains(out, []byte("TERM=xterm")) {
		t.Fatalf("no TERM fallback in a terminal: %q", out)
	}
}

func TestRunTTY(t *testing.T) {
	e := newExecutor(t)
	var out bytes.Buffer
	res, err := e.Run(testCtx(t), runbox.Command{
		Args:     []string{"sh", "-c", `test -t 0 && test -t 1 && test -t 2 && echo tty-ok; echo to-stderr >&2; stty size`},
		TTY:      true,
		TermSize: runbox.TermSize{Rows: 40, Cols: 100},
	}, runbox.Streams{Stdout: &out})
	if err != nil || !res.Success() {
		t.Fatalf("%+v %v", res, err)
	}
	s := strings.ReplaceAll(out.String(), "\r\n", "\n")
	for _, want := range []string{"tty-ok\n", "to-stderr\n", "40 100\n"} {
		if !strings.Contains(s, want) {
			t.Fatalf("terminal output %q lacks %q", s, want)
		}
	}
	if _, err := e.Run(testCtx(t), runbox.Command{Args: []string{"true"}, TTY: true, TermSize: runbox.TermSize{Rows: 3}}, runbox.Streams{}); !errors.Is(err, runbox.ErrInvalidCommand) {
		t.Fatalf("half a terminal size: %v", err)
	}
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
			if l != fmt.Sprintf("size %d %d", defaultTermSize.Rows, defaultTermSize.Cols) {
				t.Fatalf("initial %q", l)
			}
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
	if o.err != nil || !o.res.Success() {
		t.Fatalf("%+v %v", o.res, o.err)
	}
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
	if !errors.Is(err, runbox.ErrCancelled) || !errors.Is(err, context.Canceled) || res.ExitCode != -1 {
		t.Fatalf("%+v %v", res, err)
	}
}
