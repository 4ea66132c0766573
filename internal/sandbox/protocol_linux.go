package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox-dev/runbox/internal/reexec"
)

// The protocol between the executor and its stage-2 helper: the helper is
// started with ProcAttr and reexec.Env=Name, the spec (SpecFile) on fd 3,
// the write end of a status pipe on StatusFD, then cgroup v1 task files
// (Spec.LimitFDs) and, for a prepared sandbox, its control socket
// (Spec.ControlFD). It reports on the status pipe (ReadStatus).

// Name is the helper name [runbox.Init] dispatches to: a program
// started with reexec.Env set to it runs the stage-2 helper.
const Name = "host-sandbox"

func init() { reexec.Register(Name, stage2Main) }

// StartTimeout bounds how long Start waits for the helper to report
// that the command runs. Setting up takes milliseconds; this only catches a
// helper that hangs.
const StartTimeout = 30 * time.Second

// Status messages from the helper on its status descriptor (StatusFD):
// one byte of kind, a 4-byte big-endian length, the payload.
const (
	StatusRunning = 'R' // the command was executed
	StatusProbe   = 'P' // probe or prepared: payload is the JSON list of mechanisms
	StatusError   = 'E' // setup failed: payload is the message
	StatusExit    = 'X' // payload: 4-byte exit code
	StatusSignal  = 'S' // payload: 4-byte signal number
)

func writeStatus(w io.Writer, kind byte, payload []byte) error {
	b := make([]byte, 5+len(payload))
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:5], uint32(len(payload)))
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

// maxStatusPayload bounds a message so that a broken helper cannot make the
// parent allocate without limit.
const maxStatusPayload = 1 << 16

// ReadStatus reads one status message from the helper.
func ReadStatus(r io.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxStatusPayload {
		return 0, nil, fmt.Errorf("helper status of %d bytes", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	return h[0], p, nil
}

// ProcAttr starts the helper as the init of new user, mount, PID
// and IPC namespaces (and a network namespace unless the network is
// allowed), mapping the caller's uid and gid to root inside, which gives it
// the capabilities it needs there to build the sandbox, and nothing
// outside.
func ProcAttr(network bool, cgroupFD int) *syscall.SysProcAttr {
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC)
	if !network {
		flags |= unix.CLONE_NEWNET
	}
	a := &syscall.SysProcAttr{
		// The helper leads a session of its own; the command gets another
		// one (and the terminal) inside.
		Setsid:      true,
		Pdeathsig:   syscall.SIGKILL,
		Cloneflags:  flags,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	if cgroupFD >= 0 {
		a.UseCgroupFD = true
		a.CgroupFD = cgroupFD
	}
	return a
}

// SpecFile returns conf as JSON in a sealed memory file for the helper's
// descriptor (fd 3): no size limit, nothing on disk, nothing in the environment.
func SpecFile(conf *Spec) (*os.File, error) {
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("runbox-sandbox-spec", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "runbox-sandbox-spec")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	_, _ = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// errHelperNoCommand is reported when a helper spec has no program.
var errHelperNoCommand = errors.New("no program to run")
