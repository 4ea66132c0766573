package host

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/cgroup"
)

// Resource limits are cgroup limits, in one of two places:
//
//   - cgroup v2, when the executor's cgroup root delegates the controllers
//     (its cgroup.subtree_control lists them): the limits are written into
//     every per-process cgroup, which holds the sandbox's init as well as
//     the command.
//   - cgroup v1, on hybrid hosts whose memory, pids and cpu controllers
//     live in v1 hierarchies: a group per launch in each, joined by the
//     helper's forking thread alone (v1 moves single threads through
//     "tasks"), so that the command is born inside and the helper is not.
//
// Anything else enforces nothing, and the report says so.

// cpuPeriod is the CFS period the CPU quota is a share of, in µs.
const cpuPeriod = 100000

// initTaskAllowance is added to a cgroup v2 pids limit for the sandbox's
// init, a Go program with a handful of threads that shares the group.
const initTaskAllowance = 16

// procSelfCgroup names the caller's cgroups; tests point it elsewhere to
// play a host without delegation.
var procSelfCgroup = "/proc/self/cgroup"

// limitPlan is how an executor enforces its policy's Resources.
type limitPlan struct {
	res runbox.Resources
	v2  bool
	v1  map[string]string // controller: the parent directory of the per-launch groups
}

// limitControllers returns the controllers res needs.
func limitControllers(res runbox.Resources) []string {
	var c []string
	if res.MemoryBytes > 0 {
		c = append(c, "memory")
	}
	if res.Pids > 0 {
		c = append(c, "pids")
	}
	if res.CPUs > 0 {
		c = append(c, "cpu")
	}
	return c
}

// planLimits finds where res can be enforced; nil when nowhere.
func (e *Executor) planLimits(res runbox.Resources) *limitPlan {
	need := limitControllers(res)
	if len(need) == 0 {
		return nil
	}
	if pool := e.sys.pool; pool != nil && !e.sys.broken.Load() && delegated(pool.Root(), need) {
		return &limitPlan{res: res, v2: true}
	}
	self, err := os.ReadFile(procSelfCgroup)
	if err != nil {
		return nil
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	plan := &limitPlan{res: res, v1: map[string]string{}}
	for _, c := range need {
		dir := cgroup.V1Dir(string(self), string(mountinfo), c)
		if dir == "" || unix.Access(dir, unix.W_OK) != nil {
			return nil
		}
		cgroup.SweepStale(dir)
		plan.v1[c] = dir
	}
	return plan
}

// delegated reports whether the children of root get every controller in
// need, enabling the missing ones where the kernel allows it (a root with
// no processes of its own, or the hierarchy's root).
func delegated(root string, need []string) bool {
	enabled := func() []string {
		b, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
		return strings.Fields(string(b))
	}
	have := enabled()
	for _, c := range need {
		if !slices.Contains(have, c) {
			_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+"+c), 0)
		}
	}
	have = enabled()
	for _, c := range need {
		if !slices.Contains(have, c) {
			return false
		}
	}
	return true
}

// mechanisms names what enforces the plan, for Guarantees.Mechanisms.
func (l *limitPlan) mechanisms() []string {
	v := "cgroup-v1-"
	if l.v2 {
		v = "cgroup-v2-"
	}
	var m []string
	for _, c := range limitControllers(l.res) {
		m = append(m, v+c)
	}
	return m
}

// v2Files are the limits of a per-process cgroup v2 group. Swap is not a
// way around the memory limit: memory.swap.max is written when the kernel
// has it.
func (l *limitPlan) v2Files() [][2]string {
	var f [][2]string
	if n := l.res.MemoryBytes; n > 0 {
		f = append(f, [2]string{"memory.max", strconv.FormatInt(n, 10)}, [2]string{"memory.swap.max", "0"})
	}
	if n := l.res.Pids; n > 0 {
		f = append(f, [2]string{"pids.max", strconv.FormatInt(n+initTaskAllowance, 10)})
	}
	if c := l.res.CPUs; c > 0 {
		f = append(f, [2]string{"cpu.max", fmt.Sprintf("%d %d", cpuQuota(c), cpuPeriod)})
	}
	return f
}

// v1Files are the limits of a per-launch cgroup v1 group of controller c.
// memory.memsw (memory plus swap) follows the memory limit where swap
// accounting exists.
func (l *limitPlan) v1Files(c string) [][2]string {
	switch c {
	case "memory":
		n := strconv.FormatInt(l.res.MemoryBytes, 10)
		return [][2]string{{"memory.limit_in_bytes", n}, {"memory.memsw.limit_in_bytes", n}}
	case "pids":
		return [][2]string{{"pids.max", strconv.FormatInt(l.res.Pids, 10)}}
	case "cpu":
		return [][2]string{{"cpu.cfs_period_us", strconv.Itoa(cpuPeriod)}, {"cpu.cfs_quota_us", strconv.FormatInt(cpuQuota(l.res.CPUs), 10)}}
	}
	return nil
}

// cpuQuota is the CFS quota for cpus CPUs; the kernel's minimum is 1 ms.
func cpuQuota(cpus float64) int64 {
	return max(int64(cpus*cpuPeriod), 1000)
}

// optionalLimitFiles may be missing without weakening a limit: they only
// close the swap side door, which a kernel without swap accounting does
// not have.
var optionalLimitFiles = []string{"memory.swap.max", "memory.memsw.limit_in_bytes"}

// writeLimits writes files into dir. It never creates one: a file the
// kernel does not offer is missing (ENOENT), not made.
func writeLimits(dir string, files [][2]string) error {
	for _, f := range files {
		err := writeExisting(filepath.Join(dir, f[0]), f[1])
		if err != nil && !(errors.Is(err, os.ErrNotExist) && slices.Contains(optionalLimitFiles, f[0])) {
			return fmt.Errorf("host: %s/%s: %w", dir, f[0], err)
		}
	}
	return nil
}

// writeExisting writes value to the existing file path.
func writeExisting(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	return errors.Join(err, f.Close())
}

// limitGroups are the cgroup v1 groups of one launch.
type limitGroups struct {
	dirs  []string
	tasks []*os.File // each group's "tasks", for the helper's forking thread
	names []string   // what joining each enforces, for Mechanisms
}

// newGroups creates the launch's v1 groups with their limits.
func (l *limitPlan) newGroups() (*limitGroups, error) {
	g := &limitGroups{}
	name := cgroup.Name()
	for _, c := range limitControllers(l.res) {
		dir := filepath.Join(l.v1[c], name)
		if err := unix.Mkdir(dir, 0o755); err != nil {
			g.remove()
			return nil, fmt.Errorf("host: %s cgroup: %w", c, err)
		}
		g.dirs = append(g.dirs, dir)
		if err := writeLimits(dir, l.v1Files(c)); err != nil {
			g.remove()
			return nil, err
		}
		f, err := os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			g.remove()
			return nil, fmt.Errorf("host: %s cgroup: %w", c, err)
		}
		g.tasks = append(g.tasks, f)
		g.names = append(g.names, "cgroup-v1-"+c)
	}
	return g, nil
}

// closeTasks closes the parent's copies once the helper holds its own.
func (g *limitGroups) closeTasks() {
	closeFiles(g.tasks...)
	g.tasks = nil
}

// remove deletes the groups, once every task in them has exited. A task
// leaves its group only when it is reaped, so EBUSY is retried briefly. A
// group already gone is no failure, so remove may run twice.
func (g *limitGroups) remove() error {
	g.closeTasks()
	var errs []error
	for _, d := range g.dirs {
		var err error
		for attempt := 0; attempt < 50; attempt++ {
			if err = unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
				err = nil
				break
			}
			if !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(time.Duration(attempt+1) * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("host: remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// limitCounters reads how often the limits in dir stopped something: OOM
// kills (memory) and refused forks (pids), in either cgroup version.
func limitCounters(dir string) map[string]int64 {
	count := func(file, key string) int64 {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return 0
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if v, ok := bytes.CutPrefix(line, []byte(key+" ")); ok {
				n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
				return n
			}
		}
		return 0
	}
	c := map[string]int64{}
	for _, f := range [][3]string{
		{"memory", "memory.events", "oom_kill"},
		{"memory", "memory.oom_control", "oom_kill"},
		{"pids", "pids.events", "max"},
	} {
		c[f[0]] += count(f[1], f[2])
	}
	return c
}

// hitSince names the limits whose counters grew between before and after.
func hitSince(before, after map[string]int64) []string {
	var hit []string
	for _, k := range []string{"memory", "pids"} {
		if after[k] > before[k] {
			hit = append(hit, k)
		}
	}
	return hit
}
