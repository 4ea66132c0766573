package docker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	dockerctx "github.com/docker/cli/cli/context/docker"
	"github.com/docker/cli/cli/context/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// engineEnv clears every variable that chooses the Engine and points
// DOCKER_CONFIG at a fresh directory, which it returns.
func engineEnv(t *testing.T) string {
	dir := t.TempDir()
	for _, k := range []string{EnvHost, EnvContext, EnvTLSVerify, EnvTLS, EnvCertPath} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv(EnvConfig, dir)
	return dir
}

// writeContext stores a context the way `docker context create` does,
// through the docker CLI's own store.
func writeContext(t *testing.T, dir, name, host string, skipVerify bool, tlsFiles map[string][]byte) {
	s := store.New(filepath.Join(dir, "contexts"), store.NewConfig(
		func() any { return &map[string]any{} },
		store.EndpointTypeGetter(dockerctx.DockerEndpoint, func() any { return &dockerctx.EndpointMeta{} }),
	))
	require.NoError(t, s.CreateOrUpdate(store.Metadata{
		Name:      name,
		Metadata:  map[string]any{"Description": "test"},
		Endpoints: map[string]any{dockerctx.DockerEndpoint: dockerctx.EndpointMeta{Host: host, SkipTLSVerify: skipVerify}},
	}))
	if tlsFiles != nil {
		require.NoError(t, s.ResetEndpointTLSMaterial(name, dockerctx.DockerEndpoint, &store.EndpointTLSData{Files: tlsFiles}))
	}
}

func writeConfig(t *testing.T, dir, current string) {
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"currentContext": "`+current+`"}`), 0o600))
}

// testCA writes a self-signed CA and a client certificate into dir as
// ca.pem, cert.pem and key.pem.
func testCA(t *testing.T, dir string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "runbox test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), certPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
}

// The order is the docker CLI's: option context, option host, DOCKER_HOST,
// DOCKER_CONTEXT, currentContext, default socket.
func TestResolveEndpointPrecedence(t *testing.T) {
	type env struct{ host, context, current string }
	cases := []struct {
		name     string
		choice   engineChoice
		env      env
		wantHost string
		wantCtx  string
		wantSrc  string
	}{
		{"default socket", engineChoice{}, env{}, "unix:///var/run/docker.sock", DefaultContext, DefaultContext},
		{"current context", engineChoice{}, env{current: "cur"}, "tcp://cur.example:2375", "cur", ""},
		{"DOCKER_CONTEXT over currentContext", engineChoice{}, env{context: "envctx", current: "cur"}, "tcp://envctx.example:2375", "envctx", EnvContext},
		{"DOCKER_HOST over DOCKER_CONTEXT", engineChoice{}, env{host: "tcp://envhost.example:2375", context: "envctx", current: "cur"}, "tcp://envhost.example:2375", DefaultContext, EnvHost},
		{"host option over DOCKER_HOST", engineChoice{host: "tcp://opt.example:1"}, env{host: "tcp://envhost.example:2375", context: "envctx"}, "tcp://opt.example:1", DefaultContext, "option"},
		{"context option over everything", engineChoice{context: "optctx"}, env{host: "tcp://envhost.example:2375", context: "envctx", current: "cur"}, "tcp://optctx.example:2375", "optctx", "option"},
		{"explicit default context", engineChoice{context: DefaultContext}, env{host: "tcp://envhost.example:2375", current: "cur"}, "tcp://envhost.example:2375", DefaultContext, "option"},
		{"DOCKER_CONTEXT=default", engineChoice{}, env{context: DefaultContext, current: "cur"}, "unix:///var/run/docker.sock", DefaultContext, EnvContext},
		{"ssh context", engineChoice{context: "sshctx"}, env{}, "ssh://me@sshhost.example:2222", "sshctx", "option"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := engineEnv(t)
			for _, n := range []string{"cur", "envctx", "optctx"} {
				writeContext(t, dir, n, "tcp://"+n+".example:2375", false, nil)
			}
			writeContext(t, dir, "sshctx", "ssh://me@sshhost.example:2222", false, nil)
			if tc.env.host != "" {
				t.Setenv(EnvHost, tc.env.host)
			}
			if tc.env.context != "" {
				t.Setenv(EnvContext, tc.env.context)
			}
			if tc.env.current != "" {
				writeConfig(t, dir, tc.env.current)
			}
			ep, _, err := resolveEndpoint(tc.choice)
			require.NoError(t, err)
			assert.Equal(t, tc.wantHost, ep.Host)
			assert.Equal(t, tc.wantCtx, ep.Context)
			if tc.wantSrc == "" {
				tc.wantSrc = filepath.Join(dir, "config.json")
			}
			assert.Equal(t, tc.wantSrc, ep.Source)
			assert.False(t, ep.TLS)
		})
	}
}

func TestResolveEndpointErrors(t *testing.T) {
	dir := engineEnv(t)
	_, _, err := resolveEndpoint(engineChoice{host: "tcp://a:1", context: "b"})
	assert.ErrorContains(t, err, "conflicting")

	t.Setenv(EnvContext, "nosuch")
	_, _, err = resolveEndpoint(engineChoice{})
	require.Error(t, err)
	assert.ErrorContains(t, err, `"nosuch"`)
	assert.ErrorContains(t, err, EnvContext, "the error says where the name came from")

	os.Unsetenv(EnvContext)
	writeConfig(t, dir, "gone")
	_, _, err = resolveEndpoint(engineChoice{})
	assert.ErrorContains(t, err, `"gone"`)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte("{not json"), 0o600))
	_, _, err = resolveEndpoint(engineChoice{})
	assert.ErrorContains(t, err, "config.json", "a broken config is an error, not a silent fallback to another Engine")
}

// The TLS variables mean what they mean to docker, never less: TLS is on
// with DOCKER_TLS_VERIFY (verified) or DOCKER_TLS (unverified unless
// DOCKER_TLS_VERIFY too); DOCKER_CERT_PATH only says where the files are.
func TestResolveEndpointTLSEnv(t *testing.T) {
	t.Run("DOCKER_TLS_VERIFY without DOCKER_CERT_PATH uses the config directory", func(t *testing.T) {
		dir := engineEnv(t)
		testCA(t, dir)
		t.Setenv(EnvHost, "tcp://127.0.0.1:2376")
		t.Setenv(EnvTLSVerify, "1")
		ep, dep, err := resolveEndpoint(engineChoice{})
		require.NoError(t, err)
		assert.True(t, ep.TLS)
		assert.False(t, ep.SkipTLSVerify)
		require.NotNil(t, dep.TLSData)
		ca, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
		assert.Equal(t, ca, dep.TLSData.CA)
		tc, err := tlsConfig(dep)
		require.NoError(t, err)
		require.NotNil(t, tc)
		assert.False(t, tc.InsecureSkipVerify)
		assert.NotNil(t, tc.RootCAs)
		assert.Len(t, tc.Certificates, 1)
	})
	t.Run("DOCKER_TLS_VERIFY without any CA file fails", func(t *testing.T) {
		engineEnv(t)
		t.Setenv(EnvHost, "tcp://127.0.0.1:2376")
		t.Setenv(EnvTLSVerify, "1")
		_, _, err := resolveEndpoint(engineChoice{})
		assert.ErrorContains(t, err, "ca.pem")
	})
	t.Run("DOCKER_CERT_PATH alone is never unverified TLS", func(t *testing.T) {
		engineEnv(t)
		certs := t.TempDir()
		testCA(t, certs)
		t.Setenv(EnvHost, "tcp://127.0.0.1:2376")
		t.Setenv(EnvCertPath, certs)
		ep, dep, err := resolveEndpoint(engineChoice{})
		require.NoError(t, err)
		assert.False(t, ep.SkipTLSVerify)
		tc, err := tlsConfig(dep)
		require.NoError(t, err)
		if tc != nil {
			assert.False(t, tc.InsecureSkipVerify)
		}
		// As with docker: no TLS at all until DOCKER_TLS_VERIFY or DOCKER_TLS.
		assert.False(t, ep.TLS)
	})
	t.Run("DOCKER_CERT_PATH with DOCKER_TLS_VERIFY", func(t *testing.T) {
		engineEnv(t)
		certs := t.TempDir()
		testCA(t, certs)
		t.Setenv(EnvHost, "tcp://127.0.0.1:2376")
		t.Setenv(EnvCertPath, certs)
		t.Setenv(EnvTLSVerify, "1")
		ep, dep, err := resolveEndpoint(engineChoice{})
		require.NoError(t, err)
		assert.True(t, ep.TLS)
		assert.False(t, ep.SkipTLSVerify)
		tc, err := tlsConfig(dep)
		require.NoError(t, err)
		assert.False(t, tc.InsecureSkipVerify)
	})
	t.Run("DOCKER_TLS alone is docker's explicit unverified TLS", func(t *testing.T) {
		engineEnv(t)
		certs := t.TempDir()
		testCA(t, certs)
		t.Setenv(EnvHost, "tcp://127.0.0.1:2376")
		t.Setenv(EnvCertPath, certs)
		t.Setenv(EnvTLS, "1")
		ep, _, err := resolveEndpoint(engineChoice{})
		require.NoError(t, err)
		assert.True(t, ep.TLS)
		assert.True(t, ep.SkipTLSVerify)
	})
	t.Run("TLS without a host defaults to docker's TLS port", func(t *testing.T) {
		dir := engineEnv(t)
		testCA(t, dir)
		t.Setenv(EnvTLSVerify, "1")
		ep, _, err := resolveEndpoint(engineChoice{})
		require.NoError(t, err)
		assert.Equal(t, "tcp://localhost:2376", ep.Host)
	})
	t.Run("a context's TLS material, not the environment's", func(t *testing.T) {
		dir := engineEnv(t)
		certs := t.TempDir()
		testCA(t, certs)
		files := map[string][]byte{}
		for _, f := range []string{"ca.pem", "cert.pem", "key.pem"} {
			b, err := os.ReadFile(filepath.Join(certs, f))
			require.NoError(t, err)
			files[f] = b
		}
		writeContext(t, dir, "tlsctx", "tcp://127.0.0.1:2376", false, files)
		t.Setenv(EnvContext, "tlsctx")
		t.Setenv(EnvTLS, "1") // ignored for a named context, as by docker
		ep, dep, err := resolveEndpoint(engineChoice{})
		require.NoError(t, err)
		assert.True(t, ep.TLS)
		assert.False(t, ep.SkipTLSVerify)
		assert.Equal(t, files["ca.pem"], dep.TLSData.CA)
	})
}

func TestContexts(t *testing.T) {
	dir := engineEnv(t)
	names, err := Contexts()
	require.NoError(t, err)
	assert.Equal(t, []string{DefaultContext}, names, "no store: the default context only")

	writeContext(t, dir, "zeta", "tcp://zeta.example:2375", false, nil)
	writeContext(t, dir, "alpha", "ssh://me@alpha.example", false, nil)
	names, err = Contexts()
	require.NoError(t, err)
	assert.Equal(t, []string{DefaultContext, "alpha", "zeta"}, names)
}
