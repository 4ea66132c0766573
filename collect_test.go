package runbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"
)

// fakeRunner writes stdout and stderr, then returns res and err. It calls
// the BeforeStart hook unless skipHook is set.
type fakeRunner struct {
	stdout, stderr string
	res            Result
	err            error
	skipHook       bool
}

func (f *fakeRunner) Run(ctx context.Context, cmd Command, streams Streams) (Result, error) {
	if !f.skipHook {
		if err := cmd.Starting(); err != nil {
			return Result{ExitCode: -1}, err
		}
	}
	_, _ = streams.Stdout.Write([]byte(f.stdout))
	_, _ = streams.Stderr.Write([]byte(f.stderr))
	return f.res, f.err
}

// TestCollectClassifies covers the outcomes that only a fake backend can
// produce on demand; runboxtest.RunCollect covers the real backends.
func TestCollectClassifies(t *testing.T) {
	ctx := context.Background()
	cmd := Command{Args: []string{"x"}}
	for _, tc := range []struct {
		name   string
		p      Process
		opts   CollectOptions
		cmd    Command
		kind   Failure
		is     []error
		stdout string
	}{
		{name: "transport", p: &fakeRunner{stdout: "part\x1b[1m", res: Result{ExitCode: -1}, err: ErrTransport},
			kind: FailureTransport, is: []error{ErrTransport}, stdout: "part"},
		{name: "cleanup after completion", p: &fakeRunner{stdout: "done", res: Result{ExitCode: -1}, err: ErrCleanup},
			kind: FailureCleanup, is: []error{ErrCleanup}, stdout: "done"},
		{name: "session closed", p: &fakeRunner{res: Result{ExitCode: -1}, err: ErrSessionClosed},
			kind: FailureOther, is: []error{ErrSessionClosed}},
		{name: "nil runner", p: nil, kind: FailureUnavailable, is: []error{ErrUnavailable}},
		{name: "typed nil runner", p: (*fakeRunner)(nil), kind: FailureUnavailable, is: []error{ErrUnavailable}},
		{name: "invalid command", p: &fakeRunner{}, cmd: Command{}, kind: FailureInvalid, is: []error{ErrInvalidCommand}},
		{name: "negative timeout", p: &fakeRunner{}, opts: CollectOptions{Timeout: -1}, kind: FailureInvalid, is: []error{ErrInvalidCommand}},
		{name: "negative limit", p: &fakeRunner{}, opts: CollectOptions{CombinedLimit: -1}, kind: FailureInvalid, is: []error{ErrInvalidCommand}},
		{name: "overflow on a command that finished anyway", p: &fakeRunner{stdout: "0123456789"},
			opts: CollectOptions{StreamLimit: 4}, kind: FailureOutputLimit, is: []error{ErrOutputLimit}, stdout: "0123"},
		{name: "overflow with a cleanup failure keeps both", p: &fakeRunner{stdout: "0123456789", res: Result{ExitCode: -1}, err: ErrCleanup},
			opts: CollectOptions{CombinedLimit: 4}, kind: FailureOutputLimit, is: []error{ErrOutputLimit, ErrCleanup}, stdout: "0123"},
		{name: "a runner that skips the hook", p: &fakeRunner{skipHook: true},
			opts: CollectOptions{OnStart: func() error { return nil }}, kind: FailureOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cmd
			if tc.cmd.Args != nil || tc.name == "invalid command" {
				c = tc.cmd
			}
			out, err := Collect(ctx, tc.p, c, tc.opts)
			var ce *CommandError
			if !errors.As(err, &ce) {
				t.Fatalf("Collect = %+v, %v; want a *CommandError", out, err)
			}
			if ce.Kind != tc.kind {
				t.Errorf("kind %s (%v), want %s", ce.Kind, err, tc.kind)
			}
			for _, s := range tc.is {
				if !errors.Is(err, s) {
					t.Errorf("%v does not wrap %v", err, s)
				}
			}
			if ce.Stdout != tc.stdout {
				t.Errorf("partial stdout %q, want %q", ce.Stdout, tc.stdout)
			}
		})
	}
}

// TestCollectCancelledBeforeRun: a context that has ended already is an
// abort, and nothing reaches the runner.
func TestCollectCancelledBeforeRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	_, err := Collect(ctx, &fakeRunner{}, Command{Args: []string{"x"}}, CollectOptions{OnStart: func() error { called = true; return nil }})
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Kind != FailureAborted || !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) || called {
		t.Errorf("Collect = %v (OnStart called: %v), want an abort before the start", err, called)
	}
}

// TestCollectHookOrder: a BeforeStart of the caller's command runs before
// OnStart, and its refusal is not mistaken for OnStart's.
func TestCollectHookOrder(t *testing.T) {
	var order []string
	inner := errors.New("inner")
	cmd := Command{Args: []string{"x"}, BeforeStart: func() error { order = append(order, "command"); return inner }}
	_, err := Collect(context.Background(), &fakeRunner{}, cmd, CollectOptions{OnStart: func() error {
		order = append(order, "OnStart")
		return nil
	}})
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Kind != FailureRefused || !errors.Is(err, inner) || len(order) != 1 {
		t.Errorf("Collect = %v after hooks %v, want the command's refusal alone", err, order)
	}
}

// TestLimiterBound writes 1 GiB to each stream through Collect's limit
// writer itself: whatever a backend keeps delivering after the stop, it
// keeps at most its limit and reports every write as complete.
func TestLimiterBound(t *testing.T) {
	const total, limit, bound = 1 << 30, 1 << 20, 8 << 20
	block := bytes.Repeat([]byte{'x'}, 64<<10)
	stops := 0
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	bufs := [2]*boundedBuffer{{bound: limit}, {bound: limit}}
	l := NewLimiter(OutputLimit{Stream: limit}, Streams{Stdout: bufs[0], Stderr: bufs[1]}, func() { stops++ })
	s := l.Streams()
	for written := 0; written < total; written += len(block) {
		for _, w := range []io.Writer{s.Stdout, s.Stderr} {
			if n, err := w.Write(block); n != len(block) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
	}
	runtime.ReadMemStats(&after)
	// Both streams reach their limit; stdout is the first to pass it.
	if len(bufs[0].b) != limit || len(bufs[1].b) != limit || cap(bufs[0].b) != limit || l.Exceeded() != "stdout" || stops != 1 {
		t.Errorf("kept %d+%d bytes (cap %d), over %q, %d stops; want %d each, stdout, 1",
			len(bufs[0].b), len(bufs[1].b), cap(bufs[0].b), l.Exceeded(), stops, limit)
	}
	if !errors.Is(l.Err(), ErrOutputLimit) {
		t.Errorf("Err() = %v", l.Err())
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown >= bound {
		t.Errorf("2 GiB of writes allocated %d bytes, want less than %d", grown, bound)
	}
}

// TestLimiterCombined: the combined limit counts both streams and names
// itself; a stream limit still applies alongside it; a writer's error is
// passed back.
func TestLimiterCombined(t *testing.T) {
	var out, errb bytes.Buffer
	l := NewLimiter(OutputLimit{Combined: 10}, Streams{Stdout: &out, Stderr: &errb}, func() {})
	_, _ = l.Streams().Stdout.Write([]byte("123456"))
	_, _ = l.Streams().Stderr.Write([]byte("abcdef"))
	if out.String() != "123456" || errb.String() != "abcd" || l.Exceeded() != "combined" {
		t.Errorf("passed %q and %q, over %q", out.String(), errb.String(), l.Exceeded())
	}
	errb.Reset()
	l = NewLimiter(OutputLimit{Stream: 3, Combined: 10}, Streams{Stderr: &errb}, func() {})
	_, _ = l.Streams().Stdout.Write([]byte("12")) // to a nil writer: discarded, still counted
	_, _ = l.Streams().Stderr.Write([]byte("abcd"))
	if errb.String() != "abc" || l.Exceeded() != "stderr" {
		t.Errorf("passed %q, over %q; want the stream limit first", errb.String(), l.Exceeded())
	}
	broken := errors.New("broken")
	l = NewLimiter(OutputLimit{Stream: 3}, Streams{Stdout: failWriter{broken}}, func() {})
	if _, err := l.Streams().Stdout.Write([]byte("x")); !errors.Is(err, broken) {
		t.Errorf("Write = %v, want the writer's error", err)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

// TestCollectDefaults: the zero options give each stream the default
// limit and bound the run with the default timeout.
func TestCollectDefaults(t *testing.T) {
	var deadline time.Time
	p := runFunc(func(ctx context.Context, cmd Command, s Streams) (Result, error) {
		deadline, _ = ctx.Deadline()
		big := make([]byte, DefaultStreamLimit)
		_, _ = s.Stdout.Write(big)
		_, _ = s.Stderr.Write(big)
		return Result{}, nil
	})
	start := time.Now()
	out, err := Collect(context.Background(), p, Command{Args: []string{"x"}}, CollectOptions{})
	end := time.Now()
	if err != nil || len(out.RawStdout) != DefaultStreamLimit || len(out.RawStderr) != DefaultStreamLimit {
		t.Fatalf("Collect = %d+%d bytes, %v; want the default limit on each stream", len(out.RawStdout), len(out.RawStderr), err)
	}
	// The deadline was set during the call: DefaultTimeout after a moment
	// between start and end.
	if deadline.Sub(start) < DefaultTimeout || deadline.Sub(end) > DefaultTimeout {
		t.Errorf("deadline %s after the call's start and %s after its end, want %s", deadline.Sub(start), deadline.Sub(end), DefaultTimeout)
	}
}

type runFunc func(ctx context.Context, cmd Command, s Streams) (Result, error)

func (f runFunc) Run(ctx context.Context, cmd Command, s Streams) (Result, error) {
	return f(ctx, cmd, s)
}
