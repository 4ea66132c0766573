package host

import "slices"

// ProcessAccessKind classifies the write authority of a prepared process.
type ProcessAccessKind int

const (
	// ProcessAccessReadOnly may write nowhere.
	ProcessAccessReadOnly ProcessAccessKind = iota + 1
	// ProcessAccessScopedWrite may write only under its write paths.
	ProcessAccessScopedWrite
	// ProcessAccessBroadWrite may write wherever its user can.
	ProcessAccessBroadWrite
)

// String returns the kind's name.
func (k ProcessAccessKind) String() string {
	switch k {
	case ProcessAccessReadOnly:
		return "read-only"
	case ProcessAccessScopedWrite:
		return "scoped-write"
	case ProcessAccessBroadWrite:
		return "broad-write"
	}
	return "unknown"
}

// ProcessAccess is an immutable description of where a prepared process may
// write. It is fixed at preparation; later grants cannot widen it.
type ProcessAccess struct {
	kind  ProcessAccessKind
	paths []string
}

// newProcessAccess returns an access description. paths are canonical
// (absolute, symlink-resolved) write roots and are only kept for
// ProcessAccessScopedWrite.
func newProcessAccess(kind ProcessAccessKind, paths ...string) ProcessAccess {
	a := ProcessAccess{kind: kind}
	if kind == ProcessAccessScopedWrite {
		a.paths = slices.Clone(paths)
		slices.Sort(a.paths)
		a.paths = slices.Compact(a.paths)
	}
	return a
}

// Kind returns the access classification.
func (a ProcessAccess) Kind() ProcessAccessKind { return a.kind }

// WritePaths returns a copy of the canonical write roots.
func (a ProcessAccess) WritePaths() []string { return slices.Clone(a.paths) }
