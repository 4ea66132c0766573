// Package integration holds the tests that need a real Docker Engine. They
// build their own fixture image (a static busybox imported through the
// Engine API), label everything they create with the run's ID, and fail the
// run when anything labelled survives it.
package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/internal/testimage"
)

// labelRun marks every object a test run creates.
const labelRun = "dev.runbox.test.run"

var (
	runID      string
	fixtureRef string // the busybox image, tagged for this run
	fixtureID  string
	engineErr  error  // why the Engine is unusable, when it is
	cliDir     string // where the CLI tests built runbox; removed at the end
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	runID = hex.EncodeToString(b)
	fixtureRef = "runbox-test/busybox:" + runID

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: engine client:", err)
		return 1
	}
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		engineErr = fmt.Errorf("no Docker Engine: %w", err)
	} else {
		fixtureID, err = testimage.Import(ctx, cli, fixtureRef, runLabels())
		if err != nil {
			engineErr = fmt.Errorf("building the fixture image: %w", err)
		}
	}
	if engineErr != nil && os.Getenv("CI") == "true" {
		// In CI a missing Engine is a failure, never a skip.
		fmt.Fprintln(os.Stderr, "integration:", engineErr)
		return 1
	}

	code := m.Run()
	if cliDir != "" {
		_ = os.RemoveAll(cliDir)
	}

	if engineErr == nil {
		if leaks := sweep(cli); leaks != "" {
			fmt.Fprintln(os.Stderr, "integration: objects survived the run:\n"+leaks)
			code = 1
		}
	}
	_ = cli.Close()
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: goroutine leak:", err)
		code = 1
	}
	return code
}

// sweep removes the fixture image and reports (and removes) any container or
// other image that carries this run's label.
func sweep(cli *client.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	filter := client.Filters{}.Add("label", labelRun+"="+runID)
	var leaks string
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filter})
	if err != nil {
		return "listing containers: " + err.Error()
	}
	for _, c := range cs.Items {
		leaks += fmt.Sprintf("container %s (%s)\n", c.ID[:12], c.Image)
		_, _ = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}
	_, _ = cli.ImageRemove(ctx, fixtureRef, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	is, err := cli.ImageList(ctx, client.ImageListOptions{All: true, Filters: filter})
	if err != nil {
		return leaks + "listing images: " + err.Error()
	}
	for _, i := range is.Items {
		leaks += fmt.Sprintf("image %s %v\n", i.ID, i.RepoTags)
		_, _ = cli.ImageRemove(ctx, i.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	}
	return leaks
}

func runLabels() map[string]string { return map[string]string{labelRun: runID} }

// needEngine skips (outside CI) or fails when there is no usable Engine.
func needEngine(t testing.TB) {
	t.Helper()
	if engineErr != nil {
		if os.Getenv("CI") == "true" {
			require.NoError(t, engineErr)
		}
		t.Skip(engineErr)
	}
}

// newExecutor returns an Executor closed at the end of the test.
func newExecutor(t testing.TB, opts ...docker.Option) *docker.Executor {
	t.Helper()
	needEngine(t)
	e, err := docker.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}
