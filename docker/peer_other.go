//go:build !linux

package docker

import (
	"errors"
	"net"
)

// peerVerifiable is false: elsewhere the Engine runs in a virtual machine,
// whose processes this host cannot name, so sessions use the keyed path.
const peerVerifiable = false

func peerPid(*net.UnixConn) (int, error) {
	return 0, errors.New("runbox/docker: peer credentials need Linux")
}
