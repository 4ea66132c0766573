//go:build !unix

package runboxtest

import "testing"

// leakDescriptors has nothing to do where os/exec hands a child only the
// handles it names (Windows): no descriptor is passed on by accident there.
func leakDescriptors(t *testing.T, _, _ string) ([]leakedDescriptor, bool) {
	t.Log("no inheritable descriptors on this platform")
	return nil, false
}
