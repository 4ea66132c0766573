package docker

import (
	"bytes"
	"errors"
	"io/fs"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

func TestParsePlatform(t *testing.T) {
	p, err := ParsePlatform("linux/arm64/v8")
	require.NoError(t, err)
	assert.Equal(t, ocispec.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, p)
	for _, bad := range []string{"", "linux", "linux/", "/amd64", "a/b/c/d", "linux/amd 64"} {
		_, err := ParsePlatform(bad)
		assert.ErrorIs(t, err, runbox.ErrInvalidSpec, bad)
	}
}

func TestPlatformMatches(t *testing.T) {
	img := runbox.Image{OS: "linux", Architecture: "arm64", Variant: "v8"}
	assert.True(t, platformMatches(ocispec.Platform{OS: "linux", Architecture: "arm64"}, img))
	assert.True(t, platformMatches(ocispec.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, img))
	assert.False(t, platformMatches(ocispec.Platform{OS: "linux", Architecture: "arm64", Variant: "v7"}, img))
	assert.False(t, platformMatches(ocispec.Platform{OS: "linux", Architecture: "amd64"}, img))
}

func TestContainerConfigIsExactlyTheSpec(t *testing.T) {
	spec := runbox.Spec{
		Image:     "img",
		Network:   runbox.NetworkNone,
		Process:   []string{"sleep", "1"},
		Mounts:    []runbox.Mount{{Source: "/h", Target: "/c/", ReadOnly: true}},
		Env:       []string{"A=1"},
		Labels:    map[string]string{"mine": "x", LabelKind: "forged"},
		Resources: runbox.Resources{MemoryBytes: 1 << 20, CPUs: 1.5, Pids: 10},
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg, hc := containerConfig(spec, "me/1", now)
	assert.Equal(t, []string{"sleep", "1"}, []string(cfg.Entrypoint))
	assert.Nil(t, cfg.Cmd, "no image command is merged into the lifetime process")
	assert.Empty(t, cfg.WorkingDir)
	assert.Equal(t, KindSession, cfg.Labels[LabelKind], "runbox's labels cannot be forged by the spec")
	assert.Equal(t, "me/1", cfg.Labels[LabelOwner])
	assert.Equal(t, "2026-01-02T03:04:05Z", cfg.Labels[LabelCreated])
	assert.Equal(t, "x", cfg.Labels["mine"])
	assert.Equal(t, "none", string(hc.NetworkMode))
	require.Len(t, hc.Mounts, 1)
	assert.Equal(t, "/c", hc.Mounts[0].Target)
	assert.True(t, hc.Mounts[0].ReadOnly)
	assert.Equal(t, int64(1500000000), hc.NanoCPUs)
	assert.Equal(t, int64(10), *hc.PidsLimit)
	assert.False(t, *hc.Init)

	spec.Process = nil
	cfg, _ = containerConfig(spec, "me/1", now)
	assert.Nil(t, cfg.Entrypoint, "nil Process keeps the image's own command")
}

func TestSnapshotLabelsBlankSessionLabels(t *testing.T) {
	l := snapshotLabels(map[string]string{"keep": "1", LabelKind: "session"})
	assert.Equal(t, "", l[LabelKind])
	assert.Equal(t, "", l[LabelOwner])
	assert.Equal(t, "1", l["keep"])
}

func TestStartGate(t *testing.T) {
	t.Run("started process output passes through", func(t *testing.T) {
		var out bytes.Buffer
		g := &startGate{w: &out, check: func() (bool, error) { return true, nil }}
		_, err := g.Write([]byte("hi"))
		require.NoError(t, err)
		assert.Equal(t, "hi", out.String())
	})
	t.Run("engine message is held", func(t *testing.T) {
		var out bytes.Buffer
		g := &startGate{w: &out, check: func() (bool, error) { return false, nil }}
		_, err := g.Write([]byte("OCI runtime exec failed"))
		require.NoError(t, err)
		assert.Empty(t, out.String())
		assert.Equal(t, "OCI runtime exec failed", g.held.String())
		require.NoError(t, g.release())
		assert.Equal(t, "OCI runtime exec failed", out.String())
	})
	t.Run("large output is never held back", func(t *testing.T) {
		var out bytes.Buffer
		g := &startGate{w: &out, check: func() (bool, error) { return false, nil }}
		_, err := g.Write(make([]byte, maxHeld+1))
		require.NoError(t, err)
		assert.Equal(t, maxHeld+1, out.Len())
	})
	t.Run("inspect failure stops the copy", func(t *testing.T) {
		boom := errors.New("boom")
		g := &startGate{w: &bytes.Buffer{}, check: func() (bool, error) { return false, boom }}
		_, err := g.Write([]byte("x"))
		assert.ErrorIs(t, err, boom)
	})
}

func TestClassifyImageErr(t *testing.T) {
	e := &Executor{endpoint: Endpoint{Host: "tcp://d2:2376", Context: "d2"}}
	err := e.classifyImageErr("x", cerrdefs.ErrNotFound.WithMessage("no such image: x: No such image: x"))
	assert.ErrorIs(t, err, runbox.ErrImageUnavailable)
	assert.True(t, cerrdefs.IsNotFound(err), "the Engine's answer stays in the chain")
	assert.Equal(t, "runbox: image unavailable: x is not on the Engine tcp://d2:2376 (context d2)", err.Error(), "the reference once, and the Engine")
	err = e.classifyImageErr("x", cerrdefs.ErrInternal.WithMessage("daemon broke"))
	assert.NotErrorIs(t, err, runbox.ErrImageUnavailable)
	err = e.classifyImageErr("x", cerrdefs.ErrUnavailable.WithMessage("down"))
	assert.NotErrorIs(t, err, runbox.ErrImageUnavailable)
}

func TestStartErr(t *testing.T) {
	for _, c := range []struct {
		msg            string
		notFound, perm bool
	}{
		{`exec: "/x": stat /x: no such file or directory`, true, false},
		{`exec: "x": executable file not found in $PATH`, true, false},
		{`exec /etc: permission denied`, false, true},
		{`exec /bin/x: exec format error`, false, true},
		{`chdir to cwd ("/nope") set in config.json failed: no such file or directory`, false, false},
	} {
		err := startErr(c.msg, engineStartReason(c.msg))
		assert.ErrorIs(t, err, runbox.ErrStart, c.msg)
		assert.Equal(t, c.notFound, errors.Is(err, fs.ErrNotExist), c.msg)
		assert.Equal(t, c.perm, errors.Is(err, fs.ErrPermission), c.msg)
		assert.Equal(t, "runbox: command could not be started: "+c.msg, err.Error())
	}
}

func TestNewValidatesOptions(t *testing.T) {
	_, err := New(WithDefaultSpec(runbox.Spec{}))
	assert.ErrorIs(t, err, runbox.ErrInvalidSpec)
	_, err = New(WithCloseTimeout(0))
	assert.Error(t, err)
	_, err = New(WithClient(nil))
	assert.Error(t, err)
}
