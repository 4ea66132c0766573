//go:build linux

package integration

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nonRootUser is the account these tests run as when the suite runs as
// root: a member of the docker group and nothing more, the common setup.
const nonRootUser = "runbox-docker-user"

// dockerUser returns the credential of a user who reaches the Engine
// through the docker group without being root, creating the account
// when the suite runs as root. Run as a non-root user, the suite is that
// user already.
func dockerUser(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Getuid() != 0 {
		return nil // already not root: run as ourselves
	}
	if _, err := user.Lookup(nonRootUser); err != nil {
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/bin/false",
			"--groups", "docker", nonRootUser).CombinedOutput()
		require.NoError(t, err, "creating %s: %s", nonRootUser, out)
	}
	u, err := user.Lookup(nonRootUser)
	require.NoError(t, err)
	g, err := user.LookupGroup("docker")
	require.NoError(t, err)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dgid, _ := strconv.Atoi(g.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(dgid)}}
}

// userDir is a directory the docker user can read, holding copies of
// binaries built by the suite.
func userDir(t *testing.T, bins ...string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "runbox-user-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	for _, b := range bins {
		data, err := os.ReadFile(b)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(b)), data, 0o755))
	}
	return dir
}

// runAs runs a program as cred (nil: as this process) with a minimal
// environment.
func runAs(t *testing.T, cred *syscall.Credential, name string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/tmp"}
	if agentBin := filepath.Join(filepath.Dir(name), "runbox"); fileExists(agentBin) {
		cmd.Env = append(cmd.Env, "RUNBOX_AGENT="+agentBin)
	}
	if host := os.Getenv("DOCKER_HOST"); host != "" {
		cmd.Env = append(cmd.Env, "DOCKER_HOST="+host)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return runCmd(t, cmd)
}

// TestAgentForDockerGroupUser: the fast, authenticated local path works
// for a caller who is not root on the host, through the library and the
// command line.
func TestAgentForDockerGroupUser(t *testing.T) {
	cred := dockerUser(t)
	prog := filepath.Join(t.TempDir(), "nonroot")
	build := exec.Command("go", "build", "-o", prog, "./testdata/nonroot")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	dir := userDir(t, runboxBinary(t), prog)
	runbox := filepath.Join(dir, "runbox")

	r := runAs(t, cred, filepath.Join(dir, "nonroot"), fixtureRef, labelRun+"="+runID)
	require.Equal(t, 0, r.code, "library as a docker-group user:\n%s%s", r.stdout, r.stderr)
	t.Logf("library:\n%s", r.stdout)

	r = runAs(t, cred, runbox, "open", runLabelFlag(), fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { runAs(t, cred, runbox, "close", id) })
	r = runAs(t, cred, runbox, "exec", "-e", "SECRET=s3cr3t", id, "--", "sh", "-c", "echo $SECRET; exit 3")
	assert.Equal(t, 3, r.code, r.stderr)
	assert.Equal(t, "s3cr3t\n", r.stdout)
	r = runAs(t, cred, runbox, "close", id)
	assert.Equal(t, 0, r.code, r.stderr)
}

// TestProgramIsItsOwnAgent: a static library program that calls
// runbox.Init first gets agent sessions with no runbox binary anywhere:
// it serves as its own agent.
func TestProgramIsItsOwnAgent(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "selfagent")
	build := exec.Command("go", "build", "-o", prog, "./testdata/selfagent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	dir := userDir(t, prog)
	r := runAs(t, nil, filepath.Join(dir, "selfagent"), fixtureRef, labelRun+"="+runID)
	require.Equal(t, 0, r.code, "%s%s", r.stdout, r.stderr)
	assert.Equal(t, "agent kernel, exit 4, pid 1: /dev/.runbox/bin/runbox agent init --dial /dev/.runbox/run --lease 15s -- sleep 1000000 \n", r.stdout)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
