package runbox

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// Defaults of [Collect] when [CollectOptions] leaves them zero.
const (
	// DefaultTimeout bounds a collected command's run.
	DefaultTimeout = 10 * time.Second
	// DefaultStreamLimit bounds each of stdout and stderr.
	DefaultStreamLimit = 1 << 20
)

// CollectOptions bounds a [Collect] call. The zero value runs with a
// DefaultTimeout and a DefaultStreamLimit on each stream.
type CollectOptions struct {
	// Timeout bounds the command from the call to its end; zero means
	// DefaultTimeout. There is no unbounded setting.
	Timeout time.Duration
	// StreamLimit is the most bytes kept of each of stdout and stderr.
	// Zero means DefaultStreamLimit, unless CombinedLimit is set, which then
	// applies alone.
	StreamLimit int64
	// CombinedLimit, when positive, bounds stdout and stderr together.
	CombinedLimit int64
	// OnStart, when not nil, is called once, synchronously, after the
	// backend has validated and prepared the command and checked the
	// context, immediately before the process starts (it becomes
	// Command.BeforeStart). It gets no handle to the process. When it
	// returns an error the command is not started, what was prepared is
	// released, and Collect fails with FailureRefused wrapping that error.
	OnStart func() error
}

// Output is a command that ran to completion, whatever its exit code.
type Output struct {
	// Stdout and Stderr are the output, decoded and sanitised after
	// collection (see [Sanitize]).
	Stdout, Stderr string
	// RawStdout and RawStderr are the bytes the command wrote.
	RawStdout, RawStderr []byte
	// ExitCode is the process's exit status.
	ExitCode int
	// Signal names the signal that ended the process when the backend can
	// tell (then ExitCode is 128+N); otherwise it is empty.
	Signal string
}

// Success reports whether the command exited with status 0.
func (o Output) Success() bool { return o.ExitCode == 0 && o.Signal == "" }

// Failure says why a collected command has no [Output].
type Failure int

const (
	// FailureUnavailable: there was no runner (ErrUnavailable).
	FailureUnavailable Failure = iota + 1
	// FailureInvalid: the command or the options were rejected before
	// anything was prepared (ErrInvalidCommand).
	FailureInvalid
	// FailureRefused: the OnStart hook returned an error; the command was
	// not started (ErrStartRefused).
	FailureRefused
	// FailureStart: the program could not be started (ErrStart).
	FailureStart
	// FailureTimeout: the options' timeout expired and the command was
	// stopped (ErrCancelled and context.DeadlineExceeded).
	FailureTimeout
	// FailureAborted: the caller's context ended and the command was
	// stopped (ErrCancelled and the context's error).
	FailureAborted
	// FailureOutputLimit: the output passed a limit and the command was
	// stopped (ErrOutputLimit).
	FailureOutputLimit
	// FailureTransport: the connection to the command failed, so its
	// outcome is unknown (ErrTransport).
	FailureTransport
	// FailureCleanup: releasing the command's resources failed, even if
	// the command completed (ErrCleanup).
	FailureCleanup
	// FailureOther: any other backend failure, such as a closed session;
	// the error says which.
	FailureOther
)

// String returns the failure's name.
func (f Failure) String() string {
	switch f {
	case FailureUnavailable:
		return "unavailable"
	case FailureInvalid:
		return "invalid"
	case FailureRefused:
		return "refused"
	case FailureStart:
		return "start"
	case FailureTimeout:
		return "timeout"
	case FailureAborted:
		return "aborted"
	case FailureOutputLimit:
		return "output limit"
	case FailureTransport:
		return "transport"
	case FailureCleanup:
		return "cleanup"
	case FailureOther:
		return "other"
	}
	return "unknown"
}

// CommandError is every failure of [Collect]: the command did not run to
// completion, or its outcome cannot be trusted. It never carries an exit
// code.
type CommandError struct {
	// Kind says what went wrong.
	Kind Failure
	// Stream names the limit that was passed, for FailureOutputLimit:
	// "stdout", "stderr" or "combined".
	Stream string
	// Stdout and Stderr are the sanitised output collected before the
	// failure; RawStdout and RawStderr are its bytes.
	Stdout, Stderr       string
	RawStdout, RawStderr []byte
	// Err is the cause. It wraps the sentinel of Kind (ErrCancelled,
	// ErrOutputLimit, ErrStart, ...), so errors.Is works on the
	// CommandError itself.
	Err error
}

// Error returns the kind of failure and its cause.
func (e *CommandError) Error() string {
	return "runbox: command failed (" + e.Kind.String() + "): " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *CommandError) Unwrap() error { return e.Err }

// Timeout reports whether the options' timeout ended the command, as
// opposed to the caller's context (FailureAborted).
func (e *CommandError) Timeout() bool { return e.Kind == FailureTimeout }

// Collect runs cmd on p — a host executor, a Docker session, a Docker
// executor's one-shot Run, or any [Process] — and returns its bounded,
// sanitised output. It is the call to use for an untrusted command: the
// zero options stop it after DefaultTimeout and keep at most
// DefaultStreamLimit bytes of each stream, whatever it writes.
//
// A command that ran to completion, with any exit code or killed by a
// signal it did not get from runbox, is an Output and a nil error. Every
// other outcome is a *CommandError whose Kind says which (timeout, abort,
// output limit, start, transport, cleanup, ...), which carries the
// sanitised output collected so far and no exit code, and which wraps the
// package's sentinels. A nil p fails with FailureUnavailable and
// ErrUnavailable.
//
// cmd.Stdin is passed on; cmd.TTY merges the output into Stdout. Collect
// owns the Streams, so output reaches no other writer.
func Collect(ctx context.Context, p Process, cmd Command, opts CollectOptions) (Output, error) {
	if isNil(p) {
		return Output{}, &CommandError{Kind: FailureUnavailable, Err: fmt.Errorf("%w: no runner", ErrUnavailable)}
	}
	if err := opts.validate(); err != nil {
		return Output{}, &CommandError{Kind: FailureInvalid, Err: err}
	}
	if err := cmd.Validate(); err != nil {
		return Output{}, &CommandError{Kind: FailureInvalid, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return Output{}, &CommandError{Kind: FailureAborted, Err: fmt.Errorf("%w: %w", ErrCancelled, err)}
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	perStream := opts.StreamLimit
	if perStream == 0 && opts.CombinedLimit == 0 {
		perStream = DefaultStreamLimit
	}

	timed, cancelTimeout := context.WithTimeout(ctx, timeout)
	defer cancelTimeout()
	runCtx, stop := context.WithCancelCause(timed)
	defer stop(nil)
	lim := OutputLimit{Stream: perStream, Combined: opts.CombinedLimit}
	// Neither buffer ever needs more than the tighter bound that applies.
	bound := int(lim.Stream)
	if bound == 0 || (lim.Combined > 0 && lim.Combined < lim.Stream) {
		bound = int(lim.Combined)
	}
	bufs := [2]*boundedBuffer{{bound: bound}, {bound: bound}}
	limiter := NewLimiter(lim, Streams{Stdout: bufs[0], Stderr: bufs[1]}, func() { stop(ErrOutputLimit) })

	// Wrap the hooks so that Collect knows whether a refusal came from
	// its caller's OnStart and whether the backend called it at all.
	var hookCalled, refused bool
	if inner, onStart := cmd.BeforeStart, opts.OnStart; onStart != nil {
		cmd.BeforeStart = func() error {
			hookCalled = true
			if inner != nil {
				if err := inner(); err != nil {
					return err
				}
			}
			if err := onStart(); err != nil {
				refused = true
				return err
			}
			return nil
		}
	}

	res, err := p.Run(runCtx, cmd, limiter.Streams())
	// The backend no longer writes once Run has returned.
	raw := [2][]byte{bufs[0].b, bufs[1].b}
	over := limiter.Exceeded()
	fail := func(kind Failure, err error) (Output, error) {
		return Output{}, &CommandError{Kind: kind, Stream: over, Err: err,
			Stdout: Sanitize(raw[0]), Stderr: Sanitize(raw[1]), RawStdout: raw[0], RawStderr: raw[1]}
	}
	switch {
	case over != "":
		// Even a command that finished before the stop was seen lost
		// output: it is not a complete Output.
		lerr := limiter.Err()
		if errors.Is(err, ErrCleanup) || errors.Is(err, ErrTransport) {
			lerr = errors.Join(lerr, err)
		}
		return fail(FailureOutputLimit, lerr)
	case err == nil && opts.OnStart != nil && !hookCalled:
		return fail(FailureOther, fmt.Errorf("runbox: the runner %T ran the command without calling Command.BeforeStart, so OnStart was skipped", p))
	case err == nil:
		return Output{Stdout: Sanitize(raw[0]), Stderr: Sanitize(raw[1]), RawStdout: raw[0], RawStderr: raw[1],
			ExitCode: res.ExitCode, Signal: res.Signal}, nil
	case refused:
		return fail(FailureRefused, err)
	case ctx.Err() != nil:
		return fail(FailureAborted, asCancelled(err, ctx.Err()))
	case timed.Err() != nil: // its own deadline, since ctx has not ended
		return fail(FailureTimeout, fmt.Errorf("timed out after %s: %w", timeout, asCancelled(err, context.DeadlineExceeded)))
	}
	return fail(classify(err), err)
}

// isNil reports whether p is nil or a nil pointer (a typed nil such as a
// *host.Executor that was never created), which would panic when used.
func isNil(p Process) bool {
	if p == nil {
		return true
	}
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// asCancelled makes sure that err wraps ErrCancelled and ctxErr, whatever
// the backend reported when it was stopped.
func asCancelled(err, ctxErr error) error {
	switch {
	case errors.Is(err, ErrCancelled) && errors.Is(err, ctxErr):
		return err
	case errors.Is(err, ErrCancelled):
		return fmt.Errorf("%w (%w)", err, ctxErr)
	}
	return fmt.Errorf("%w: %w (%w)", ErrCancelled, ctxErr, err)
}

// classify maps a backend's error to its Failure.
func classify(err error) Failure {
	switch {
	case errors.Is(err, ErrStartRefused):
		return FailureRefused
	case errors.Is(err, ErrInvalidCommand):
		return FailureInvalid
	case errors.Is(err, ErrStart):
		return FailureStart
	case errors.Is(err, ErrTransport):
		return FailureTransport
	case errors.Is(err, ErrCleanup):
		return FailureCleanup
	case errors.Is(err, ErrCancelled):
		return FailureAborted
	case errors.Is(err, ErrOutputLimit):
		return FailureOutputLimit
	}
	return FailureOther
}

func (o CollectOptions) validate() error {
	switch {
	case o.Timeout < 0:
		return fmt.Errorf("%w: negative timeout %s", ErrInvalidCommand, o.Timeout)
	case o.StreamLimit < 0:
		return fmt.Errorf("%w: negative stream limit %d", ErrInvalidCommand, o.StreamLimit)
	case o.CombinedLimit < 0:
		return fmt.Errorf("%w: negative combined limit %d", ErrInvalidCommand, o.CombinedLimit)
	}
	return nil
}
