package docker

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"time"
)

// sharesFilesystem decides from evidence whether the Engine behind the
// unix socket at path sees this process's filesystem, which bind mounts of
// host paths (the agent, its directory, mount sources) need. A unix socket
// alone proves nothing: a program in a container with the host's socket
// mounted talks to an Engine whose files are the host's. The kernel names
// the process that listens on the socket; when it is visible in this pid
// namespace and its root is the very mount that is this process's root,
// paths mean the same on both sides.
func sharesFilesystem(path string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return false
	}
	defer c.Close()
	pid, err := peerPid(c.(*net.UnixConn))
	if err != nil || pid <= 0 {
		return false // another pid namespace: a container, a VM
	}
	mine, err := rootMount("self")
	if err != nil {
		return false
	}
	theirs, err := rootMount(fmt.Sprint(pid))
	if err != nil {
		return false
	}
	return bytes.Equal(mine, theirs)
}

// rootMount returns the mount ID of the topmost mount at "/" as the
// process sees it (/proc/PID/mountinfo is readable without privilege).
// Mount IDs are unique system-wide, so equal IDs mean the same mount, not
// merely a similar one.
func rootMount(pid string) ([]byte, error) {
	b, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		return nil, err
	}
	var id []byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) > 4 && string(f[4]) == "/" {
			id = f[0]
		}
	}
	if id == nil {
		return nil, fmt.Errorf("no root mount in /proc/%s/mountinfo", pid)
	}
	return id, nil
}
