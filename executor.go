// Package runbox runs commands in isolated places and reports truthfully
// what happened.
//
// The root package holds the backend-neutral vocabulary: commands, streams,
// results, images, sessions and the error sentinels. Backends live in
// subpackages: [github.com/runbox-dev/runbox/docker] runs commands in Docker
// Engine sessions, [github.com/runbox-dev/runbox/host] runs them on the
// controlling machine.
//
// The central contract: a process that ran to completion yields a [Result],
// whatever its exit code. An error means it did not complete normally (it
// could not be started, the transport failed, the context was cancelled, a
// limit was hit, or cleanup failed); errors wrap the sentinels in this
// package so that callers can test them with errors.Is.
package runbox

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// Command is one process invocation. Args are passed literally: no shell is
// involved unless the caller asks for one with [ShellCommand].
type Command struct {
	// Args is the argument vector; Args[0] is the program.
	Args []string
	// Dir is the working directory; "" selects the backend's default.
	Dir string
	// Env holds KEY=VALUE entries added to (or replacing entries of) the
	// backend's base environment.
	Env []string
	// CleanEnv starts from an empty environment: only Env is set.
	CleanEnv bool
	// Stdin is copied to the process; nil means empty input (immediate EOF).
	Stdin io.Reader
	// TTY runs the command under a pseudo-terminal. Its output, stderr
	// included, arrives on Streams.Stdout. The end of Stdin is not passed
	// on as an EOF (a terminal has none): send the terminal's EOF character
	// instead. A backend that cannot provide a terminal returns
	// ErrProcessTTYUnsupported rather than using pipes.
	TTY bool
	// TermSize is the terminal's initial size when TTY is set; zero leaves
	// the backend's default. Without TTY it must be zero.
	TermSize TermSize
	// Resize, when not nil, delivers new terminal sizes while the command
	// runs; it needs TTY. The backend stops reading it when the call
	// returns.
	Resize <-chan TermSize
	// BeforeStart, when not nil, is called once, synchronously, after the
	// backend has validated and prepared the command and checked its
	// context, immediately before it starts the process. It gets no handle
	// to the process. When it returns an error the process is not started,
	// what was prepared is released, and the call fails with an error
	// wrapping [ErrStartRefused] and the hook's error. Backends call it
	// through [Command.Starting].
	BeforeStart func() error
	// OutputLimit, when set, bounds what the command may write to the
	// Streams of Run: once it is passed the backend stops the command and
	// Run returns an error wrapping ErrOutputLimit, never a Result, with
	// the output up to the limit written. Start refuses it: a streaming
	// process's caller reads, and so bounds, the output itself.
	OutputLimit OutputLimit
	// User runs the command as this user: "uid[:gid]" or a name (with an
	// optional ":group") known to the place it runs in; "" keeps the
	// backend's user (a session's Spec.User). A backend that cannot run a
	// command as another user returns an error wrapping ErrUnsupported.
	User string
}

// Starting calls c.BeforeStart, if set. A backend calls it once per
// command, at the last moment before it starts the process, and returns
// its error (which wraps [ErrStartRefused]) without starting anything.
func (c Command) Starting() error {
	if c.BeforeStart == nil {
		return nil
	}
	if err := c.BeforeStart(); err != nil {
		return fmt.Errorf("%w: %w", ErrStartRefused, err)
	}
	return nil
}

// TermSize is a terminal's size in character cells.
type TermSize struct {
	Rows, Cols uint16
}

// ShellCommand returns a Command that runs script with the platform shell
// (/bin/sh -c on Unix). Use it only when shell syntax is intended.
func ShellCommand(script string) Command {
	return Command{Args: []string{"/bin/sh", "-c", script}}
}

// Validate reports whether c can be handed to a backend. The error wraps
// [ErrInvalidCommand].
func (c Command) Validate() error {
	if len(c.Args) == 0 {
		return fmt.Errorf("%w: empty argument vector", ErrInvalidCommand)
	}
	if c.Args[0] == "" {
		return fmt.Errorf("%w: empty program name", ErrInvalidCommand)
	}
	for i, a := range c.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: argument %d contains a NUL byte", ErrInvalidCommand, i)
		}
	}
	if strings.IndexByte(c.Dir, 0) >= 0 {
		return fmt.Errorf("%w: directory contains a NUL byte", ErrInvalidCommand)
	}
	if err := ValidateEnv(c.Env); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidCommand, err)
	}
	if c.OutputLimit.Stream < 0 || c.OutputLimit.Combined < 0 {
		return fmt.Errorf("%w: negative output limit", ErrInvalidCommand)
	}
	// A terminal size without a terminal would be dropped by every
	// backend: refused, so that no field is silently ignored.
	if !c.TTY && (c.TermSize != (TermSize{}) || c.Resize != nil) {
		return fmt.Errorf("%w: TermSize and Resize need TTY", ErrInvalidCommand)
	}
	if c.TTY && c.TermSize != (TermSize{}) && (c.TermSize.Rows == 0 || c.TermSize.Cols == 0) {
		return fmt.Errorf("%w: terminal size %dx%d has a zero dimension", ErrInvalidCommand, c.TermSize.Rows, c.TermSize.Cols)
	}
	return nil
}

// ValidateStart checks c for Starter.Start: as Validate, and it refuses
// Stdin and Resize, which a streaming process replaces with its own Stdin
// and Resize rather than ignore silently.
func (c Command) ValidateStart() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Stdin != nil || c.Resize != nil {
		return fmt.Errorf("%w: a started process takes input and terminal sizes through its own Stdin and Resize, not Command.Stdin and Command.Resize", ErrInvalidCommand)
	}
	if c.OutputLimit != (OutputLimit{}) {
		return fmt.Errorf("%w: a started process's caller reads its output and bounds it; OutputLimit is for Run", ErrInvalidCommand)
	}
	return nil
}

// ValidateEnv checks KEY=VALUE entries: each needs a non-empty key, an "="
// and no NUL byte.
func ValidateEnv(env []string) error {
	for _, kv := range env {
		if strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("environment entry %q contains a NUL byte", kv)
		}
		k, _, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("environment entry %q has no '='", kv)
		}
		if k == "" {
			return fmt.Errorf("environment entry %q has an empty name", kv)
		}
	}
	return nil
}

// Streams names the caller-owned writers that receive a command's output.
// Backends never close them and never keep them after the call returns; a
// nil writer discards that stream. Writes to each writer are serialized
// within one call; callers sharing a writer between concurrent calls must
// synchronize it themselves.
type Streams struct {
	Stdout io.Writer
	Stderr io.Writer
}

// Result describes a process that completed, including a nonzero exit.
// When a call returns an error alongside a Result, the Result's ExitCode
// is -1: no exit code is ever invented.
type Result struct {
	// ExitCode is the process's exit status.
	ExitCode int
	// Signal names the signal that ended the process (for example
	// "SIGKILL") when the backend can tell; otherwise it is empty.
	Signal string
}

// Success reports whether the process exited with status 0.
func (r Result) Success() bool { return r.ExitCode == 0 && r.Signal == "" }

// Process runs commands synchronously. Run waits for the command to finish;
// when ctx ends first, Run returns an error wrapping both [ErrCancelled] and
// ctx.Err().
type Process interface {
	Run(ctx context.Context, cmd Command, streams Streams) (Result, error)
}

// Executor manages images and isolated sessions in addition to running
// one-shot commands.
type Executor interface {
	Process
	// InspectImage returns the local identity of ref, or an error wrapping
	// ErrImageUnavailable when the image is not present.
	InspectImage(ctx context.Context, ref string) (Image, error)
	// PullImage fetches ref for the selected platform.
	PullImage(ctx context.Context, ref string, opts PullOptions) (Image, error)
	// Open creates a session made of exactly spec.
	Open(ctx context.Context, spec Spec) (Session, error)
}
