package docker

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
)

// runtimeInfo is what runbox knows of one of the Engine's OCI runtimes.
type runtimeInfo struct {
	name   string
	path   string
	args   []string
	kernel string // runbox.KernelHost, runbox.KernelGVisor, or "" (unknown)
}

// runtimeCache holds the Engine's runtimes, asked for once per Executor and
// again whenever a name is missing (a reload may have added it).
type runtimeCache struct {
	mu       sync.Mutex
	known    map[string]system.RuntimeWithStatus
	fallback string // the Engine's default runtime
}

// runtime resolves name ("" for the Engine's default) against the Engine's
// runtimes. A name the Engine does not know wraps runbox.ErrInvalidSpec and
// lists the runtimes it does know.
func (e *Executor) runtime(ctx context.Context, name string) (runtimeInfo, error) {
	c := &e.runtimes
	c.mu.Lock()
	defer c.mu.Unlock()
	lookup := func() (runtimeInfo, bool) {
		n := name
		if n == "" {
			n = c.fallback
		}
		rt, ok := c.known[n]
		if !ok && n == "" {
			// An Engine that names no default runs runc.
			return runtimeInfo{name: "runc", path: "runc", kernel: runbox.KernelHost}, true
		}
		return runtimeInfo{name: n, path: rt.Path, args: rt.Args, kernel: kernelOf(n, rt.Runtime)}, ok
	}
	if c.known != nil {
		if rt, ok := lookup(); ok {
			return rt, nil
		}
	}
	res, err := e.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return runtimeInfo{}, fmt.Errorf("runbox/docker: asking the Engine for its runtimes: %w", e.engineErr(err))
	}
	c.known, c.fallback = res.Info.Runtimes, res.Info.DefaultRuntime
	if rt, ok := lookup(); ok {
		return rt, nil
	}
	names := make([]string, 0, len(c.known))
	for n := range c.known {
		names = append(names, n)
	}
	sort.Strings(names)
	return runtimeInfo{}, fmt.Errorf("%w: unknown runtime %q: the Engine knows %s", runbox.ErrInvalidSpec, name, strings.Join(names, ", "))
}

// kernelOf tells which kernel a runtime's containers run on, from the
// program the Engine starts for it: runc and crun put them on the host's
// kernel, runsc on gVisor's. Anything else is not guessed.
func kernelOf(name string, rt system.Runtime) string {
	switch path.Base(rt.Path) {
	case "runsc":
		return runbox.KernelGVisor
	case "runc", "crun":
		return runbox.KernelHost
	}
	if rt.Path == "" && rt.Type == "" && (name == "runc" || name == "crun") {
		return runbox.KernelHost
	}
	if rt.Type == "io.containerd.runc.v2" || rt.Type == "io.containerd.runc.v1" {
		return runbox.KernelHost
	}
	if strings.Contains(rt.Type, "runsc") {
		return runbox.KernelGVisor
	}
	return ""
}

// defaultCapabilities is the capability set the Engine gives a container
// that drops and adds nothing (unchanged from Engine 1.x through 28).
var defaultCapabilities = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
	"NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}

// capabilities computes a container's bounding set from what the Engine
// reports it was created with: the default set, minus CapDrop, plus CapAdd.
// gVisor withholds NET_RAW unless runsc runs with --net-raw.
func capabilities(capAdd, capDrop []string, privileged bool, rt runtimeInfo) []string {
	if privileged {
		return []string{"ALL"}
	}
	set := map[string]bool{}
	for _, c := range defaultCapabilities {
		set[c] = true
	}
	for _, c := range capDrop {
		if c = runbox.CapabilityName(c); c == "ALL" {
			clear(set)
		} else {
			delete(set, c)
		}
	}
	for _, c := range capAdd {
		set[runbox.CapabilityName(c)] = true
	}
	if rt.kernel == runbox.KernelGVisor && !slices.Contains(rt.args, "--net-raw") && !slices.Contains(rt.args, "--net-raw=true") {
		delete(set, "NET_RAW")
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}
