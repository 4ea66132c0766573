package agent

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// filesFail reports a failure on stderr and returns its status.
func filesFail(code int, format string, args ...any) int {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	return code
}

// fileStatus maps a file error to an exit status.
func fileStatus(err error) int {
	if errors.Is(err, fs.ErrNotExist) {
		return FilesNotFound
	}
	return FilesFailed
}

// fileCaps are the capabilities with which root handles any file of the
// session the way the Engine's archive endpoint (which runs outside every
// container restriction) does: CHOWN, DAC_OVERRIDE, FOWNER, FSETID.
const fileCaps = 1<<unix.CAP_CHOWN | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_FOWNER | 1<<unix.CAP_FSETID

// privileged says whether this process is root with fileCaps in effect.
func privileged() bool {
	if os.Geteuid() != 0 {
		return false
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&fileCaps == fileCaps
		}
	}
	return false
}

// copyIn is `agent copy-in DEST NAME dir|file|exact`: it extracts the tar
// stream on stdin, whose names are relative to the copied source (the
// source itself is "."), as docker cp places a source called NAME at
// DEST: into DEST when it is an existing directory (NAME "." puts the
// contents there), else as DEST itself, whose parent must exist. With
// "exact" the source (a file) becomes DEST itself, and an existing
// directory there is an error instead of a place to copy into. Every
// operation goes through an os.Root on the directory that receives the
// copy, so no entry can leave it, even through a symbolic link the
// session placed there.
func copyIn(args []string) int {
	if len(args) != 3 || (args[2] != "dir" && args[2] != "file" && args[2] != "exact") || !path.IsAbs(args[0]) {
		return filesFail(FilesUseEngine, "runbox agent copy-in: want DEST NAME dir|file|exact")
	}
	if !privileged() {
		return filesFail(FilesUseEngine, "runbox agent copy-in: not root with file privileges")
	}
	dest, name, srcDir := args[0], args[1], args[2] == "dir"
	dir, top := dest, name
	fi, err := os.Stat(dest)
	if args[2] == "exact" {
		fi, err = os.Lstat(dest)
	}
	switch {
	case err == nil && fi.IsDir() && args[2] == "exact":
		return filesFail(FilesInvalid, "%s is a directory", dest)
	case err == nil && fi.IsDir():
	case err == nil && srcDir:
		return filesFail(FilesInvalid, "cannot copy a directory onto the file %s", dest)
	case err == nil || (errors.Is(err, fs.ErrNotExist) && !strings.HasSuffix(dest, "/")):
		dir, top = path.Dir(dest), path.Base(dest)
	default:
		return filesFail(fileStatus(err), "%v", err)
	}
	if top == "/" || top == ".." || strings.Contains(top, "/") {
		return filesFail(FilesInvalid, "copy-in: bad name %q", top)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return filesFail(fileStatus(err), "%v", err)
	}
	defer root.Close()
	if err := untar(root, top, bufio.NewReaderSize(os.Stdin, 256<<10)); err != nil {
		return filesFail(fileStatus(err), "copy-in: %v", err)
	}
	return FilesOK
}

// untar extracts r under root, the archive's "." becoming top.
func untar(root *os.Root, top string, r io.Reader) error {
	tr := tar.NewReader(r)
	type dirMeta struct {
		name string
		hdr  *tar.Header
	}
	var dirs []dirMeta
	// Files go in through their directory, opened once through root and
	// kept while entries of that directory follow: one openat per file
	// instead of one per path component and operation. The descriptor
	// stays on the directory it was opened on, inside root, whatever the
	// session renames meanwhile.
	parent, parentName := root, "."
	defer func() {
		if parent != root {
			parent.Close()
		}
	}()
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		rel := path.Clean(strings.TrimSuffix(hdr.Name, "/"))
		if !filepath.IsLocal(rel) && rel != "." {
			return fmt.Errorf("entry %q is not a local name", hdr.Name)
		}
		name := filepath.Clean(filepath.Join(top, rel))
		mode := hdr.FileInfo().Mode()
		if hdr.Typeflag == tar.TypeReg {
			// The common case first, with as few path walks as can be: a
			// new file, its metadata set through its descriptor.
			if dir := filepath.Dir(name); dir != parentName {
				if parent != root {
					parent.Close()
				}
				if parent, err = root.OpenRoot(dir); err != nil {
					parent = root
					return err
				}
				parentName = dir
			}
			base := filepath.Base(name)
			f, err := parent.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
			if errors.Is(err, fs.ErrExist) {
				if err := replace(parent, base, false); err != nil {
					return err
				}
				f, err = parent.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
			}
			if err != nil {
				return err
			}
			err = writeFile(f, tr, hdr, mode)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			continue
		}
		if hdr.Typeflag != tar.TypeDir || name != "." {
			// Replace what is there, as docker does, unless a directory
			// meets a directory. Never write through what was there.
			if err := replace(root, name, hdr.Typeflag == tar.TypeDir); err != nil {
				return err
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != "." {
				if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
					return err
				}
				dirs = append(dirs, dirMeta{name, hdr})
			}
			continue
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
			if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
				return err
			}
			continue
		case tar.TypeLink:
			old := path.Clean(hdr.Linkname)
			if !filepath.IsLocal(old) {
				return fmt.Errorf("hard link %q to %q is not a local name", hdr.Name, hdr.Linkname)
			}
			if err := root.Link(filepath.Join(top, old), name); err != nil {
				return err
			}
			continue
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			if err := mknodIn(root, name, hdr); err != nil {
				return err
			}
		default:
			continue
		}
		if err := setMeta(root, name, hdr, mode); err != nil {
			return err
		}
	}
	// Directories last, deepest first, so that read-only ones were filled.
	for _, d := range slices.Backward(dirs) {
		if err := setMeta(root, d.name, d.hdr, d.hdr.FileInfo().Mode()); err != nil {
			return err
		}
	}
	return nil
}

// replace removes what is at name, unless a directory meets a directory,
// as docker does, so that nothing is written through what was there.
func replace(root *os.Root, name string, dir bool) error {
	old, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	switch {
	case err != nil || (old.IsDir() && dir):
		return err
	case !old.IsDir():
		return root.Remove(name)
	}
	return root.RemoveAll(name)
}

// writeFile fills a new regular file and applies its owner, mode (after
// the owner, which clears set-user-ID bits) and modification time
// through its descriptor.
func writeFile(f *os.File, r io.Reader, hdr *tar.Header, mode fs.FileMode) error {
	if _, err := io.Copy(f, r); err != nil {
		return err
	}
	if err := f.Chown(hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if err := f.Chmod(mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)); err != nil {
		return err
	}
	return futimens(f, hdr.ModTime)
}

// futimens sets a file's access and modification times through its
// descriptor: utimensat with a NULL path, as futimens(3) does.
func futimens(f *os.File, t time.Time) error {
	ts := [2]unix.Timespec{unix.NsecToTimespec(t.UnixNano()), unix.NsecToTimespec(t.UnixNano())}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, f.Fd(), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return &fs.PathError{Op: "futimens", Path: f.Name(), Err: errno}
	}
	return nil
}

// setMeta applies an entry's owner, mode (after the owner, which clears
// set-user-ID bits) and modification time.
func setMeta(root *os.Root, name string, hdr *tar.Header, mode fs.FileMode) error {
	if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if err := root.Chmod(name, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	return root.Chtimes(name, hdr.ModTime, hdr.ModTime)
}

// mknodIn creates a device node or FIFO inside root: in its parent,
// opened through root, so that no link leads it elsewhere.
func mknodIn(root *os.Root, name string, hdr *tar.Header) error {
	parent, err := root.Open(filepath.Dir(name))
	if err != nil {
		return err
	}
	defer parent.Close()
	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeChar:
		mode |= unix.S_IFCHR
	case tar.TypeBlock:
		mode |= unix.S_IFBLK
	default:
		mode |= unix.S_IFIFO
	}
	dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
	return unix.Mknodat(int(parent.Fd()), filepath.Base(name), mode, int(dev))
}

// copyOut is `agent copy-out SRC`: it writes one JSON line (FileStat)
// and then a tar stream of SRC, named as the Engine's archive endpoint
// names it: the source under its own name, or, for "DIR/.", what the
// directory holds. A final symbolic link is archived as a link; the tree
// is read through an os.Root on the source's directory, so no link the
// session made inside it leads the copy elsewhere. Device nodes and FIFOs
// are archived as such (their content is never read).
func copyOut(args []string) int {
	if len(args) != 1 || !path.IsAbs(args[0]) {
		return filesFail(FilesUseEngine, "runbox agent copy-out: want SRC")
	}
	if len(args[0]) > 1 && strings.HasSuffix(args[0], "/") {
		// "DIR/" follows a final link and insists on a directory, as the
		// Engine resolves it; that rare form is left to the Engine.
		return filesFail(FilesUseEngine, "runbox agent copy-out: a path ending in /")
	}
	if !privileged() {
		return filesFail(FilesUseEngine, "runbox agent copy-out: not root with file privileges")
	}
	src := args[0]
	dir, base := path.Dir(src), path.Base(src)
	if strings.HasSuffix(src, "/.") || src == "/" {
		dir, base = strings.TrimSuffix(src, "/."), "."
		if dir == "" {
			dir = "/"
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return filesFail(fileStatus(err), "%v", err)
	}
	defer root.Close()
	fi, err := root.Lstat(base)
	if err != nil {
		return filesFail(fileStatus(err), "%v", err)
	}
	if base == "." && !fi.IsDir() {
		return filesFail(FilesInvalid, "%s is not a directory", dir)
	}
	st := FileStat{Name: base, Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime()}
	if fi.Mode()&fs.ModeSymlink != 0 {
		// Where the link leads in the session, as the Engine reports it;
		// for a dangling link, the path it names.
		target, err := filepath.EvalSymlinks(src)
		if err != nil {
			target, _ = root.Readlink(base)
			if !path.IsAbs(target) {
				target = path.Join(dir, target)
			}
		}
		st.LinkTarget = target
	}
	out := bufio.NewWriterSize(os.Stdout, 256<<10)
	if err := json.NewEncoder(out).Encode(st); err != nil {
		return FilesFailed
	}

	if err := writeTar(root, base, out); err != nil {
		// The stream is cut short: the caller's tar reader fails too.
		_ = out.Flush()
		return filesFail(FilesFailed, "copy-out: %v", err)
	}
	if err := out.Flush(); err != nil {
		return FilesFailed
	}
	return FilesOK
}

// writeTar archives top (a name under root) and, for a directory,
// everything under it, without following symbolic links.
func writeTar(root *os.Root, top string, w io.Writer) error {
	tw := tar.NewWriter(w)
	entry := func(name string) error {
		fi, err := root.Lstat(name)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil // a socket cannot be archived
		}
		var link string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = root.Readlink(name); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = name
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.Format = tar.FormatPAX
		if !fi.Mode().IsRegular() {
			return tw.WriteHeader(hdr)
		}
		// Opened without following a link and without blocking on a
		// FIFO, then checked to be the file that was described.
		f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		now, err := f.Stat()
		if err != nil {
			return err
		}
		if !now.Mode().IsRegular() || !os.SameFile(fi, now) {
			return fmt.Errorf("%s changed while it was copied", name)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
		if err == nil && n < hdr.Size {
			err = fmt.Errorf("%s shrank while it was copied", name)
		}
		return err
	}
	fi, err := root.Lstat(top)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		// WalkDir reads directories and never follows a link inside.
		err = fs.WalkDir(root.FS(), top, func(name string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return entry(name)
		})
	} else {
		err = entry(top) // a link as the source is archived as a link
	}
	if err != nil {
		return err
	}
	return tw.Close()
}
