package runbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
			require.ErrorAs(t, err, &ce, "Collect = %+v", out)
			assert.Equal(t, tc.kind, ce.Kind, "%v", err)
			for _, s := range tc.is {
				assert.ErrorIs(t, err, s)
			}
			assert.Equal(t, tc.stdout, ce.Stdout, "partial stdout")
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
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, FailureAborted, ce.Kind)
	assert.ErrorIs(t, err, ErrCancelled)
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, called, "OnStart called before an abort")
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
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, FailureRefused, ce.Kind)
	assert.ErrorIs(t, err, inner)
	assert.Len(t, order, 1, "the command's refusal alone: %v", order)
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
			n, err := w.Write(block)
			require.NoError(t, err)
			require.Equal(t, len(block), n)
		}
	}
	runtime.ReadMemStats(&after)
	// Both streams reach their limit; stdout is the first to pass it.
	assert.Len(t, bufs[0].b, limit)
	assert.Len(t, bufs[1].b, limit)
	assert.Equal(t, limit, cap(bufs[0].b))
	assert.Equal(t, "stdout", l.Exceeded())
	assert.Equal(t, 1, stops)
	assert.ErrorIs(t, l.Err(), ErrOutputLimit)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(bound), "bytes allocated by 2 GiB of writes")
}

// TestLimiterCombined: the combined limit counts both streams and names
// itself; a stream limit still applies alongside it; a writer's error is
// passed back.
func TestLimiterCombined(t *testing.T) {
	var out, errb bytes.Buffer
	l := NewLimiter(OutputLimit{Combined: 10}, Streams{Stdout: &out, Stderr: &errb}, func() {})
	_, _ = l.Streams().Stdout.Write([]byte("123456"))
	_, _ = l.Streams().Stderr.Write([]byte("abcdef"))
	assert.Equal(t, "123456", out.String())
	assert.Equal(t, "abcd", errb.String())
	assert.Equal(t, "combined", l.Exceeded())
	errb.Reset()
	l = NewLimiter(OutputLimit{Stream: 3, Combined: 10}, Streams{Stderr: &errb}, func() {})
	_, _ = l.Streams().Stdout.Write([]byte("12")) // to a nil writer: discarded, still counted
	_, _ = l.Streams().Stderr.Write([]byte("abcd"))
	assert.Equal(t, "abc", errb.String())
	assert.Equal(t, "stderr", l.Exceeded(), "the stream limit first")
	broken := errors.New("broken")
	l = NewLimiter(OutputLimit{Stream: 3}, Streams{Stdout: failWriter{broken}}, func() {})
	_, err := l.Streams().Stdout.Write([]byte("x"))
	assert.ErrorIs(t, err, broken, "the writer's error")
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
	require.NoError(t, err)
	require.Len(t, out.RawStdout, DefaultStreamLimit)
	require.Len(t, out.RawStderr, DefaultStreamLimit)
	// The deadline was set during the call: DefaultTimeout after a moment
	// between start and end.
	assert.GreaterOrEqual(t, deadline.Sub(start), DefaultTimeout, "deadline after the call's start")
	assert.LessOrEqual(t, deadline.Sub(end), DefaultTimeout, "deadline after the call's end")
}

type runFunc func(ctx context.Context, cmd Command, s Streams) (Result, error)

func (f runFunc) Run(ctx context.Context, cmd Command, s Streams) (Result, error) {
	return f(ctx, cmd, s)
}
