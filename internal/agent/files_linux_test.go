package agent

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type entry struct {
	name, link string
	typ        byte
	body       string
}

func tarOf(t *testing.T, entries ...entry) *bytes.Buffer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o755, Size: int64(len(e.body)),
			Uid: os.Getuid(), Gid: os.Getgid()} // so that the test needs no privilege
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		require.NoError(t, tw.WriteHeader(hdr))
		if e.typ == tar.TypeReg {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return &buf
}

// The copy-in helper trusts the caller's archive, yet no name in it, and
// no link in the session's destination, may place anything outside the
// directory that receives the copy.
func TestUntarStaysInside(t *testing.T) {
	for name, entries := range map[string][]entry{
		"dot-dot":            {{name: "../x", typ: tar.TypeReg, body: "x"}},
		"absolute":           {{name: "/x", typ: tar.TypeReg, body: "x"}},
		"dot-dot inside":     {{name: "a/../../x", typ: tar.TypeReg, body: "x"}},
		"through a symlink":  {{name: "evil", link: "..", typ: tar.TypeSymlink}, {name: "evil/x", typ: tar.TypeReg, body: "x"}},
		"absolute symlink":   {{name: "evil", link: "/", typ: tar.TypeSymlink}, {name: "evil/x", typ: tar.TypeReg, body: "x"}},
		"hard link outside":  {{name: "x", link: "../../outside/secret", typ: tar.TypeLink}},
		"hard link absolute": {{name: "x", link: "/etc/passwd", typ: tar.TypeLink}},
	} {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			require.NoError(t, os.Mkdir(outside, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
			dest := filepath.Join(base, "dest")
			require.NoError(t, os.Mkdir(dest, 0o755))
			root, err := os.OpenRoot(dest)
			require.NoError(t, err)
			defer root.Close()
			assert.Error(t, untar(root, ".", tarOf(t, entries...)))
			for _, p := range []string{filepath.Join(base, "x"), filepath.Join(outside, "x"), "/x"} {
				_, err := os.Lstat(p)
				assert.ErrorIs(t, err, fs.ErrNotExist, p)
			}
			b, err := os.ReadFile(filepath.Join(outside, "secret"))
			require.NoError(t, err)
			assert.Equal(t, "secret", string(b))
		})
	}

	// A link the session left where a file arrives is replaced, not
	// written through.
	base := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(base, "victim"), []byte("orig"), 0o644))
	dest := filepath.Join(base, "dest")
	require.NoError(t, os.Mkdir(dest, 0o755))
	require.NoError(t, os.Symlink(filepath.Join(base, "victim"), filepath.Join(dest, "f")))
	require.NoError(t, os.Symlink(base, filepath.Join(dest, "d")))
	root, err := os.OpenRoot(dest)
	require.NoError(t, err)
	defer root.Close()
	require.NoError(t, untar(root, ".", tarOf(t,
		entry{name: "f", typ: tar.TypeReg, body: "new"},
		entry{name: "d/", typ: tar.TypeDir},
		entry{name: "d/victim", typ: tar.TypeReg, body: "new"})))
	b, err := os.ReadFile(filepath.Join(base, "victim"))
	require.NoError(t, err)
	assert.Equal(t, "orig", string(b))
	fi, err := os.Lstat(filepath.Join(dest, "d"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	b, err = os.ReadFile(filepath.Join(dest, "f"))
	require.NoError(t, err)
	assert.Equal(t, "new", string(b))
}

// What the archive says about a file is what the file gets.
func TestUntarMetadata(t *testing.T) {
	dest := t.TempDir()
	root, err := os.OpenRoot(dest)
	require.NoError(t, err)
	defer root.Close()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime, Uid: os.Getuid(), Gid: os.Getgid()}))
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o750, ModTime: mtime, Uid: os.Getuid(), Gid: os.Getgid()}))
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o640, Size: 2, ModTime: mtime, Uid: os.Getuid(), Gid: os.Getgid()}))
	_, err = tw.Write([]byte("hi"))
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, untar(root, "top", &buf))
	for name, mode := range map[string]fs.FileMode{"top": fs.ModeDir | 0o755, "top/d": fs.ModeDir | 0o750, "top/d/f": 0o640} {
		fi, err := os.Lstat(filepath.Join(dest, name))
		require.NoError(t, err, name)
		assert.Equal(t, mode, fi.Mode(), name)
		assert.True(t, fi.ModTime().Equal(mtime), name)
	}
}
