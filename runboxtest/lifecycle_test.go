package runboxtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/host"
	"github.com/runbox-dev/runbox/runboxtest"
)

// hostLifecycle describes the host executor's streaming processes.
func hostLifecycle(t *testing.T, e *host.Executor) runboxtest.Lifecycle {
	return runboxtest.Lifecycle{
		Name: "host",
		Start: func(ctx context.Context, script string) (runbox.StreamingProcess, error) {
			pp, err := e.PrepareProcess(ctx, host.ProcessOptions{Args: []string{"sh", "-c", script}, Directory: os.TempDir()})
			if err != nil {
				return nil, err
			}
			return pp.Start(ctx)
		},
	}
}

// TestHostLifecycle runs the lifecycle table against the host executor
// alone; integration runs the same table against a Docker session too.
func TestHostLifecycle(t *testing.T) {
	runboxtest.RunLifecycle(t, hostLifecycle(t, newHost(t)))
}
