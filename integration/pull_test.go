package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/moby/moby/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/internal/testimage"
)

// otherArch is an architecture no test image is pushed for.
const otherArch = "s390x"

// testRegistry is a real registry on 127.0.0.1 (which the Engine treats as
// insecure-allowed) holding the busybox image as a single manifest
// ("single") and as an index with only this machine's platform ("index").
func testRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	bb, err := testimage.Busybox()
	require.NoError(t, err)
	rootfs, err := testimage.Tar(bb)
	require.NoError(t, err)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(rootfs)), nil })
	require.NoError(t, err)
	img, err := mutate.AppendLayers(empty.Image, layer)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Env = []string{"PATH=/bin"}
	cf.Config.Labels = runLabels()
	img, err = mutate.ConfigFile(img, cf)
	require.NoError(t, err)

	single, err := name.ParseReference(host + "/runbox-test/bb:single")
	require.NoError(t, err)
	require.NoError(t, remote.Write(single, img))
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{
		Add:        img,
		Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}},
	})
	index, err := name.ParseReference(host + "/runbox-test/bb:index")
	require.NoError(t, err)
	require.NoError(t, remote.WriteIndex(index, idx))
	return host
}

func TestPullImage(t *testing.T) {
	e := newExecutor(t)
	cli := e.Client()
	host := testRegistry(t)

	for _, tag := range []string{"single", "index"} {
		t.Run(tag, func(t *testing.T) {
			ref := host + "/runbox-test/bb:" + tag
			var progress bytes.Buffer
			img, err := e.PullImage(context.Background(), ref, runbox.PullOptions{
				Platform: &ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
				Progress: &progress,
			})
			require.NoError(t, err)
			removeImage(t, cli, ref)
			assert.Equal(t, runtime.GOARCH, img.Architecture)
			assert.Equal(t, "linux", img.OS)
			assert.Contains(t, progress.String(), "Status: ")
			assert.NotContains(t, progress.String(), "\x1b[", "a writer that is not a terminal gets plain lines")

			got, err := e.InspectImage(context.Background(), ref)
			require.NoError(t, err)
			assert.Equal(t, img, got)

			s := open(t, e, runbox.Spec{Image: ref, Process: sleeper, Labels: runLabels()})
			o := run(t, s, argv("echo", "pulled"))
			require.NoError(t, o.err)
			assert.Equal(t, "pulled\n", o.stdout)
		})
	}
}

func TestPullFailuresAreReturned(t *testing.T) {
	e := newExecutor(t)
	cli := e.Client()
	host := testRegistry(t)
	other := &ocispec.Platform{OS: "linux", Architecture: otherArch}

	t.Run("missing platform in an index", func(t *testing.T) {
		ref := host + "/runbox-test/bb:index"
		_, err := e.PullImage(context.Background(), ref, runbox.PullOptions{Platform: other})
		require.Error(t, err)
		var pe *docker.PullError
		require.ErrorAs(t, err, &pe, "the Engine reports this inside the progress stream")
		assert.Contains(t, pe.Message, otherArch)
		_, ierr := e.InspectImage(context.Background(), ref)
		assert.ErrorIs(t, ierr, runbox.ErrImageUnavailable, "nothing was pulled")
	})

	t.Run("single manifest of another platform", func(t *testing.T) {
		ref := host + "/runbox-test/bb:single"
		_, err := e.PullImage(context.Background(), ref, runbox.PullOptions{Platform: other})
		require.Error(t, err)
		var pe *docker.PullError
		assert.True(t, errors.Is(err, runbox.ErrPlatformMismatch) || errors.As(err, &pe), "%v", err)
		_, _ = cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true})
	})

	t.Run("missing tag", func(t *testing.T) {
		_, err := e.PullImage(context.Background(), host+"/runbox-test/bb:no-such-tag", runbox.PullOptions{})
		require.Error(t, err)
		assert.ErrorIs(t, err, runbox.ErrImageUnavailable, "the Engine answered not-found")
		assert.Contains(t, err.Error(), "no-such-tag")
	})

	t.Run("missing repository", func(t *testing.T) {
		_, err := e.PullImage(context.Background(), host+"/runbox-test/absent:1", runbox.PullOptions{})
		assert.ErrorIs(t, err, runbox.ErrImageUnavailable)
	})

	t.Run("unreachable registry", func(t *testing.T) {
		_, err := e.PullImage(context.Background(), "127.0.0.1:1/runbox-test/bb:1", runbox.PullOptions{})
		require.Error(t, err)
		assert.NotErrorIs(t, err, runbox.ErrImageUnavailable, "a registry that cannot be reached is not an absent image")
	})

	t.Run("bad input", func(t *testing.T) {
		_, err := e.PullImage(context.Background(), "Bad//Ref", runbox.PullOptions{})
		assert.ErrorIs(t, err, runbox.ErrInvalidSpec)
		_, err = e.PullImage(context.Background(), host+"/x:1", runbox.PullOptions{Platform: &ocispec.Platform{OS: "linux"}})
		assert.ErrorIs(t, err, runbox.ErrInvalidSpec)
	})
}
