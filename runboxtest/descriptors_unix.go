//go:build unix

package runboxtest

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// minLeakedFD keeps the leaked descriptors clear of the numbers a shell or
// a helper uses for itself.
const minLeakedFD = 100

// leakDescriptors opens file for writing, dir, a socket pair and a pipe,
// and copies one end of each to a descriptor without close-on-exec; the
// file comes first. Everything is closed when the test ends.
func leakDescriptors(t *testing.T, file, dir string) ([]leakedDescriptor, bool) {
	t.Helper()
	var closers []*os.File
	var leaked []leakedDescriptor
	t.Cleanup(func() {
		for _, d := range leaked {
			unix.Close(d.fd)
		}
		for _, f := range closers {
			f.Close()
		}
	})
	add := func(f *os.File, kind string) {
		closers = append(closers, f)
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD, minLeakedFD) // F_DUPFD: no close-on-exec
		if err != nil {
			t.Fatalf("leak a %s descriptor: %v", kind, err)
		}
		leaked = append(leaked, leakedDescriptor{fd: fd, kind: kind})
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	add(f, "file")
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	add(d, "directory")
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.CloseOnExec(pair[0])
	unix.CloseOnExec(pair[1])
	closers = append(closers, os.NewFile(uintptr(pair[1]), "peer"))
	add(os.NewFile(uintptr(pair[0]), "socket"), "socket")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	closers = append(closers, r)
	add(w, "pipe")
	return leaked, true
}
