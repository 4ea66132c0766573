//go:build linux

package integration

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostBuild runs `runbox host ARGS...` in dir, allowing a cold build.
func hostBuild(t *testing.T, dir string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, runboxBinary(t), append([]string{"host"}, args...)...)
	cmd.Dir = dir
	return runCmd(t, cmd)
}

// TestHostBuildsThisRepository builds and tests this repository
// inside its own sandbox, without network, with the Go caches of
// --cache go: the module cache read-only, a build cache of its own. The
// tests run are those of `make unit` that need neither the Docker Engine
// (whose socket the sandbox hides) nor sandboxes of their own (the
// sandbox refuses new namespaces): internal/agent and docker.
func TestHostBuildsThisRepository(t *testing.T) {
	repo, err := filepath.Abs("..")
	require.NoError(t, err)

	// Control: without the caches, go reaches for the network, which the
	// sandbox does not have, and the build fails.
	r := hostBuild(t, repo, "--", "go", "build", "-o", "/dev/null", "./cmd/runbox")
	assert.NotEqual(t, 0, r.code, "a confined build without the module cache should not find its modules: %s", r.stderr)

	r = hostBuild(t, repo, "--json", "--cache", "go", "--timeout", "15m", "--", "sh", "-c",
		"go build ./... && go test -count=1 ./internal/agent/ ./docker/")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "ok  \tgithub.com/runbox-dev/runbox/internal/agent")
	assert.Contains(t, r.stdout, "ok  \tgithub.com/runbox-dev/runbox/docker")
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	var rep struct {
		Guarantees struct {
			Level           string `json:"level"`
			NetworkBoundary bool   `json:"networkBoundary"`
			WriteBoundary   bool   `json:"writeBoundary"`
		} `json:"guarantees"`
		Access struct {
			WritePaths []string `json:"writePaths"`
		} `json:"access"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &rep), r.stderr)
	assert.Equal(t, "full", rep.Guarantees.Level)
	assert.True(t, rep.Guarantees.NetworkBoundary, "built without network")
	assert.True(t, rep.Guarantees.WriteBoundary)
	require.Len(t, rep.Access.WritePaths, 2, "the working directory and the build cache, nothing else")
	assert.Contains(t, rep.Access.WritePaths[1]+rep.Access.WritePaths[0], filepath.Join("runbox", "go-build"))
}
