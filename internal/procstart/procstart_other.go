//go:build !linux && !darwin && !windows

package procstart

import "fmt"

func of(pid int) (Start, error) {
	return Start{}, fmt.Errorf("%w on this platform", ErrUnknown)
}
