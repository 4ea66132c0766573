package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// A prepared sandbox is a stage-2 helper that has built everything a
// confined command gets (namespaces, root, /proc, /dev, Landlock, seccomp,
// cgroup) before the command is known, and waits for exactly one command
// on a control socket. Most of a confined launch's cost is that set-up, so
// an executor keeps one ready (WithPreparedSandboxes) and a launch only
// sends its program, arguments, environment and stdio.
//
// Nothing is shared between commands: a prepared sandbox serves one
// command and ends with it, exactly as a cold one does. It waits with no
// descriptor of the caller's but its control socket and status pipe, and
// the restrictions are on its command thread before the command arrives.

// errNoCommand ends a prepared helper whose control socket closed without
// a command: the executor discarded it.
var errNoCommand = errors.New("the prepared sandbox was discarded")

// The control message: one byte, with the launch's spec (a sealed memory
// file) and the command's stdin, stdout and stderr as SCM_RIGHTS.
const (
	controlCommand = 'C'
	controlFiles   = 4
)

// awaitCommand (in the helper) waits for the command of a prepared
// sandbox and takes its program, arguments, directory, environment and
// what the executor expects to have been applied into conf; nothing that
// shapes the sandbox is taken from the message, since the sandbox is
// already built. It returns the command's stdio.
func awaitCommand(conf *Spec) ([]*os.File, error) {
	ctl := conf.ControlFD
	defer unix.Close(ctl)
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(controlFiles*4))
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(ctl, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("prepared sandbox: receive command: %w", err)
	}
	if n == 0 && oobn == 0 {
		return nil, errNoCommand
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if n != 1 || buf[0] != controlCommand || len(fds) != controlFiles {
		closeAll()
		return nil, fmt.Errorf("prepared sandbox: malformed command message (%d bytes, %d descriptors)", n, len(fds))
	}
	specF := os.NewFile(uintptr(fds[0]), "spec")
	var cmd Spec
	err = json.NewDecoder(specF).Decode(&cmd)
	specF.Close()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("prepared sandbox: read command: %w", err)
	}
	if cmd.Path == "" {
		closeAll()
		return nil, errHelperNoCommand
	}
	conf.Path, conf.Args, conf.Dir, conf.Env, conf.Expect = cmd.Path, cmd.Args, cmd.Dir, cmd.Env, cmd.Expect
	return []*os.File{
		os.NewFile(uintptr(fds[1]), "stdin"),
		os.NewFile(uintptr(fds[2]), "stdout"),
		os.NewFile(uintptr(fds[3]), "stderr"),
	}, nil
}

// SameSandbox reports whether a launch confined by c runs in exactly the
// sandbox built for s: the paths bound into it and the Landlock rules come
// from the launch's directory and program, the rest from the policy. A
// terminal is set up per command, so a launch with one never shares.
func (s *Spec) SameSandbox(c *Spec) bool {
	return !c.TTY && !s.TTY &&
		slices.Equal(c.Visible, s.Visible) &&
		(c.Readable == nil) == (s.Readable == nil) &&
		slices.Equal(c.Readable, s.Readable) &&
		slices.Equal(c.LimitNames, s.LimitNames)
}

// SendError reports that a prepared sandbox's helper was gone before it
// took the command: nothing of the command ran.
type SendError struct{ Err error }

// Error says that the send failed, and why.
func (e *SendError) Error() string { return "send command: " + e.Err.Error() }

// Unwrap returns the socket's error.
func (e *SendError) Unwrap() error { return e.Err }

// SendCommand hands a prepared sandbox the one command it will run: the
// program, arguments, directory, environment and expected mechanisms of
// conf, with the command's stdin, stdout and stderr (each an *os.File, or
// nil for the null device). It closes ctl, so that the sandbox can never
// take a second command. A *SendError means the helper never took it.
func SendCommand(ctl *os.File, conf *Spec, stdin, stdout, stderr any) error {
	defer ctl.Close()
	spec, err := SpecFile(conf)
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	defer spec.Close()
	fds := []int{int(spec.Fd())}
	var devNull *os.File
	for _, s := range []any{stdin, stdout, stderr} {
		f, ok := s.(*os.File)
		if !ok || f == nil {
			if s != nil {
				return fmt.Errorf("stdio of type %T", s)
			}
			if devNull == nil {
				if devNull, err = os.Open(os.DevNull); err != nil {
					return err
				}
				defer devNull.Close()
			}
			f = devNull
		}
		fds = append(fds, int(f.Fd()))
	}
	if err := unix.Sendmsg(int(ctl.Fd()), []byte{controlCommand}, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL); err != nil {
		return &SendError{Err: err}
	}
	return nil
}
