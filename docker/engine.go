package docker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	dockerconfig "github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/connhelper"
	dcontext "github.com/docker/cli/cli/context"
	dockerctx "github.com/docker/cli/cli/context/docker"
	"github.com/docker/cli/cli/context/store"
	"github.com/docker/cli/opts"
	"github.com/docker/go-connections/tlsconfig"
	"github.com/moby/moby/client"
)

// The environment variables that choose the Engine, as the docker CLI
// reads them.
const (
	EnvHost      = "DOCKER_HOST"
	EnvContext   = "DOCKER_CONTEXT"
	EnvConfig    = "DOCKER_CONFIG"
	EnvTLSVerify = "DOCKER_TLS_VERIFY"
	EnvTLS       = "DOCKER_TLS"
	EnvCertPath  = "DOCKER_CERT_PATH"
)

// DefaultContext is the name of the docker CLI's implicit context: the
// Engine named by --host, DOCKER_HOST and the TLS variables, or the
// default socket.
const DefaultContext = "default"

// ErrEngineTLS reports that the TLS handshake with the Engine failed (an
// untrusted or mismatched certificate, a refused client certificate, or an
// Engine that does not speak TLS). It comes with runbox.ErrTransport.
var ErrEngineTLS = errors.New("TLS handshake with the Engine failed")

// Endpoint is the Engine an Executor talks to and how it was chosen.
type Endpoint struct {
	// Host is the Engine's address: unix://, tcp://, ssh:// or npipe://.
	Host string
	// Context is the docker context the endpoint came from;
	// DefaultContext when it came from WithHost, DOCKER_HOST or the
	// default socket.
	Context string
	// Source says what chose the context: "option", "DOCKER_HOST",
	// "DOCKER_CONTEXT", the config file's path, or "default".
	Source string
	// TLS says whether the connection uses TLS.
	TLS bool
	// SkipTLSVerify says that the Engine's certificate is not verified,
	// which happens only when the user asked for it as docker lets them
	// (DOCKER_TLS without DOCKER_TLS_VERIFY, or a context created with
	// skip-tls-verify).
	SkipTLSVerify bool
}

// String names the endpoint in messages: its host, and its context when
// one was chosen.
func (ep Endpoint) String() string {
	if ep.Context == "" || ep.Context == DefaultContext {
		return ep.Host
	}
	return fmt.Sprintf("%s (context %s)", ep.Host, ep.Context)
}

// engineChoice is what the caller asked for, before resolution.
type engineChoice struct {
	host    string // WithHost, the CLI's --host
	context string // WithContext, the CLI's --context
}

// WithContext connects to the Engine of the docker context name, read
// from the docker CLI's context store ($DOCKER_CONFIG/contexts). It
// overrides DOCKER_HOST and DOCKER_CONTEXT, as docker's --context does;
// it cannot be combined with WithHost.
func WithContext(name string) Option {
	return func(c *config) error {
		c.choice.context = name
		return nil
	}
}

// resolveEndpoint chooses the Engine as the docker CLI does: an explicit
// context, then an explicit host, DOCKER_HOST, DOCKER_CONTEXT, the config
// file's currentContext, then the default socket.
func resolveEndpoint(choice engineChoice) (Endpoint, dockerctx.Endpoint, error) {
	if choice.host != "" && choice.context != "" {
		return Endpoint{}, dockerctx.Endpoint{}, errors.New("runbox/docker: conflicting options: a host and a context cannot both be given")
	}
	dir := configDir()
	name, source := choice.context, "option"
	switch {
	case name != "":
	case choice.host != "":
		name = DefaultContext
	case os.Getenv(EnvHost) != "":
		name, source = DefaultContext, EnvHost
	case os.Getenv(EnvContext) != "":
		name, source = os.Getenv(EnvContext), EnvContext
	default:
		cf, err := dockerconfig.Load(dir)
		if err != nil {
			return Endpoint{}, dockerctx.Endpoint{}, fmt.Errorf("runbox/docker: docker config: %w", err)
		}
		name, source = cf.CurrentContext, cf.Filename
		if name == "" {
			name, source = DefaultContext, DefaultContext
		}
	}
	var dep dockerctx.Endpoint
	var err error
	if name == DefaultContext {
		dep, err = defaultEndpoint(choice.host, dir)
	} else {
		dep, err = contextEndpoint(dir, name)
	}
	if err != nil {
		return Endpoint{}, dockerctx.Endpoint{}, fmt.Errorf("runbox/docker: docker context %q (from %s): %w", name, source, err)
	}
	ep := Endpoint{Host: dep.Host, Context: name, Source: source, SkipTLSVerify: dep.SkipTLSVerify}
	ep.TLS = !isSocket(dep.Host) && !strings.HasPrefix(dep.Host, "ssh://") && (dep.TLSData != nil || dep.SkipTLSVerify)
	if !ep.TLS {
		ep.SkipTLSVerify = false
	}
	return ep, dep, nil
}

// configDir is the docker CLI's configuration directory: $DOCKER_CONFIG,
// else ~/.docker. (The CLI's own config.Dir caches its answer for the
// process's lifetime.)
func configDir() string {
	if d := os.Getenv(EnvConfig); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".docker"
	}
	return filepath.Join(home, ".docker")
}

// defaultEndpoint is the docker CLI's default context: host (or
// DOCKER_HOST, or the default socket) with the TLS variables' meaning:
// DOCKER_TLS_VERIFY turns TLS with verification on, DOCKER_TLS turns TLS
// on without verification unless DOCKER_TLS_VERIFY is also set, and
// DOCKER_CERT_PATH (default: the config directory) only says where
// ca.pem, cert.pem and key.pem are. Without either variable there is no
// TLS, whatever DOCKER_CERT_PATH says.
func defaultEndpoint(host, dir string) (dockerctx.Endpoint, error) {
	verify := os.Getenv(EnvTLSVerify) != ""
	useTLS := verify || os.Getenv(EnvTLS) != ""
	if host == "" {
		host = os.Getenv(EnvHost)
	}
	h, err := opts.ParseHost(useTLS, host)
	if err != nil {
		return dockerctx.Endpoint{}, err
	}
	ep := dockerctx.Endpoint{EndpointMeta: dockerctx.EndpointMeta{Host: h}}
	if !useTLS {
		return ep, nil
	}
	certs := os.Getenv(EnvCertPath)
	if certs == "" {
		certs = dir
	}
	ca, cert, key := filepath.Join(certs, "ca.pem"), filepath.Join(certs, "cert.pem"), filepath.Join(certs, "key.pem")
	// Like docker: a missing client certificate or key means none is
	// presented; a missing CA is an error.
	if _, err := os.Stat(cert); errors.Is(err, os.ErrNotExist) {
		cert = ""
	}
	if _, err := os.Stat(key); errors.Is(err, os.ErrNotExist) {
		key = ""
	}
	ep.TLSData, err = dcontext.TLSDataFromFiles(ca, cert, key)
	if err != nil {
		return dockerctx.Endpoint{}, err
	}
	ep.SkipTLSVerify = !verify
	return ep, nil
}

// contextEndpoint reads a named context's Engine endpoint and TLS
// material from the docker CLI's store.
func contextEndpoint(dir, name string) (dockerctx.Endpoint, error) {
	s := contextStore(dir)
	meta, err := s.GetMetadata(name)
	if err != nil {
		return dockerctx.Endpoint{}, err
	}
	epMeta, err := dockerctx.EndpointFromContext(meta)
	if err != nil {
		return dockerctx.Endpoint{}, err
	}
	if epMeta.Host == "" {
		return dockerctx.Endpoint{}, errors.New("the context has no Engine host")
	}
	return dockerctx.WithTLSData(s, name, epMeta)
}

// Contexts returns the names of the docker contexts a caller can choose
// with WithContext: DefaultContext first (the Engine of DOCKER_HOST, the
// TLS variables or the default socket), then the contexts of the docker
// CLI's store ($DOCKER_CONFIG/contexts) in name order. It reads the store
// only and connects to no Engine, so one Executor per name reaches every
// Engine the user has set up.
func Contexts() ([]string, error) {
	names, err := store.Names(contextStore(configDir()))
	if err != nil {
		return nil, fmt.Errorf("runbox/docker: docker contexts: %w", err)
	}
	slices.Sort(names)
	return append([]string{DefaultContext}, slices.DeleteFunc(names, func(n string) bool { return n == DefaultContext })...), nil
}

// contextStore opens the docker CLI's context store under dir.
func contextStore(dir string) *store.ContextStore {
	return store.New(filepath.Join(dir, "contexts"), store.NewConfig(
		func() any { return &map[string]any{} },
		store.EndpointTypeGetter(dockerctx.DockerEndpoint, func() any { return &dockerctx.EndpointMeta{} }),
	))
}

// isSocket says whether addr is a local socket, which needs no TLS.
func isSocket(addr string) bool {
	switch proto, _, _ := strings.Cut(addr, "://"); proto {
	case "unix", "npipe", "fd":
		return true
	}
	return false
}

// tlsConfig builds the client TLS configuration from the endpoint's
// material, as docker does (nil when the endpoint has none).
func tlsConfig(ep dockerctx.Endpoint) (*tls.Config, error) {
	if ep.TLSData == nil && !ep.SkipTLSVerify {
		return nil, nil
	}
	var o []func(*tls.Config)
	if ep.TLSData != nil && ep.TLSData.CA != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ep.TLSData.CA) {
			return nil, errors.New("the CA certificate (ca.pem) holds no certificate")
		}
		o = append(o, func(c *tls.Config) { c.RootCAs = pool })
	}
	if ep.TLSData != nil && ep.TLSData.Key != nil && ep.TLSData.Cert != nil {
		if b, _ := pem.Decode(ep.TLSData.Key); b == nil {
			return nil, errors.New("no valid private key in key.pem")
		}
		pair, err := tls.X509KeyPair(ep.TLSData.Cert, ep.TLSData.Key)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		o = append(o, func(c *tls.Config) { c.Certificates = []tls.Certificate{pair} })
	}
	if ep.SkipTLSVerify {
		o = append(o, func(c *tls.Config) { c.InsecureSkipVerify = true })
	}
	return tlsconfig.ClientDefault(o...), nil
}

// engineDialer returns the one function every connection to the Engine
// goes through (API calls, hijacked streams, the raw client): a socket, a
// TCP connection with TLS done here, or an ssh connection helper running
// `docker system dial-stdio` on the Engine's host. Its errors name the
// endpoint; a TLS failure wraps ErrEngineTLS.
func engineDialer(ep Endpoint, dep dockerctx.Endpoint) (func(ctx context.Context) (net.Conn, error), string, error) {
	wrap := func(err error) error {
		return &engineConnError{endpoint: ep.String(), err: err}
	}
	if strings.HasPrefix(dep.Host, "ssh://") {
		helper, err := connhelper.GetConnectionHelper(dep.Host)
		if err != nil {
			return nil, "", fmt.Errorf("runbox/docker: engine %s: %w", ep, err)
		}
		return func(ctx context.Context) (net.Conn, error) {
			c, err := helper.Dialer(ctx, "tcp", "")
			if err != nil {
				return nil, wrap(err)
			}
			return &helperConn{Conn: c, wrap: wrap}, nil
		}, helper.Host, nil
	}
	proto, addr, ok := strings.Cut(dep.Host, "://")
	if !ok {
		return nil, "", fmt.Errorf("runbox/docker: engine %s: not a URL", ep)
	}
	tc, err := tlsConfig(dep)
	if err != nil {
		return nil, "", fmt.Errorf("runbox/docker: engine %s: TLS material: %w", ep, err)
	}
	switch proto {
	case "npipe":
		// The client's own dialer knows named pipes.
		return nil, dep.Host, nil
	case "unix", "tcp":
	default:
		return nil, "", fmt.Errorf("runbox/docker: engine %s: unsupported protocol %q", ep, proto)
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	serverName, _, _ := net.SplitHostPort(addr)
	return func(ctx context.Context) (net.Conn, error) {
		raw, err := d.DialContext(ctx, proto, addr)
		if err != nil {
			return nil, wrap(err)
		}
		if tc == nil {
			return raw, nil
		}
		cfg := tc.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName = serverName
		}
		c := tls.Client(raw, cfg)
		if err := c.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, wrap(fmt.Errorf("%w: %w", ErrEngineTLS, err))
		}
		return c, nil
	}, dep.Host, nil
}

// engineConnError is a failure to connect to the Engine; its message
// names the endpoint.
type engineConnError struct {
	endpoint string
	err      error
}

func (e *engineConnError) Error() string {
	return fmt.Sprintf("engine %s: %v", e.endpoint, e.err)
}

func (e *engineConnError) Unwrap() error { return e.err }

// helperConn names the endpoint in a connection helper's read failures
// (ssh's own message, for one), which arrive on the first read rather than
// at dial time.
type helperConn struct {
	net.Conn
	wrap func(error) error
}

func (c *helperConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		err = c.wrap(err)
	}
	return n, err
}

// CloseWrite half-closes the helper's stream, which hijacked exec
// streams need to deliver stdin's end.
func (c *helperConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// clientOpts are the Engine client's options for the endpoint.
func clientOpts(ep Endpoint, dep dockerctx.Endpoint) ([]client.Opt, error) {
	dial, host, err := engineDialer(ep, dep)
	if err != nil {
		return nil, err
	}
	out := []client.Opt{client.WithHost(host), client.WithAPIVersionFromEnv()}
	if dial != nil {
		// TLS or ssh happen inside the dialer, so the client speaks plain
		// HTTP over it (hijacked streams too) and never uses a proxy, as
		// docker does.
		dc := func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }
		out = append(out,
			client.WithHTTPClient(&http.Client{Transport: &http.Transport{DialContext: dc}, CheckRedirect: client.CheckRedirect}),
			client.WithDialContext(dc))
	}
	return out, nil
}

// EngineInfo describes the Engine in use.
type EngineInfo struct {
	Endpoint Endpoint
	// Local says whether the Engine shares this program's filesystem, so
	// that mount sources are checked here and the agent is bound in.
	Local bool
	// ServerVersion is the Engine's version; APIVersion the API version
	// this client negotiated with it.
	ServerVersion string
	APIVersion    string
	OS            string
	Arch          string
}

// Endpoint returns the Engine the Executor talks to, as it was chosen
// (no round trip).
func (e *Executor) Endpoint() Endpoint { return e.endpoint }

// Engine asks the Engine for its version and reports it with the endpoint.
func (e *Executor) Engine(ctx context.Context) (EngineInfo, error) {
	info := EngineInfo{Endpoint: e.endpoint, Local: e.localEngine}
	v, err := e.cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return info, e.engineErr(err)
	}
	info.ServerVersion, info.OS, info.Arch = v.Version, v.Os, v.Arch
	info.APIVersion = e.cli.ClientVersion()
	return info, nil
}
