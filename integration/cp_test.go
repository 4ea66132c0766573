//go:build linux

package integration

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCLICp(t *testing.T) {
	r := cli(t, nil, "open", runLabelFlag(), "--init", fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { cli(t, nil, "close", id) })

	src := filepath.Join(t.TempDir(), "task")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "empty"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755))

	r = cli(t, nil, "cp", src, id+":/tmp")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, r.stdout+r.stderr)
	r = cli(t, nil, "exec", id, "--", "sh", "-c", "/tmp/task/run.sh; stat -c '%a %F' /tmp/task/empty; ln -s /etc /tmp/task/evil")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "ran\n700 directory\n", r.stdout)

	// Out, to a new name; the session's symbolic link stays a link.
	dest := filepath.Join(t.TempDir(), "back")
	r = cli(t, nil, "cp", id+":/tmp/task", dest)
	require.Equal(t, 0, r.code, r.stderr)
	b, err := os.ReadFile(filepath.Join(dest, "run.sh"))
	require.NoError(t, err)
	assert.Equal(t, "#!/bin/sh\necho ran\n", string(b))
	link, err := os.Readlink(filepath.Join(dest, "evil"))
	require.NoError(t, err)
	assert.Equal(t, "/etc", link)

	// "-": a tar on stdout, and one on stdin.
	r = cli(t, nil, "cp", id+":/tmp/task/run.sh", "-")
	require.Equal(t, 0, r.code, r.stderr)
	tr := tar.NewReader(strings.NewReader(r.stdout))
	hdr, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "run.sh", hdr.Name)
	body, err := io.ReadAll(tr)
	require.NoError(t, err)
	assert.Equal(t, "#!/bin/sh\necho ran\n", string(body))

	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "from-stdin", Mode: 0o600, Size: 3, Typeflag: tar.TypeReg}))
	_, _ = tw.Write([]byte("in\n"))
	require.NoError(t, tw.Close())
	r = cli(t, &in, "cp", "-", id+":/root")
	require.Equal(t, 0, r.code, r.stderr)
	r = cli(t, nil, "exec", id, "--", "cat", "/root/from-stdin")
	assert.Equal(t, "in\n", r.stdout)

	// Failures: exit 125, one line on stderr.
	for name, args := range map[string][]string{
		"missing source in session": {"cp", id + ":/no/such", t.TempDir()},
		"missing host source":       {"cp", "/no/such/host/path", id + ":/tmp"},
		"missing directory":         {"cp", src, id + ":/no/such/dir/x"},
		"no session side":           {"cp", src, t.TempDir()},
		"two sessions":              {"cp", id + ":/a", id + ":/b"},
		"unknown session":           {"cp", src, "nosuchsession" + runID + ":/tmp"},
		"relative session path":     {"cp", src, id + ":tmp"},
	} {
		r := cli(t, nil, args...)
		assert.Equal(t, 125, r.code, name)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "%s: %q", name, r.stderr)
		assert.Empty(t, r.stdout, name)
	}
	r = cli(t, nil, "cp", id+":/no/such", t.TempDir())
	assert.Contains(t, r.stderr, "does not exist")
}
