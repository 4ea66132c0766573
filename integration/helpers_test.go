package integration

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// sleeper is a lifetime process that outlives any test.
var sleeper = []string{"sleep", "1000000"}

// baseSpec is a session on the fixture image that idles until closed.
func baseSpec() runbox.Spec {
	return runbox.Spec{Image: fixtureRef, Process: sleeper, Labels: runLabels(), Init: true}
}

// open opens a session that is closed when the test ends.
func open(t testing.TB, e *docker.Executor, spec runbox.Spec) *docker.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := e.OpenSession(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	return s
}

// output is what one Run produced.
type output struct {
	stdout, stderr string
	res            runbox.Result
	err            error
}

// run runs cmd with a generous bound that only catches hangs.
func run(t testing.TB, s runbox.Session, cmd runbox.Command) output {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	res, err := s.Run(ctx, cmd, runbox.Streams{Stdout: &out, Stderr: &errb})
	return output{out.String(), errb.String(), res, err}
}

func argv(args ...string) runbox.Command { return runbox.Command{Args: args} }

// containersOfRun lists this run's containers.
func containersOfRun(t testing.TB, cli *client.Client) []string {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
		All: true, Filters: client.Filters{}.Add("label", labelRun+"="+runID),
	})
	require.NoError(t, err)
	var ids []string
	for _, c := range res.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// removeImage removes an image at the end of the test.
func removeImage(t testing.TB, cli *client.Client, ref string) {
	t.Cleanup(func() {
		_, err := cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		assert.NoError(t, err, "removing %s", ref)
	})
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
