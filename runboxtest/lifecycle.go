package runboxtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runbox-dev/runbox"
)

// Lifecycle describes a backend's streaming processes for [RunLifecycle].
type Lifecycle struct {
	// Name labels the backend in failure messages.
	Name string
	// Start starts a POSIX shell script as a streaming process in pipe
	// mode. Required.
	Start func(ctx context.Context, script string) (runbox.StreamingProcess, error)
	// Usable, when set, is called after every case and must show that the
	// backend still takes work within ctx (for a session: a Run), so that a
	// process that was closed or abandoned cannot have wedged it.
	Usable func(ctx context.Context) error
}

// hang bounds every step of a lifecycle case: far more than any of them
// needs, so that exceeding it means a hang, never slowness.
const hang = 20 * time.Second

// within runs fn and fails the test if it has not returned after hang.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(hang):
		t.Fatalf("%s did not return within %s", what, hang)
	}
}

// lifecycleCase is one row of the table.
type lifecycleCase struct {
	name   string
	script string
	check  func(t *testing.T, p runbox.StreamingProcess)
}

// bigStderr writes 32 KiB to stderr in lines (less than any pipe buffer,
// more than a trivial write) with shell built-ins only.
const bigStderr = `i=0; while [ $i -lt 512 ]; do echo 012345678901234567890123456789012345678901234567890123456789012 >&2; i=$((i+1)); done`

var lifecycleCases = []lifecycleCase{
	{
		name:   "stdout to EOF, then stderr",
		script: "echo e >&2; echo o",
		check: func(t *testing.T, p runbox.StreamingProcess) {
			readAllInOrder(t, p, p.Stdout(), "o\n", p.Stderr(), "e\n")
		},
	},
	{
		name:   "stderr to EOF, then stdout",
		script: "echo o; echo e >&2",
		check: func(t *testing.T, p runbox.StreamingProcess) {
			readAllInOrder(t, p, p.Stderr(), "e\n", p.Stdout(), "o\n")
		},
	},
	{
		name:   "stdout to EOF while 32 KiB wait on stderr",
		script: bigStderr + "; echo o",
		check: func(t *testing.T, p runbox.StreamingProcess) {
			readAllInOrder(t, p, p.Stdout(), "o\n", p.Stderr(), strings.Repeat("012345678901234567890123456789012345678901234567890123456789012\n", 512))
		},
	},
	{
		name:   "close unread",
		script: "echo hello; echo hello >&2; sleep 1000",
		check: func(t *testing.T, p runbox.StreamingProcess) {
			closeAndWait(t, p)
		},
	},
	{
		name:   "close unread while the output fills every buffer",
		script: "echo filling >&2; while :; do echo 0123456789012345678901234567890123456789012345678901234567890123456789; done",
		check: func(t *testing.T, p runbox.StreamingProcess) {
			// Once the loop runs, stdout (never read) fills every buffer
			// on the way and the writer blocks; Close meets it there or
			// on its way there, and must work either way.
			readExactly(t, p.Stderr(), "filling\n")
			closeAndWait(t, p)
		},
	},
	{
		name:   "close while readers are blocked",
		script: "sleep 1000",
		check: func(t *testing.T, p runbox.StreamingProcess) {
			var wg, reading sync.WaitGroup
			for _, r := range []io.Reader{p.Stdout(), p.Stderr()} {
				wg.Add(1)
				reading.Add(1)
				go func() {
					defer wg.Done()
					reading.Done()
					_, _ = io.ReadAll(r) // the end, or an error: either releases the reader
				}()
			}
			// Both readers are in (or entering) a Read that nothing will
			// answer: the command writes nothing.
			reading.Wait()
			closeAndWait(t, p)
			within(t, "a reader blocked when Close was called", wg.Wait)
		},
	},
	{
		name:   "double close",
		script: "sleep 1000",
		check: func(t *testing.T, p runbox.StreamingProcess) {
			closeAndWait(t, p)
			var err error
			within(t, "a second Close", func() { err = p.Close(context.Background()) })
			if err != nil {
				t.Errorf("a second Close: %v", err)
			}
		},
	},
	{
		name:   "wait after the process ended and was closed",
		script: "exit 3",
		check: func(t *testing.T, p runbox.StreamingProcess) {
			drain(t, p)
			res := wait(t, p)
			if res.ExitCode != 3 {
				t.Errorf("exit code %d, want 3", res.ExitCode)
			}
			closeProcess(t, p)
			if again := wait(t, p); again != res {
				t.Errorf("Wait after Close: %+v, want %+v", again, res)
			}
		},
	},
	{
		name:   "many concurrent waiters",
		script: "read line; exit 4",
		check: func(t *testing.T, p runbox.StreamingProcess) {
			const n = 32
			results := make(chan runbox.Result, n)
			errs := make(chan error, n)
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), hang)
					defer cancel()
					res, err := p.Wait(ctx)
					results <- res
					errs <- err
				}()
			}
			// A waiter that gives up releases only itself.
			short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, err := p.Wait(short)
			cancel()
			if !errors.Is(err, runbox.ErrCancelled) {
				t.Errorf("a Wait whose context ended: %v, want ErrCancelled", err)
			}
			if _, err := io.WriteString(p.Stdin(), "go\n"); err != nil {
				t.Errorf("stdin: %v", err)
			}
			drain(t, p)
			within(t, "32 concurrent Waits", wg.Wait)
			close(results)
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("Wait: %v", err)
				}
			}
			for res := range results {
				if res.ExitCode != 4 {
					t.Errorf("Wait: exit code %d, want 4", res.ExitCode)
				}
			}
			closeProcess(t, p)
		},
	},
}

// RunLifecycle runs one table of lifecycle cases (reads in either order,
// close unread, close while readers are blocked, double close, wait after
// close, many concurrent waiters) against l's streaming processes. Every
// step that could hang is bounded: a hang fails the test instead of
// blocking it.
func RunLifecycle(t *testing.T, l Lifecycle) {
	t.Helper()
	if l.Start == nil {
		t.Fatalf("%s: Lifecycle needs Start", l.Name)
	}
	for _, c := range lifecycleCases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			var p runbox.StreamingProcess
			var err error
			within(t, "Start", func() { p, err = l.Start(ctx, c.script) })
			cancel()
			if err != nil {
				t.Fatalf("%s: start %q: %v", l.Name, c.script, err)
			}
			// Whatever the case did, nothing outlives it.
			defer func() {
				within(t, "the final Close", func() { _ = p.Close(context.Background()) })
				if l.Usable != nil {
					ctx, cancel := context.WithTimeout(context.Background(), hang)
					defer cancel()
					var err error
					within(t, "the check that the backend is usable", func() { err = l.Usable(ctx) })
					if err != nil {
						t.Errorf("%s: the backend is not usable after the case: %v", l.Name, err)
					}
				}
			}()
			if m := p.StreamMode(); m != runbox.ProcessStreamModePipes {
				t.Fatalf("%s: stream mode %v, want pipes", l.Name, m)
			}
			c.check(t, p)
		})
	}
}

// readAllInOrder reads first to its end and only then second, as a caller
// that does not know about deadlocks would, then waits.
func readAllInOrder(t *testing.T, p runbox.StreamingProcess, first io.Reader, want1 string, second io.Reader, want2 string) {
	t.Helper()
	var got1, got2 []byte
	var err1, err2 error
	within(t, "reading the first stream to its end", func() { got1, err1 = io.ReadAll(first) })
	within(t, "reading the second stream to its end", func() { got2, err2 = io.ReadAll(second) })
	if err1 != nil || string(got1) != want1 {
		t.Errorf("first stream: %q, %v; want %q", abbrev(got1), err1, abbrev([]byte(want1)))
	}
	if err2 != nil || string(got2) != want2 {
		t.Errorf("second stream: %q, %v; want %q", abbrev(got2), err2, abbrev([]byte(want2)))
	}
	if res := wait(t, p); res.ExitCode != 0 {
		t.Errorf("exit code %d, want 0", res.ExitCode)
	}
}

func abbrev(b []byte) string {
	if len(b) > 80 {
		return fmt.Sprintf("%s… (%d bytes)", b[:80], len(b))
	}
	return string(b)
}

// drain reads both streams to their ends.
func drain(t *testing.T, p runbox.StreamingProcess) {
	t.Helper()
	var wg sync.WaitGroup
	for _, r := range []io.Reader{p.Stdout(), p.Stderr()} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = io.Copy(io.Discard, r)
		}()
	}
	within(t, "reading both streams to their ends", wg.Wait)
}

// wait waits for the exit, which must come.
func wait(t *testing.T, p runbox.StreamingProcess) runbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	var res runbox.Result
	var err error
	within(t, "Wait", func() { res, err = p.Wait(ctx) })
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return res
}

// closeProcess closes p, which must succeed promptly.
func closeProcess(t *testing.T, p runbox.StreamingProcess) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	var err error
	within(t, "Close", func() { err = p.Close(ctx) })
	if err != nil {
		t.Errorf("Close: %v", err)
	}
}

// closeAndWait closes a running process; Wait then reports its end (killed)
// at once.
// readExactly reads len(want) bytes from r and checks them.
func readExactly(t *testing.T, r io.Reader, want string) {
	t.Helper()
	got := make([]byte, len(want))
	var err error
	within(t, "reading "+strconv.Quote(want), func() { _, err = io.ReadFull(r, got) })
	if err != nil || string(got) != want {
		t.Fatalf("read %q, %v; want %q", got, err, want)
	}
}

func closeAndWait(t *testing.T, p runbox.StreamingProcess) {
	t.Helper()
	closeProcess(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	var res runbox.Result
	var err error
	within(t, "Wait after Close", func() { res, err = p.Wait(ctx) })
	if errors.Is(err, runbox.ErrCancelled) {
		t.Errorf("Wait after Close is still waiting: %v", err)
	} else if err == nil && res.Signal == "" && res.ExitCode == 0 {
		t.Errorf("Wait after Close: %+v; a killed process has no clean exit", res)
	}
}
