//go:build linux

package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox/docker"
)

// clockTick is Linux's USER_HZ, the unit of /proc/PID/stat's CPU times.
const clockTick = 10 * time.Millisecond

// procCPU returns the user and system CPU time a process has used.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14 and stime 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err := strconv.Atoi(f[11])
	require.NoError(t, err)
	stime, err := strconv.Atoi(f[12])
	require.NoError(t, err)
	return time.Duration(utime+stime) * clockTick
}

func selfCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestAgentIdleCPU: idle sessions cost next to no CPU, in their agents
// and in the program that holds them (lease renewals): nothing polls. The
// measured quantity is CPU over a window of wall time, so this test waits
// out the window; the bound (5% of one CPU per session) only catches
// polling, which would take a whole CPU.
func TestAgentIdleCPU(t *testing.T) {
	const sessions = 4
	const window = 3 * time.Second
	e := agentExecutor(t, docker.WithLease(testLease)) // renewals every 667 ms
	var pids []int
	for range sessions {
		s := open(t, e, baseSpec())
		o := run(t, s, argv("true"))
		require.NoError(t, o.err)
		c, err := e.Client().ContainerInspect(context.Background(), s.ID(), client.ContainerInspectOptions{})
		require.NoError(t, err)
		pids = append(pids, c.Container.State.Pid)
	}
	before := make([]time.Duration, sessions)
	for i, pid := range pids {
		before[i] = procCPU(t, pid)
	}
	self := selfCPU(t)
	time.Sleep(window)
	selfUsed := selfCPU(t) - self
	var agents time.Duration
	for i, pid := range pids {
		used := procCPU(t, pid) - before[i]
		agents += used
		require.Less(t, used, window/20, "agent %d used %v of CPU in %v idle", pid, used, window)
	}
	t.Logf("%d idle sessions over %v: agents %v of CPU (%.3f%% of a CPU each), this program %v (%.3f%% of a CPU, lease renewals included)",
		sessions, window, agents, 100*agents.Seconds()/window.Seconds()/sessions, selfUsed, 100*selfUsed.Seconds()/window.Seconds())
}
