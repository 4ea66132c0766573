package docker

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type entry struct {
	name, link string
	typ        byte
	body       string
	mode       int64
}

func hostileTar(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
			if e.typ == tar.TypeDir {
				mode = 0o755 // traversable without root's privilege
			}
		}
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode, Size: int64(len(e.body))}
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
	return &b
}

// extractInto extracts an archive whose top name is "out" into a fresh
// directory dest/ inside a parent that also holds a file the archive must
// never reach (outside/secret) and a directory it must never fill
// (outside/dir).
func extractInto(t *testing.T, archive *bytes.Buffer) (dest, outside string, res CopyOutResult, err error) {
	t.Helper()
	base := t.TempDir()
	dest = filepath.Join(base, "dest")
	outside = filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(filepath.Join(outside, "dir"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
	require.NoError(t, os.Mkdir(dest, 0o755))
	root, err := os.OpenRoot(dest)
	require.NoError(t, err)
	defer root.Close()
	x := &extraction{root: root, from: "out", to: "out", res: &res}
	err = x.extract(archive)
	return dest, outside, res, err
}

// assertOutsideUntouched checks that nothing escaped.
func assertOutsideUntouched(t *testing.T, outside string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(outside, "secret"))
	require.NoError(t, err)
	assert.Equal(t, "secret", string(b), "a file outside the destination was written")
	ents, err := os.ReadDir(filepath.Join(outside, "dir"))
	require.NoError(t, err)
	assert.Empty(t, ents, "a directory outside the destination was filled")
	ents, err = os.ReadDir(outside)
	require.NoError(t, err)
	assert.Len(t, ents, 2, "something was created beside the destination")
}

func TestExtractRefusesHostileArchives(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symbolic links need privilege on Windows")
	}
	dir, reg, sym, link := byte(tar.TypeDir), byte(tar.TypeReg), byte(tar.TypeSymlink), byte(tar.TypeLink)
	cases := map[string][]entry{
		"dot-dot entry":             {{name: "out/", typ: dir}, {name: "out/../outside/secret", typ: reg, body: "pwned"}},
		"dot-dot to a sibling":      {{name: "out/", typ: dir}, {name: "../outside/dir/x", typ: reg, body: "pwned"}},
		"absolute name":             {{name: "out/", typ: dir}, {name: "/tmp/runbox-pwned", typ: reg, body: "pwned"}},
		"name outside the top":      {{name: "out/", typ: dir}, {name: "other/x", typ: reg, body: "pwned"}},
		"file through a symlink":    {{name: "out/", typ: dir}, {name: "out/evil", typ: sym, link: "../../outside"}, {name: "out/evil/secret", typ: reg, body: "pwned"}},
		"file through abs symlink":  {{name: "out/", typ: dir}, {name: "out/evil", typ: sym, link: "/"}, {name: "out/evil/tmp/x", typ: reg, body: "pwned"}},
		"dir through a symlink":     {{name: "out/", typ: dir}, {name: "out/evil", typ: sym, link: "../../outside/dir"}, {name: "out/evil/sub/", typ: dir}},
		"symlink to inside, then":   {{name: "out/", typ: dir}, {name: "out/d/", typ: dir}, {name: "out/l", typ: sym, link: "d"}, {name: "out/l/x", typ: reg, body: "through"}},
		"hard link outside":         {{name: "out/", typ: dir}, {name: "out/h", typ: link, link: "../outside/secret"}},
		"hard link absolute":        {{name: "out/", typ: dir}, {name: "out/h", typ: link, link: "/etc/passwd"}},
		"hard link through symlink": {{name: "out/", typ: dir}, {name: "out/evil", typ: sym, link: "../../outside"}, {name: "out/h", typ: link, link: "out/evil/secret"}},
		"hard link to a symlink":    {{name: "out/", typ: dir}, {name: "out/evil", typ: sym, link: "../../outside/secret"}, {name: "out/h", typ: link, link: "out/evil"}},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			dest, outside, _, err := extractInto(t, hostileTar(t, entries...))
			require.ErrorIs(t, err, ErrUnsafeArchive)
			assertOutsideUntouched(t, outside)
			_, statErr := os.Lstat("/tmp/runbox-pwned")
			assert.ErrorIs(t, statErr, fs.ErrNotExist)
			_ = dest
		})
	}
}

func TestExtractNeverWritesThroughAnExistingLink(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symbolic links need privilege on Windows")
	}
	// A symlink, then a regular file of the same name: the file replaces
	// the link instead of being written through it.
	dest, outside, res, err := extractInto(t, hostileTar(t,
		entry{name: "out/", typ: tar.TypeDir},
		entry{name: "out/f", typ: tar.TypeSymlink, link: "../../outside/secret"},
		entry{name: "out/f", typ: tar.TypeReg, body: "mine"},
	))
	require.NoError(t, err)
	assertOutsideUntouched(t, outside)
	fi, err := os.Lstat(filepath.Join(dest, "out", "f"))
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())
	assert.Equal(t, 1, res.Files)
}

func TestExtractKeepsWhatIsSafe(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symbolic links need privilege on Windows")
	}
	dest, outside, res, err := extractInto(t, hostileTar(t,
		entry{name: "out/", typ: tar.TypeDir, mode: 0o555},
		entry{name: "out/empty/", typ: tar.TypeDir, mode: 0o700},
		entry{name: "out/run.sh", typ: tar.TypeReg, body: "#!/bin/sh\n", mode: 0o4755},
		entry{name: "out/etc", typ: tar.TypeSymlink, link: "/etc"},
		entry{name: "out/up", typ: tar.TypeSymlink, link: "../../outside"},
		entry{name: "out/hard", typ: tar.TypeLink, link: "out/run.sh"},
		entry{name: "out/null", typ: tar.TypeChar},
		entry{name: "out/fifo", typ: tar.TypeFifo},
	))
	require.NoError(t, err)
	assertOutsideUntouched(t, outside)
	out := filepath.Join(dest, "out")
	fi, err := os.Stat(out)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o555), fi.Mode().Perm(), "the directory's mode is applied after its contents")
	fi, err = os.Stat(filepath.Join(out, "empty"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	assert.Equal(t, fs.FileMode(0o700), fi.Mode().Perm())
	fi, err = os.Lstat(filepath.Join(out, "run.sh"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o755), fi.Mode(), "set-user-ID is dropped, the rest kept")
	link, err := os.Readlink(filepath.Join(out, "etc"))
	require.NoError(t, err)
	assert.Equal(t, "/etc", link, "symbolic links are kept as links")
	_, err = os.Lstat(filepath.Join(out, "null"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.Equal(t, []string{"out/null", "out/fifo"}, res.Skipped)
	assert.Equal(t, 2, res.Files)
	assert.Equal(t, 2, res.Symlinks)
	assert.Equal(t, 2, res.Dirs)
	require.NoError(t, os.Chmod(out, 0o755)) // let TempDir clean up
}

func TestExtractRebases(t *testing.T) {
	for _, c := range []struct{ from, to, name, want string }{
		{"out", "out", "out/a/b", "out/a/b"},
		{"out", "renamed", "out/a", "renamed/a"},
		{"out", "renamed", "out/", "renamed"},
		{".", ".", "./a", "a"},
		{".", ".", "./", "."},
		{".", "new", "./a", "new/a"},
	} {
		x := &extraction{from: c.from, to: c.to}
		got, err := x.rebase(c.name)
		require.NoError(t, err, c)
		assert.Equal(t, filepath.FromSlash(c.want), got, c)
	}
	x := &extraction{from: "out", to: ".."}
	_, err := x.rebase("out/a")
	assert.ErrorIs(t, err, ErrUnsafeArchive, "a hostile top name")
}
