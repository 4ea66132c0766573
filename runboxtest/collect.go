package runboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runbox-dev/runbox"
)

// CollectBackend describes a backend for [RunCollect].
type CollectBackend struct {
	// Name labels the backend in failure messages.
	Name string
	// Runner runs POSIX shell scripts given as [runbox.ShellCommand]: a host
	// executor, a Docker session or a Docker executor with a default Spec.
	// Required.
	Runner runbox.Process
	// ScratchDir is a directory that the Runner's commands may write and
	// that keeps its contents from one command to the next. Required.
	ScratchDir string
}

// collectHang bounds the cases that must end by other means (an output
// limit, a hook): reaching it means the backend did not stop the command.
const collectHang = time.Minute

// writeBytes is a script that writes n×100 bytes of '0' to fd with shell
// built-ins only.
func writeBytes(n, fd int) string {
	return fmt.Sprintf(`i=0; while [ $i -lt %d ]; do printf '%%0100d' 0 >&%d; i=$((i+1)); done`, n, fd)
}

// collectCase is one row of the outcome table. check gets what Collect
// returned; a nil err means an Output.
type collectCase struct {
	name  string
	cmd   func(b CollectBackend) runbox.Command
	opts  runbox.CollectOptions
	abort bool // cancel the caller's context once the command has been started
	// wrap replaces the runner, for the failures no real backend produces
	// on demand.
	wrap  func(runbox.Process) runbox.Process
	check func(t *testing.T, b CollectBackend, out runbox.Output, err error)
}

// mustOutput fails unless Collect returned an Output.
func mustOutput(t *testing.T, out runbox.Output, err error) runbox.Output {
	t.Helper()
	if err != nil {
		t.Fatalf("Collect: %v, want an Output", err)
	}
	return out
}

// mustFail fails unless Collect returned a *CommandError of kind, which
// wraps every one of sentinels.
func mustFail(t *testing.T, err error, kind runbox.Failure, sentinels ...error) *runbox.CommandError {
	t.Helper()
	var ce *runbox.CommandError
	if !errors.As(err, &ce) {
		t.Fatalf("Collect: %v (%T), want a *runbox.CommandError", err, err)
	}
	if ce.Kind != kind {
		t.Fatalf("Collect: kind %s (%v), want %s", ce.Kind, err, kind)
	}
	for _, s := range sentinels {
		if !errors.Is(err, s) {
			t.Errorf("Collect: %v does not wrap %v", err, s)
		}
	}
	for i, s := range []string{ce.Stdout, ce.Stderr} {
		if strings.ContainsAny(s, "\x1b\x07\b\r") {
			t.Errorf("partial output %d %q is not sanitised", i, s)
		}
	}
	return ce
}

func shell(script string) func(CollectBackend) runbox.Command {
	return func(CollectBackend) runbox.Command { return runbox.ShellCommand(script) }
}

// failAfter runs the command for real and then reports err, as a backend
// whose connection broke or whose cleanup failed once the command was done.
type failAfter struct {
	p   runbox.Process
	err error
}

func (f failAfter) Run(ctx context.Context, cmd runbox.Command, streams runbox.Streams) (runbox.Result, error) {
	if _, err := f.p.Run(ctx, cmd, streams); err != nil {
		return runbox.Result{ExitCode: -1}, err
	}
	return runbox.Result{ExitCode: -1}, f.err
}

var collectCases = []collectCase{
	{
		name: "completed, exit 0, output sanitised, raw bytes kept",
		cmd:  shell(`printf 'hi \033[1;31mthere\033[0m\r\n'; printf '50%%\r100%%\n' >&2`),
		check: func(t *testing.T, _ CollectBackend, out runbox.Output, err error) {
			out = mustOutput(t, out, err)
			if out.ExitCode != 0 || out.Signal != "" || !out.Success() {
				t.Errorf("exit %d signal %q, want 0", out.ExitCode, out.Signal)
			}
			if out.Stdout != "hi there\n" || out.Stderr != "100%\n" {
				t.Errorf("stdout %q stderr %q, want %q and %q", out.Stdout, out.Stderr, "hi there\n", "100%\n")
			}
			if raw := "hi \x1b[1;31mthere\x1b[0m\r\n"; string(out.RawStdout) != raw {
				t.Errorf("raw stdout %q, want %q", out.RawStdout, raw)
			}
		},
	},
	{
		name: "completed, nonzero exit is an Output",
		cmd:  shell("echo out; echo err >&2; exit 3"),
		check: func(t *testing.T, _ CollectBackend, out runbox.Output, err error) {
			out = mustOutput(t, out, err)
			if out.ExitCode != 3 || out.Success() || out.Stdout != "out\n" || out.Stderr != "err\n" {
				t.Errorf("got %+v, want exit 3 with out/err", out)
			}
		},
	},
	{
		name: "completed, death by signal is an Output",
		cmd:  shell("echo before; kill -KILL $$"),
		check: func(t *testing.T, _ CollectBackend, out runbox.Output, err error) {
			out = mustOutput(t, out, err)
			// A backend that cannot tell the signal reports 128+9 alone.
			if out.ExitCode != 137 || (out.Signal != "SIGKILL" && out.Signal != "") || out.Stdout != "before\n" {
				t.Errorf("got exit %d signal %q stdout %q, want 137 SIGKILL", out.ExitCode, out.Signal, out.Stdout)
			}
		},
	},
	{
		name: "output exactly at the stream limit is complete",
		cmd:  shell(writeBytes(10, 1) + "; " + writeBytes(10, 2)),
		opts: runbox.CollectOptions{StreamLimit: 1000},
		check: func(t *testing.T, _ CollectBackend, out runbox.Output, err error) {
			out = mustOutput(t, out, err)
			if len(out.RawStdout) != 1000 || len(out.RawStderr) != 1000 {
				t.Errorf("kept %d and %d bytes, want 1000 each", len(out.RawStdout), len(out.RawStderr))
			}
		},
	},
	{
		name: "timeout stops the command",
		cmd:  shell("printf partial; sleep 1000"),
		opts: runbox.CollectOptions{Timeout: 500 * time.Millisecond},
		check: func(t *testing.T, _ CollectBackend, _ runbox.Output, err error) {
			ce := mustFail(t, err, runbox.FailureTimeout, runbox.ErrCancelled, context.DeadlineExceeded)
			if !ce.Timeout() || errors.Is(err, context.Canceled) {
				t.Errorf("%v: Timeout() %v, want a timeout and not an abort", err, ce.Timeout())
			}
			if !strings.HasPrefix("partial", ce.Stdout) {
				t.Errorf("partial stdout %q is not a prefix of what was written", ce.Stdout)
			}
		},
	},
	{
		name:  "abort by the caller's context stops the command",
		cmd:   shell("sleep 1000"),
		opts:  runbox.CollectOptions{Timeout: collectHang},
		abort: true,
		check: func(t *testing.T, _ CollectBackend, _ runbox.Output, err error) {
			ce := mustFail(t, err, runbox.FailureAborted, runbox.ErrCancelled, context.Canceled)
			if ce.Timeout() {
				t.Errorf("%v: an abort reported as a timeout", err)
			}
		},
	},
	{
		name: "stdout over its limit stops the command",
		cmd:  shell(`printf '\033[1m'; ` + writeBytes(50, 1) + "; sleep 1000"),
		opts: runbox.CollectOptions{Timeout: collectHang, StreamLimit: 1000},
		check: func(t *testing.T, _ CollectBackend, _ runbox.Output, err error) {
			ce := mustFail(t, err, runbox.FailureOutputLimit, runbox.ErrOutputLimit)
			if ce.Stream != "stdout" || len(ce.RawStdout) != 1000 || ce.Stdout != strings.Repeat("0", 996) {
				t.Errorf("stream %q, %d raw bytes, stdout %q: want stdout, 1000 and 996 zeros", ce.Stream, len(ce.RawStdout), ce.Stdout)
			}
		},
	},
	{
		name: "stderr over its limit stops the command",
		cmd:  shell(writeBytes(50, 2) + "; sleep 1000"),
		opts: runbox.CollectOptions{Timeout: collectHang, StreamLimit: 1000},
		check: func(t *testing.T, _ CollectBackend, _ runbox.Output, err error) {
			ce := mustFail(t, err, runbox.FailureOutputLimit, runbox.ErrOutputLimit)
			if ce.Stream != "stderr" || len(ce.RawStderr) != 1000 || len(ce.RawStdout) != 0 {
				t.Errorf("stream %q, %d+%d raw bytes: want stderr, 0+1000", ce.Stream, len(ce.RawStdout), len(ce.RawStderr))
			}
		},
	},
	{
		name: "both streams over a combined limit stop the command",
		cmd:  shell(writeBytes(6, 1) + "; " + writeBytes(6, 2) + "; sleep 1000"),
		opts: runbox.CollectOptions{Timeout: collectHang, CombinedLimit: 1000},
		check: func(t *testing.T, _ CollectBackend, _ runbox.Output, err error) {
			ce := mustFail(t, err, runbox.FailureOutputLimit, runbox.ErrOutputLimit)
			if n := len(ce.RawStdout) + len(ce.RawStderr); ce.Stream != "combined" || n != 1000 {
				t.Errorf("stream %q, %d bytes kept: want combined, 1000", ce.Stream, n)
			}
		},
	},
	{
		name: "a program that cannot start",
		cmd:  func(CollectBackend) runbox.Command { return runbox.Command{Args: []string{"/no/such/program"}} },
		check: func(t *testing.T, _ CollectBackend, _ runbox.Output, err error) {
			mustFail(t, err, runbox.FailureStart, runbox.ErrStart)
		},
	},
	{
		name: "transport failure after the output arrived",
		cmd:  shell("echo out"),
		wrap: func(p runbox.Process) runbox.Process {
			return failAfter{p, fmt.Errorf("%w: connection reset (injected)", runbox.ErrTransport)}
		},
		check: func(t *testing.T, _ CollectBackend, _ runbox.Output, err error) {
			ce := mustFail(t, err, runbox.FailureTransport, runbox.ErrTransport)
			if ce.Stdout != "out\n" {
				t.Errorf("partial stdout %q, want %q", ce.Stdout, "out\n")
			}
		},
	},
	{
		name: "cleanup failure after a completed command is a failure",
		cmd:  shell("echo out; exit 0"),
		wrap: func(p runbox.Process) runbox.Process {
			return failAfter{p, fmt.Errorf("%w: removing the session (injected)", runbox.ErrCleanup)}
		},
		check: func(t *testing.T, _ CollectBackend, _ runbox.Output, err error) {
			ce := mustFail(t, err, runbox.FailureCleanup, runbox.ErrCleanup)
			if ce.Stdout != "out\n" {
				t.Errorf("partial stdout %q, want %q", ce.Stdout, "out\n")
			}
		},
	},
	{
		name: "nil runner is unavailable",
		wrap: func(runbox.Process) runbox.Process { return nil },
		cmd:  shell("true"),
		check: func(t *testing.T, _ CollectBackend, _ runbox.Output, err error) {
			mustFail(t, err, runbox.FailureUnavailable, runbox.ErrUnavailable)
		},
	},
}

// RunCollect runs the outcome table of [runbox.Collect] against b: a
// command that completes (exit 0, nonzero, killed by a signal) is an
// Output; a timeout, an abort, each output limit, a start failure, a
// refusing OnStart hook and a nil runner are a *runbox.CommandError of the
// right kind with sanitised partial output. Transport and cleanup failures
// are injected around the real backend, which cannot fail on demand.
func RunCollect(t *testing.T, b CollectBackend) {
	t.Helper()
	if b.Runner == nil || b.ScratchDir == "" {
		t.Fatalf("%s: CollectBackend needs Runner and ScratchDir", b.Name)
	}
	for _, tc := range collectCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*collectHang)
			defer cancel()
			p := b.Runner
			if tc.wrap != nil {
				p = tc.wrap(p)
			}
			opts := tc.opts
			var calls atomic.Int32
			opts.OnStart = func() error {
				calls.Add(1)
				if tc.abort {
					// Soon after the start, not before it: the hook runs
					// just before the process starts.
					time.AfterFunc(200*time.Millisecond, cancel)
				}
				return nil
			}
			out, err := runbox.Collect(ctx, p, tc.cmd(b), opts)
			tc.check(t, b, out, err)
			if n := calls.Load(); n > 1 {
				t.Errorf("OnStart called %d times", n)
			}
			if err == nil && calls.Load() != 1 {
				t.Errorf("the command completed without OnStart being called")
			}
		})
	}
	t.Run("OnStart failure: not started, error returned, backend usable", func(t *testing.T) {
		checkOnStartRefused(t, b)
	})
}

// checkOnStartRefused: a refusing OnStart keeps the command from starting
// (it would leave a marker file) and its error comes back wrapped.
func checkOnStartRefused(t *testing.T, b CollectBackend) {
	ctx, cancel := context.WithTimeout(context.Background(), collectHang)
	defer cancel()
	marker := b.ScratchDir + "/onstart-" + token()
	refusal := errors.New("not now")
	_, err := runbox.Collect(ctx, b.Runner, runbox.ShellCommand("touch "+q(marker)),
		runbox.CollectOptions{OnStart: func() error { return refusal }})
	mustFail(t, err, runbox.FailureRefused, runbox.ErrStartRefused, refusal)

	out, err := runbox.Collect(ctx, b.Runner, runbox.ShellCommand("test -e "+q(marker)), runbox.CollectOptions{})
	out = mustOutput(t, out, err)
	if out.ExitCode == 0 {
		t.Errorf("the refused command ran: %s exists", marker)
	}
	// The positive control: the same command without a refusal leaves the
	// marker, so its absence above means something.
	out, err = runbox.Collect(ctx, b.Runner, runbox.ShellCommand("touch "+q(marker)+" && test -e "+q(marker)), runbox.CollectOptions{})
	if out = mustOutput(t, out, err); out.ExitCode != 0 {
		t.Errorf("control: touch %s failed: %+v", marker, out)
	}
}
