package docker

import (
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
)

// ErrNoDefaultSpec reports Executor.Run without WithDefaultSpec.
var ErrNoDefaultSpec = errors.New("runbox/docker: Run needs a default session spec (use docker.WithDefaultSpec)")

// PullError is an error the Engine reported inside a pull's progress stream
// (for example an unknown tag, missing credentials or a missing platform).
type PullError struct {
	Ref     string
	Message string
}

// Error implements error.
func (e *PullError) Error() string {
	return fmt.Sprintf("runbox/docker: pull %s: %s", e.Ref, e.Message)
}

// classify wraps an Engine error with the runbox sentinel it stands for.
// Only an Engine not-found answer may become "image unavailable"; anything
// else (a dead socket, a 500) keeps its own meaning.
func classifyImageErr(ref string, err error) error {
	if err == nil {
		return nil
	}
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%w: %s: %w", runbox.ErrImageUnavailable, ref, err)
	}
	return engineErr(err)
}

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
