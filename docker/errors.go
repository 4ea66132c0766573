package docker

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/agent"
)

// ErrNoDefaultSpec reports Executor.Run without WithDefaultSpec.
var ErrNoDefaultSpec = errors.New("runbox/docker: Run needs a default session spec (use docker.WithDefaultSpec)")

// PullError is an error the Engine reported inside a pull's progress stream
// (for example an unknown tag, missing credentials or a missing platform).
type PullError struct {
	Ref     string
	Message string
	// Engine names the Engine that pulled (Endpoint.String()).
	Engine string
}

// Error implements error.
func (e *PullError) Error() string {
	if e.Engine == "" {
		return fmt.Sprintf("runbox/docker: pull %s: %s", e.Ref, e.Message)
	}
	return fmt.Sprintf("runbox/docker: pull %s on the Engine %s: %s", e.Ref, e.Engine, e.Message)
}

// classifyImageErr wraps an Engine error with the runbox sentinel it
// stands for. Only an Engine not-found answer may become "image
// unavailable", which names the Engine; anything else (a dead socket, a
// 500) keeps its own meaning.
func (e *Executor) classifyImageErr(ref string, err error) error {
	if err == nil {
		return nil
	}
	if cerrdefs.IsNotFound(err) {
		// The Engine's own text repeats the reference twice more.
		return &wrapped{msg: fmt.Sprintf("%v: %s is not on the Engine %s", runbox.ErrImageUnavailable, ref, e.endpoint), errs: []error{runbox.ErrImageUnavailable, err}}
	}
	return engineErr(err)
}

// classifyPullErr is classifyImageErr for a pull's request: a not-found
// answer there comes from the registry, whose words are kept.
func (e *Executor) classifyPullErr(ref string, err error) error {
	if cerrdefs.IsNotFound(err) {
		msg := strings.TrimPrefix(err.Error(), "Error response from daemon: ")
		return &wrapped{msg: fmt.Sprintf("%v: %s on the Engine %s: %s", runbox.ErrImageUnavailable, ref, e.endpoint, msg), errs: []error{runbox.ErrImageUnavailable, err}}
	}
	if err := engineErr(err); errors.Is(err, runbox.ErrTransport) {
		return err // names the Engine already
	}
	return fmt.Errorf("runbox/docker: pull %s on the Engine %s: %w", ref, e.endpoint, err)
}

// wrapped is an error whose message is written for a reader and whose
// chain holds the sentinels and causes for errors.Is and errors.As.
type wrapped struct {
	msg  string
	errs []error
}

func (w *wrapped) Error() string   { return w.msg }
func (w *wrapped) Unwrap() []error { return w.errs }

// engineErr marks connection failures as transport failures and returns
// other errors unchanged. A failure of runbox's own dialer already names
// the endpoint and says what failed, so the client's wrapping (with its
// request URL) is dropped.
func engineErr(err error) error {
	if err == nil {
		return nil
	}
	var ce *engineConnError
	if errors.As(err, &ce) {
		return fmt.Errorf("%w: %w", runbox.ErrTransport, ce)
	}
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("%w: %w", runbox.ErrTransport, err)
	}
	return err
}

// engineErr is the package's engineErr for this Executor's Engine: a
// refusal also names the Engine that refused (its endpoint), since a
// user with several Engines must know which one answered. A connection
// failure names it already, and an error named once is not named again.
func (e *Executor) engineErr(err error) error {
	err = engineErr(err)
	var named *namedEngineErr
	if err == nil || e == nil || errors.Is(err, runbox.ErrTransport) || errors.As(err, &named) {
		return err
	}
	return &namedEngineErr{engine: e.endpoint.String(), err: err}
}

// namedEngineErr is an Engine's refusal with the Engine's name.
type namedEngineErr struct {
	engine string
	err    error
}

func (n *namedEngineErr) Error() string { return "the Engine " + n.engine + ": " + n.err.Error() }
func (n *namedEngineErr) Unwrap() error { return n.err }

// startErr is the error of a program that could not be started: it wraps
// runbox.ErrStart, and also fs.ErrNotExist when the program was not found
// or fs.ErrPermission when it was found but could not be executed, so that
// a caller can tell them apart as docker does (exit statuses 127 and 126).
func startErr(msg, reason string) error {
	errs := []error{runbox.ErrStart}
	switch reason {
	case agent.ReasonNotFound:
		errs = append(errs, fs.ErrNotExist)
	case agent.ReasonNotExecutable:
		errs = append(errs, fs.ErrPermission)
	}
	return &wrapped{msg: fmt.Sprintf("%v: %s", runbox.ErrStart, msg), errs: errs}
}

// engineStartReason classifies the runtime's words for a failed start as
// docker's own CLI does. A missing working directory is neither.
func engineStartReason(msg string) string {
	switch {
	case strings.Contains(msg, "chdir"), strings.Contains(msg, "cwd"):
		return ""
	case strings.Contains(msg, "executable file not found"), strings.Contains(msg, "no such file or directory"):
		return agent.ReasonNotFound
	case strings.Contains(msg, "permission denied"), strings.Contains(msg, "is a directory"), strings.Contains(msg, "exec format error"):
		return agent.ReasonNotExecutable
	}
	return ""
}
