package procstart

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

func of(pid int) (Start, error) {
	k, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return Start{}, err
	}
	tv := k.Proc.P_starttime
	if k.Proc.P_pid != int32(pid) || (tv.Sec == 0 && tv.Usec == 0) {
		return Start{}, fmt.Errorf("procstart: no such process %d", pid)
	}
	return Start{ID: fmt.Sprintf("%d.%06d", tv.Sec, tv.Usec), Time: time.Unix(tv.Sec, int64(tv.Usec)*1000)}, nil
}
