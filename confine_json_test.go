package runbox_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

func TestGuaranteesJSONRoundTrip(t *testing.T) {
	for _, g := range []runbox.Guarantees{
		{},
		{Level: runbox.GuaranteeLevelDegraded, WriteBoundary: true, Lifetime: runbox.LifetimeContainmentBestEffort},
		{
			Level: runbox.GuaranteeLevelFull, ProcessBoundary: true, WriteBoundary: true, ReadBoundary: true,
			EnvScrub: true, NetworkBoundary: true, ResourceLimits: true,
			Lifetime: runbox.LifetimeContainmentEnforced, Mechanisms: []string{"pid-ns", "landlock-abi-7"},
		},
		{Kernel: runbox.KernelGVisor, ReadOnlyRoot: true, NoNewPrivileges: true, Capabilities: []string{}, User: "0"},
		{Kernel: runbox.KernelHost, Capabilities: []string{"CHOWN", "KILL"}, User: "1000:1000"},
	} {
		b, err := json.Marshal(g)
		require.NoError(t, err)
		var back runbox.Guarantees
		require.NoError(t, json.Unmarshal(b, &back), string(b))
		assert.Equal(t, g, back, string(b))
	}
}

// A Go program reads `runbox host --json`'s report (its last stderr line)
// with the library's own types.
func TestGuaranteesFromHostReport(t *testing.T) {
	const line = `{"guarantees":{"level":"full","processBoundary":true,"writeBoundary":true,` +
		`"readBoundary":false,"envScrub":true,"networkBoundary":true,"resourceLimits":true,` +
		`"lifetime":"enforced","mechanisms":["user-ns","seccomp"],"someFutureKey":1},` +
		`"access":{"kind":"scoped-write","writePaths":["/work"]},"exitCode":0,"signal":""}`
	var report struct {
		Guarantees runbox.Guarantees `json:"guarantees"`
		ExitCode   int               `json:"exitCode"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &report))
	assert.Equal(t, runbox.Guarantees{
		Level: runbox.GuaranteeLevelFull, ProcessBoundary: true, WriteBoundary: true,
		EnvScrub: true, NetworkBoundary: true, ResourceLimits: true,
		Lifetime: runbox.LifetimeContainmentEnforced, Mechanisms: []string{"user-ns", "seccomp"},
	}, report.Guarantees)
}

func TestGuaranteeEnumsText(t *testing.T) {
	for _, l := range []runbox.GuaranteeLevel{runbox.GuaranteeLevelNone, runbox.GuaranteeLevelDegraded, runbox.GuaranteeLevelFull} {
		b, err := l.MarshalText()
		require.NoError(t, err)
		var back runbox.GuaranteeLevel
		require.NoError(t, back.UnmarshalText(b))
		assert.Equal(t, l, back)
	}
	for _, c := range []runbox.LifetimeContainment{runbox.LifetimeContainmentUnspecified, runbox.LifetimeContainmentBestEffort, runbox.LifetimeContainmentEnforced} {
		b, err := c.MarshalText()
		require.NoError(t, err)
		var back runbox.LifetimeContainment
		require.NoError(t, back.UnmarshalText(b))
		assert.Equal(t, c, back)
	}

	var g runbox.Guarantees
	assert.Error(t, json.Unmarshal([]byte(`{"level":"total"}`), &g), "an unknown level is an error")
	assert.Error(t, json.Unmarshal([]byte(`{"lifetime":"forever"}`), &g), "an unknown lifetime is an error")
	assert.Error(t, json.Unmarshal([]byte(`{"level":2}`), &g), "the level is a name, not a number")
}

// Unreported session fields stay out of the JSON; capabilities reported
// as none is an empty array, not an absent key.
func TestGuaranteesJSONSessionFields(t *testing.T) {
	b, err := json.Marshal(runbox.Guarantees{})
	require.NoError(t, err)
	assert.NotContains(t, string(b), "capabilities")
	assert.NotContains(t, string(b), "kernel")
	b, err = json.Marshal(runbox.Guarantees{Capabilities: []string{}, Kernel: runbox.KernelHost})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"capabilities":[]`)
	assert.Contains(t, string(b), `"kernel":"host"`)
}

func TestGuaranteesMissingSessionFields(t *testing.T) {
	g := runbox.Guarantees{Kernel: runbox.KernelHost, Capabilities: []string{"CHOWN", "KILL"}}
	assert.Equal(t, []string{"read-only root", "no new privileges", "kernel gvisor", "without capability KILL"},
		g.Missing(runbox.Guarantees{ReadOnlyRoot: true, NoNewPrivileges: true, Kernel: runbox.KernelGVisor, Capabilities: []string{"CHOWN"}}))
	assert.Empty(t, g.Missing(runbox.Guarantees{Kernel: runbox.KernelHost, Capabilities: []string{"CHOWN", "KILL", "MKNOD"}}))
	assert.Equal(t, []string{"capabilities reported"}, (runbox.Guarantees{}).Missing(runbox.Guarantees{Capabilities: []string{}}))
}
