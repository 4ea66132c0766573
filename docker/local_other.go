//go:build !linux

package docker

// sharesFilesystem is false: elsewhere the Engine runs in a virtual
// machine, whose paths are not this host's.
func sharesFilesystem(string) bool { return false }
