package docker

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerVerifiable says whether this platform can learn a unix socket
// peer's pid, which the local agent path needs.
const peerVerifiable = true

// peerPid returns the kernel's record of the pid at the other end of c,
// in this process's pid namespace.
func peerPid(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Pid), nil
}
