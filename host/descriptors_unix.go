//go:build unix

package host

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseInheritedOnExec marks every descriptor of the calling process above
// stderr close-on-exec, so that nothing the program starts afterwards
// inherits one by accident. Confined processes never need it: the sandbox
// passes on stdin, stdout and stderr only. An executor without a policy
// passes on what os/exec does, which includes any descriptor the program
// holds without close-on-exec (typically one its own parent left open), so
// a program that owns its process, such as a command-line tool, calls this
// once at start. It changes the whole process: a descriptor the program
// means to pass on implicitly must be passed explicitly afterwards
// (exec.Cmd.ExtraFiles). On Windows it does nothing: os/exec there hands
// a child only the handles it names.
func CloseInheritedOnExec() error {
	if closeRangeCloexec(3) == nil {
		return nil
	}
	fds, err := openDescriptors()
	if err != nil {
		return err
	}
	for _, fd := range fds {
		if fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

// openDescriptors lists the calling process's descriptors. The listing's
// own descriptor may be among them, closed by the time this returns.
func openDescriptors() ([]int, error) {
	ents, err := os.ReadDir(descriptorDir)
	if err != nil {
		return nil, err
	}
	fds := make([]int, 0, len(ents))
	for _, ent := range ents {
		if fd, err := strconv.Atoi(ent.Name()); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds, nil
}
