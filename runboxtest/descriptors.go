package runboxtest

import (
	"fmt"
	"os"
	"path"
	"strings"
	"testing"
)

// leakedDescriptor is one descriptor the test process holds without
// close-on-exec, the way a program holds what its own parent left open.
type leakedDescriptor struct {
	fd   int
	kind string // "file", "directory", "socket" or "pipe"
}

// checkDescriptors leaks a writable file in OutsideDir, OutsideDir itself,
// a socket and a pipe into the test process, without close-on-exec. The
// control, which passes on what os/exec passes on, must see each of them in
// the probe's /proc/self/fd and write through the file; the backend must
// see none of them and must not write through the file.
func checkDescriptors(t *testing.T, b Backend) {
	if b.OutsideDir == "" {
		t.Fatalf("%s: a claimed write boundary needs OutsideDir", b.Name)
	}
	target := path.Join(b.OutsideDir, "descriptor-"+token())
	if err := os.WriteFile(target, nil, 0o666); err != nil {
		t.Fatalf("%s: the descriptor probe opens a file in OutsideDir on this machine: %v", b.Name, err)
	}
	t.Cleanup(func() { os.Remove(target) })
	leaked, ok := leakDescriptors(t, target, b.OutsideDir)
	if !ok {
		return
	}
	present := func(d leakedDescriptor) string {
		return fmt.Sprintf("test -L /proc/self/fd/%d", d.fd)
	}
	file := leaked[0]
	write := func(tok string) string { return fmt.Sprintf("echo %s >> /proc/self/fd/%d", tok, file.fd) }

	// Positive control: every descriptor reaches an unconfined child, and
	// the file descriptor leads to the file outside.
	for _, d := range leaked {
		mustRun(t, b.Name+" control", b.Control, present(d))
	}
	ctl := "control-" + token()
	mustRun(t, b.Name+" control", b.Control, write(ctl))
	if got, _ := os.ReadFile(target); !strings.Contains(string(got), ctl) {
		t.Fatalf("%s: the control wrote through the %s descriptor, but %s holds %q", b.Name, file.kind, target, got)
	}

	for _, d := range leaked {
		refused(t, b, fmt.Sprintf("an inherited %s descriptor (fd %d) reached the process", d.kind, d.fd), present(d))
	}
	tok := "backend-" + token()
	refused(t, b, "write through an inherited file descriptor", write(tok))
	if got, _ := os.ReadFile(target); strings.Contains(string(got), tok) {
		t.Errorf("%s: the backend wrote to %s, outside its writable roots, through an inherited descriptor", b.Name, target)
	}
}
