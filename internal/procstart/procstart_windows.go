package procstart

import (
	"fmt"
	"time"

	"golang.org/x/sys/windows"
)

func of(pid int) (Start, error) {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return Start{}, err
	}
	defer windows.CloseHandle(h)
	var created, exited, kernel, user windows.Filetime
	if err := windows.GetProcessTimes(h, &created, &exited, &kernel, &user); err != nil {
		return Start{}, fmt.Errorf("%w: %w", ErrUnknown, err)
	}
	ft := uint64(created.HighDateTime)<<32 | uint64(created.LowDateTime)
	return Start{ID: fmt.Sprint(ft), Time: time.Unix(0, created.Nanoseconds())}, nil
}
