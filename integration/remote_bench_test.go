//go:build linux

package integration

import (
	"os/exec"
	"testing"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// remoteBenchSession opens an agent session on the second Engine, reached
// over TLS through DOCKER_HOST and docker's TLS variables (which the docker
// CLI of the baselines reads too). Without a second Engine the benchmark is
// skipped, except under CI=true.
func remoteBenchSession(b *testing.B) (*docker.Executor, runbox.Session) {
	r := needRemote(b)
	b.Cleanup(func() { sweepRemote(b, r) })
	bin := runboxBinary(b)
	clearEngineEnv(b)
	b.Setenv(docker.EnvHost, r.tcp)
	b.Setenv(docker.EnvTLSVerify, "1")
	b.Setenv(docker.EnvCertPath, r.certs)
	e := newExecutor(b, docker.WithAgent(bin), docker.WithAgentRequired())
	spec := baseSpec()
	spec.Init = false // the agent is PID 1
	return e, open(b, e, spec)
}

// dockerExecTrue is `docker exec ID true`, as a user would type it.
func dockerExecTrue(b *testing.B, id string) {
	if out, err := exec.Command("docker", "exec", id, "true").CombinedOutput(); err != nil {
		b.Fatal(err, string(out))
	}
}

// BenchmarkRemoteRunTrue: Run(true) through the library against a TLS
// Engine, with the Executor (and so its connection to the agent) kept
// across calls, beside a raw Engine exec through the same client and
// `docker exec`.
func BenchmarkRemoteRunTrue(b *testing.B) {
	e, s := remoteBenchSession(b)
	benchRunTrue(b, e, s)
	b.Run("dockercli", func(b *testing.B) {
		for b.Loop() {
			dockerExecTrue(b, s.ID())
		}
	})
}

// BenchmarkRemoteCLIExecTrue: `runbox exec ID -- true` against a TLS
// Engine (a new process each time, so a new connection to the Engine and
// a new bridge to the agent) beside `docker exec ID true`.
func BenchmarkRemoteCLIExecTrue(b *testing.B) {
	_, s := remoteBenchSession(b)
	bin := runboxBinary(b)
	b.Run("runbox", func(b *testing.B) {
		for b.Loop() {
			if out, err := exec.Command(bin, "exec", s.ID(), "--", "true").CombinedOutput(); err != nil {
				b.Fatal(err, string(out))
			}
		}
	})
	b.Run("dockercli", func(b *testing.B) {
		for b.Loop() {
			dockerExecTrue(b, s.ID())
		}
	})
}
