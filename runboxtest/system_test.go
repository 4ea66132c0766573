package runboxtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDecodeCapabilities(t *testing.T) {
	// The Engine's default set, as runc's containers show it in CapBnd.
	assert.Equal(t, []string{
		"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
		"NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
	}, decodeCapabilities(0xa80425fb))
	assert.Equal(t, []string{}, decodeCapabilities(0))
	assert.Equal(t, []string{"CAP_63", "CHOWN"}, decodeCapabilities(1|1<<63))
}
