package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/docker/go-units"
	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// inspectJSON is the documented, stable shape of `runbox inspect --json`.
type inspectJSON struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Image       string            `json:"image"`
	State       string            `json:"state"`
	Created     time.Time         `json:"created"`
	Owner       string            `json:"owner"`
	Lease       string            `json:"lease"` // a time to live, or "persistent"
	Process     []string          `json:"process"`
	User        string            `json:"user,omitempty"`
	Workdir     string            `json:"workdir,omitempty"`
	Network     string            `json:"network"`
	Runtime     string            `json:"runtime,omitempty"`
	Mounts      []mountJSON       `json:"mounts"`
	Limits      limitsJSON        `json:"limits"`
	Agent       agentJSON         `json:"agent"`
	Containment string            `json:"containment"` // what cancelling a command achieves
	Labels      map[string]string `json:"labels"`      // the caller's labels (runbox's own are the fields above)
	Guarantees  runbox.Guarantees `json:"guarantees"`  // what the session enforces, from the Engine's inspect
}

type mountJSON struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only"`
}

type limitsJSON struct {
	MemoryBytes int64   `json:"memory_bytes"` // 0: no limit
	CPUs        float64 `json:"cpus"`
	Pids        int64   `json:"pids"`
}

type agentJSON struct {
	Present bool   `json:"present"`
	Auth    string `json:"auth,omitempty"` // how the agent knows its caller
}

func newInspect() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect [flags] SESSION...",
		Short: "Show what a session is made of",
		Long: `inspect shows each SESSION (an ID, a unique ID prefix or a name) as the Engine
holds it: image, state, owner and lease, lifetime process, user, network,
runtime, mounts, limits, whether commands run through the runbox agent and
what cancelling a command achieves there, and the caller's labels.
--json prints an array of objects with the fields id, name, image, state,
created, owner, lease, process, user, workdir, network, runtime, mounts
(source, target, read_only), limits (memory_bytes, cpus, pids), agent
(present, auth), containment, labels and guarantees (what the session
enforces, read from the Engine: level, kernel, boundaries, readOnlyRoot,
noNewPrivileges, capabilities, user, as the library's runbox.Guarantees).`,
		Example: `  runbox inspect work
  runbox inspect --json $id | jq '.[0].limits'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := newEngine()
			if err != nil {
				return err
			}
			defer e.Close()
			var list []inspectJSON
			for _, ref := range args {
				info, err := e.Find(cmd.Context(), ref)
				if err != nil {
					return err
				}
				s, err := e.Session(cmd.Context(), info.ID)
				if err != nil {
					return err
				}
				v := inspectOf(info, s)
				if v.Guarantees, err = s.Guarantees(cmd.Context()); err != nil {
					return err
				}
				list = append(list, v)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(list)
			}
			for i, v := range list {
				if i > 0 {
					fmt.Fprintln(cmd.OutOrStdout())
				}
				if err := printInspect(cmd.OutOrStdout(), v); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (see the description for the fields)")
	return cmd
}

func inspectOf(info docker.SessionInfo, s *docker.Session) inspectJSON {
	spec := s.Spec()
	v := inspectJSON{
		ID: info.ID, Name: info.Name, Image: info.Image, State: info.State, Created: info.Created,
		Owner: info.Owner, Lease: info.Labels[docker.LabelLease], Process: spec.Process, User: spec.User, Workdir: spec.Dir,
		Network: string(spec.Network), Runtime: spec.Runtime, Mounts: []mountJSON{},
		Limits:      limitsJSON{MemoryBytes: spec.Resources.MemoryBytes, CPUs: spec.Resources.CPUs, Pids: spec.Resources.Pids},
		Agent:       agentJSON{Present: s.Agent()},
		Containment: s.LifetimeContainment().String(),
		Labels:      map[string]string{},
	}
	if v.Lease == "" {
		v.Lease = "persistent"
	}
	if s.Agent() {
		v.Agent.Auth = s.AgentAuth().String()
		// The agent runs the lifetime process it was given.
		var lifetime []string
		if json.Unmarshal([]byte(info.Labels[docker.LabelLifetime]), &lifetime) == nil {
			v.Process = lifetime
		}
	}
	for _, m := range spec.Mounts {
		v.Mounts = append(v.Mounts, mountJSON{m.Source, m.Target, m.ReadOnly})
	}
	for k, val := range info.Labels {
		if !runboxLabels[k] {
			v.Labels[k] = val
		}
	}
	return v
}

// runboxLabels are runbox's own labels, shown as inspect's fields (the
// agent key never).
var runboxLabels = map[string]bool{
	docker.LabelKind: true, docker.LabelOwner: true, docker.LabelCreated: true, docker.LabelLease: true,
	docker.LabelAgent: true, docker.LabelAgentKey: true, docker.LabelLifetime: true,
}

func printInspect(out io.Writer, v inspectJSON) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	none := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	agent := "no (plain Engine exec)"
	if v.Agent.Present {
		agent = "yes (" + v.Agent.Auth + ")"
	}
	limits := []string{}
	if v.Limits.MemoryBytes > 0 {
		limits = append(limits, "memory "+units.BytesSize(float64(v.Limits.MemoryBytes)))
	}
	if v.Limits.CPUs > 0 {
		limits = append(limits, fmt.Sprintf("cpus %g", v.Limits.CPUs))
	}
	if v.Limits.Pids > 0 {
		limits = append(limits, fmt.Sprintf("pids %d", v.Limits.Pids))
	}
	if len(limits) == 0 {
		limits = []string{"none"}
	}
	fmt.Fprintf(w, "ID:\t%s\n", v.ID)
	fmt.Fprintf(w, "Name:\t%s\n", none(v.Name))
	fmt.Fprintf(w, "Image:\t%s\n", v.Image)
	fmt.Fprintf(w, "State:\t%s (created %s, %s ago)\n", v.State, v.Created.Format(time.RFC3339), age(v.Created))
	fmt.Fprintf(w, "Owner:\t%s\n", none(v.Owner))
	fmt.Fprintf(w, "Lease:\t%s\n", v.Lease)
	fmt.Fprintf(w, "Process:\t%s\n", none(strings.Join(v.Process, " ")))
	fmt.Fprintf(w, "User:\t%s\n", none(v.User))
	fmt.Fprintf(w, "Workdir:\t%s\n", none(v.Workdir))
	fmt.Fprintf(w, "Network:\t%s\n", v.Network)
	fmt.Fprintf(w, "Runtime:\t%s\n", none(v.Runtime))
	fmt.Fprintf(w, "Limits:\t%s\n", strings.Join(limits, ", "))
	fmt.Fprintf(w, "Agent:\t%s\n", agent)
	fmt.Fprintf(w, "Containment:\t%s\n", v.Containment)
	fmt.Fprintf(w, "Guarantees:\t%s\n", guaranteesLine(v.Guarantees))
	for i, m := range v.Mounts {
		label := "Mounts:"
		if i > 0 {
			label = ""
		}
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		fmt.Fprintf(w, "%s\t%s:%s:%s\n", label, m.Source, m.Target, mode)
	}
	first := true
	for _, k := range sortedKeys(v.Labels) {
		label := ""
		if first {
			label, first = "Labels:", false
		}
		fmt.Fprintf(w, "%s\t%s=%s\n", label, k, v.Labels[k])
	}
	return w.Flush()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// guaranteesLine says in one line what a session enforces.
func guaranteesLine(g runbox.Guarantees) string {
	parts := []string{g.Level.String(), "kernel " + g.Kernel}
	for _, b := range []struct {
		on   bool
		name string
	}{
		{g.ProcessBoundary, "process boundary"}, {g.WriteBoundary, "write boundary"}, {g.ReadBoundary, "read boundary"},
		{g.NetworkBoundary, "no network"}, {g.EnvScrub, "env scrub"}, {g.ResourceLimits, "resource limits"},
		{g.ReadOnlyRoot, "read-only root"}, {g.NoNewPrivileges, "no new privileges"},
	} {
		if b.on {
			parts = append(parts, b.name)
		}
	}
	caps := "none"
	if len(g.Capabilities) > 0 {
		caps = strings.Join(g.Capabilities, ",")
	}
	parts = append(parts, "capabilities "+caps, "user "+g.User, "lifetime "+g.Lifetime.String())
	return strings.Join(parts, "; ")
}
