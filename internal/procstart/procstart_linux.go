package procstart

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc's tick counts (USER_HZ), 100 on every Linux
// architecture Go supports.
const userHZ = 100

func of(pid int) (Start, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Start{}, err
	}
	ticks, err := startTicks(b)
	if err != nil {
		return Start{}, fmt.Errorf("%w: /proc/%d/stat: %w", ErrUnknown, pid, err)
	}
	s := Start{ID: strconv.FormatUint(ticks, 10)}
	if boot, err := bootTime(); err == nil {
		s.Time = boot.Add(time.Duration(ticks) * (time.Second / userHZ))
	}
	return s, nil
}

// startTicks reads field 22 (starttime) of a /proc/PID/stat line. The
// second field, the command name in parentheses, may itself hold spaces
// and parentheses, so fields are counted after the last ")".
func startTicks(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name")
	}
	fields := strings.Fields(string(stat[i+1:]))
	const idx = 22 - 3 // fields[0] is field 3, the state
	if len(fields) <= idx {
		return 0, fmt.Errorf("%d fields after the command name", len(fields))
	}
	return strconv.ParseUint(fields[idx], 10, 64)
}

// bootTime is /proc/stat's btime.
func bootTime() (time.Time, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, err
			}
			return time.Unix(secs, 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("no btime in /proc/stat")
}
