// Package sandbox is the host backend's confinement: on Linux the stage-2
// helper that a confined launch re-executes the program as (namespaces, a
// private root, Landlock, seccomp, no inherited descriptors), the protocol
// between it and the executor, and prepared sandboxes that serve exactly
// one command; on macOS the Seatbelt profile (package seatbelt). The host
// package decides what to confine (its Policy) and reports what is
// enforced; this package only builds and enters the walls.
package sandbox

// Spec is one confined launch as the platform's sandbox needs it: on
// Linux it is handed to the stage-2 helper as JSON, on macOS it becomes a
// Seatbelt profile.
type Spec struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
	Dir  string   `json:"dir"`
	Env  []string `json:"env"`
	TTY  bool     `json:"tty"`
	// Writable are canonical roots bound read-write (the private HOME and
	// TMPDIR included).
	Writable []string `json:"writable"`
	// Visible are canonical paths bound read-only because the sandbox's
	// private directories (/tmp) would hide them: the working directory,
	// the program, readable roots.
	Visible []string `json:"visible"`
	// Readable are the only readable roots; nil means everything.
	Readable   []string `json:"readable"`
	Network    bool     `json:"network"`
	BroadWrite bool     `json:"broadWrite"`
	// Probe makes the helper set everything up and report what it
	// applied instead of running a command.
	Probe bool `json:"probe"`
	// Prepared makes the helper build the sandbox, report what it applied
	// (as a probe does) and then wait on ControlFD for the one command it
	// will run (see prepared_linux.go); a closed ControlFD ends it unused.
	Prepared  bool `json:"prepared,omitempty"`
	ControlFD int  `json:"controlFD,omitempty"`
	// Expect, when not nil, is exactly what the helper must apply (as it
	// reported at the probe); it refuses to run the command otherwise.
	Expect []string `json:"expect,omitempty"`
	// LimitFDs are cgroup v1 "tasks" files the helper's forking thread
	// joins before the command is forked; LimitNames says what each
	// enforces.
	LimitFDs   []int    `json:"limitFDs,omitempty"`
	LimitNames []string `json:"limitNames,omitempty"`
}
