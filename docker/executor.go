// Package docker runs runbox sessions as Docker Engine containers.
//
// A session is one container made of exactly the caller's Spec: image,
// network policy (none unless asked), mounts, limits and lifetime process.
// Commands run in it through the Engine's exec API. See docs/docker.md for
// the guarantees this backend gives and those it cannot give.
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
	"github.com/moby/moby/client/pkg/jsonmessage"
	"github.com/moby/term"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/runbox-dev/runbox"
)

// Executor opens sessions on one Docker Engine. It is safe for concurrent
// use. Close it to release the Engine connection.
type Executor struct {
	cli          *client.Client
	ownsClient   bool
	defaultSpec  *runbox.Spec
	owner        string
	closeTimeout time.Duration
	raw          *http.Client // for the few endpoints whose client decoding loses information

	agentPath    string
	agentMode    agentMode
	agentTimeout time.Duration
	localEngine  bool          // the Engine shares this machine's filesystem (unix socket)
	termGrace    time.Duration // Terminate's grace period for streaming processes
	lease        time.Duration // agent sessions' time to live without renewal; 0: persistent
	reapOnce     sync.Once     // Reap at the first Open
	endpoint     Endpoint      // the Engine, as it was chosen
	runtimes     runtimeCache  // the Engine's OCI runtimes

	poolMu sync.Mutex
	pools  []*Pool // open pools, searched by Open
}

var _ runbox.Executor = (*Executor)(nil)

// Option configures New.
type Option func(*config) error

type config struct {
	choice       engineChoice
	cli          *client.Client
	defaultSpec  *runbox.Spec
	owner        string
	closeTimeout time.Duration
	agentPath    string
	agentMode    agentMode
	localEngine  *bool
	termGrace    time.Duration
	lease        time.Duration
}

// WithHost connects to the Engine at host (for example
// "unix:///var/run/docker.sock", "tcp://127.0.0.1:2376" or
// "ssh://user@host") instead of the one the environment names, as the
// docker CLI's --host does: the TLS variables still apply to it, and it
// cannot be combined with WithContext.
func WithHost(host string) Option {
	return func(c *config) error {
		c.choice.host = host
		return nil
	}
}

// WithClient uses an existing Engine client. The Executor does not close it.
func WithClient(cli *client.Client) Option {
	return func(c *config) error {
		if cli == nil {
			return errors.New("runbox/docker: WithClient: nil client")
		}
		c.cli = cli
		return nil
	}
}

// WithDefaultSpec sets the session Spec that Executor.Run uses for its
// one-shot sessions.
func WithDefaultSpec(spec runbox.Spec) Option {
	return func(c *config) error {
		if err := spec.Validate(); err != nil {
			return err
		}
		c.defaultSpec = &spec
		return nil
	}
}

// WithOwner overrides the owner recorded in the LabelOwner label
// (default "hostname/pid").
func WithOwner(owner string) Option {
	return func(c *config) error {
		c.owner = owner
		return nil
	}
}

// WithCloseTimeout bounds Session.Close, which runs on a context detached
// from the caller's so that it also works after cancellation. Default 30s.
func WithCloseTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("runbox/docker: WithCloseTimeout: %v is not positive", d)
		}
		c.closeTimeout = d
		return nil
	}
}

// WithTerminateGrace sets how long ProcessSignalTerminate waits before it
// kills a streaming process (default DefaultTerminateGrace).
func WithTerminateGrace(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("runbox/docker: WithTerminateGrace: %v is not positive", d)
		}
		c.termGrace = d
		return nil
	}
}

// WithRemoteEngine treats the Engine as remote even on a unix socket: the
// agent is copied into each session and reached through the Engine, and
// no host directory is bind-mounted.
func WithRemoteEngine() Option {
	return func(c *config) error {
		f := false
		c.localEngine = &f
		return nil
	}
}

// New returns an Executor for the Engine the docker CLI would use, unless
// options say otherwise: WithContext or WithHost, then DOCKER_HOST (with
// DOCKER_TLS_VERIFY, DOCKER_TLS and DOCKER_CERT_PATH), DOCKER_CONTEXT, the
// current context of the docker config ($DOCKER_CONFIG/config.json), then
// the default socket. Contexts and their TLS material are read from the
// docker CLI's store. The API version is negotiated with the Engine on
// first use (DOCKER_API_VERSION pins it); Engine API 1.41 and newer are
// supported.
func New(opts ...Option) (*Executor, error) {
	c := config{owner: defaultOwner(), closeTimeout: 30 * time.Second, termGrace: runbox.DefaultTerminateGrace, lease: DefaultLease}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	e := &Executor{
		cli:          c.cli,
		defaultSpec:  c.defaultSpec,
		owner:        c.owner,
		closeTimeout: c.closeTimeout,
		agentPath:    c.agentPath,
		agentMode:    c.agentMode,
		agentTimeout: 10 * time.Second,
		termGrace:    c.termGrace,
		lease:        c.lease,
	}
	if e.cli == nil {
		ep, dep, err := resolveEndpoint(c.choice)
		if err != nil {
			return nil, err
		}
		copts, err := clientOpts(ep, dep)
		if err != nil {
			return nil, err
		}
		cli, err := client.New(copts...)
		if err != nil {
			return nil, fmt.Errorf("runbox/docker: engine client for %s: %w", ep, err)
		}
		e.cli, e.ownsClient, e.endpoint = cli, true, ep
	} else {
		e.endpoint = Endpoint{Host: e.cli.DaemonHost(), Source: "option"}
	}
	// Local means: bind mounts reach the Engine's host and the kernel can
	// vouch for the agent's pid (see acceptAgent).
	if c.localEngine != nil {
		e.localEngine = *c.localEngine
	} else if sock, ok := strings.CutPrefix(e.cli.DaemonHost(), "unix://"); ok && peerVerifiable {
		e.localEngine = sharesFilesystem(sock)
	}
	dial := e.cli.Dialer()
	e.raw = &http.Client{Transport: &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConnsPerHost: 8,
	}}
	return e, nil
}

// Client returns the Engine client the Executor uses.
func (e *Executor) Client() *client.Client { return e.cli }

// Close closes the Executor's pools (removing their unused sessions) and
// releases the Engine connection (when New created it). Sessions still
// open stay open; close them first.
func (e *Executor) Close() error {
	err := e.closePools()
	e.raw.CloseIdleConnections()
	if e.ownsClient {
		return errors.Join(err, e.cli.Close())
	}
	return err
}

// imageIDPattern matches a full or short image ID, with or without the
// "sha256:" prefix.
var imageIDPattern = regexp.MustCompile(`^(sha256:)?[a-f0-9]{12,64}$`)

// validateImageRef accepts an image ID or a reference the Engine can parse.
func validateImageRef(ref string) error {
	if imageIDPattern.MatchString(ref) {
		return nil
	}
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		return fmt.Errorf("%w: image reference %q: %w", runbox.ErrInvalidSpec, ref, err)
	}
	return nil
}

// InspectImage returns the local identity of ref. An Engine "not found"
// answer wraps runbox.ErrImageUnavailable; any other failure (including an
// unreachable Engine) is returned as what it is.
func (e *Executor) InspectImage(ctx context.Context, ref string) (runbox.Image, error) {
	if err := validateImageRef(ref); err != nil {
		return runbox.Image{}, err
	}
	res, err := e.cli.ImageInspect(ctx, ref)
	if err != nil {
		return runbox.Image{}, e.classifyImageErr(ref, err)
	}
	return runbox.Image{
		ID:           res.ID,
		OS:           res.Os,
		Architecture: res.Architecture,
		Variant:      res.Variant,
	}, nil
}

// PullImage pulls ref for opts.Platform (the Engine's own platform when nil)
// and returns the pulled image. Progress is rendered to opts.Progress as the
// Engine reports it; an error inside the progress stream is returned as a
// *PullError. The pulled image's platform is checked against the requested
// one and a difference is runbox.ErrPlatformMismatch; ref then names what it
// named before the pull (nothing, or the previous image) again.
func (e *Executor) PullImage(ctx context.Context, ref string, opts runbox.PullOptions) (runbox.Image, error) {
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		return runbox.Image{}, fmt.Errorf("%w: image reference %q: %w", runbox.ErrInvalidSpec, ref, err)
	}
	var popts client.ImagePullOptions
	if opts.Platform != nil {
		if opts.Platform.OS == "" || opts.Platform.Architecture == "" {
			return runbox.Image{}, fmt.Errorf("%w: platform needs an OS and an architecture", runbox.ErrInvalidSpec)
		}
		popts.Platforms = []ocispec.Platform{*opts.Platform}
	}
	// What ref named before the pull, so that a pull of the wrong
	// platform can be undone.
	before, berr := e.InspectImage(ctx, ref)
	if berr != nil && !errors.Is(berr, runbox.ErrImageUnavailable) {
		return runbox.Image{}, berr
	}
	resp, err := e.cli.ImagePull(ctx, ref, popts)
	if err != nil {
		return runbox.Image{}, e.classifyPullErr(ref, err)
	}
	defer resp.Close()
	if err := renderPull(ctx, ref, resp, opts.Progress); err != nil {
		if pe := (*PullError)(nil); errors.As(err, &pe) {
			pe.Engine = e.endpoint.String()
		}
		return runbox.Image{}, err
	}
	img, err := e.InspectImage(ctx, ref)
	if err != nil {
		return runbox.Image{}, err
	}
	if p := opts.Platform; p != nil && !platformMatches(*p, img) {
		err := fmt.Errorf("%w: %s is %s, wanted %s", runbox.ErrPlatformMismatch, ref,
			formatPlatform(img.Platform()), formatPlatform(*p))
		if img.ID != before.ID {
			if uerr := e.undoPull(context.WithoutCancel(ctx), ref, img.ID, before.ID); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
		return img, err
	}
	return img, nil
}

// undoPull leaves ref as it was before a pull that brought an image of
// the wrong platform (pulled): naming the previous image again, or nothing
// when there was none, and removing the pulled image unless something else
// still names it.
func (e *Executor) undoPull(ctx context.Context, ref, pulled, previous string) error {
	if previous != "" {
		if _, err := e.cli.ImageTag(ctx, client.ImageTagOptions{Source: previous, Target: ref}); err != nil {
			return fmt.Errorf("%w: restoring %s after a pull of the wrong platform: %w", runbox.ErrCleanup, ref, e.engineErr(err))
		}
	} else if _, err := e.cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%w: removing %s, pulled for the wrong platform: %w", runbox.ErrCleanup, ref, e.engineErr(err))
	}
	// Still named by another reference, or used by a container: it stays.
	_, _ = e.cli.ImageRemove(ctx, pulled, client.ImageRemoveOptions{})
	return nil
}

// renderPull decodes every progress message, renders it, and turns the
// first error message into a *PullError. It reads the stream to its end so
// that no error is dropped.
func renderPull(ctx context.Context, ref string, resp client.ImagePullResponse, out io.Writer) error {
	isTerm := false
	var fd uintptr
	if out == nil {
		out = io.Discard
	} else {
		fd, isTerm = term.GetFdInfo(out)
	}
	var streamErr error
	msgs := func(yield func(jsonstream.Message, error) bool) {
		for m, err := range resp.JSONMessages(ctx) {
			if err != nil {
				streamErr = err
				return
			}
			if !yield(m, nil) {
				return
			}
		}
	}
	err := jsonmessage.DisplayJSONMessages(msgs, out, fd, isTerm, nil)
	if ctx.Err() != nil {
		return fmt.Errorf("runbox/docker: pull %s: %w: %w", ref, runbox.ErrCancelled, ctx.Err())
	}
	if streamErr != nil {
		return fmt.Errorf("runbox/docker: pull %s: %w: %w", ref, runbox.ErrTransport, streamErr)
	}
	if err != nil {
		var je *jsonstream.Error
		if errors.As(err, &je) {
			return &PullError{Ref: ref, Message: je.Message}
		}
		return &PullError{Ref: ref, Message: err.Error()}
	}
	return nil
}

// platformMatches compares OS and architecture, and the variant when both
// sides name one.
func platformMatches(want ocispec.Platform, img runbox.Image) bool {
	if !strings.EqualFold(want.OS, img.OS) || !strings.EqualFold(want.Architecture, img.Architecture) {
		return false
	}
	return want.Variant == "" || img.Variant == "" || want.Variant == img.Variant
}

func formatPlatform(p ocispec.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// ParsePlatform parses "os/arch[/variant]".
func ParsePlatform(s string) (ocispec.Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return ocispec.Platform{}, fmt.Errorf("%w: platform %q is not os/arch[/variant]", runbox.ErrInvalidSpec, s)
	}
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, " \t") {
			return ocispec.Platform{}, fmt.Errorf("%w: platform %q is not os/arch[/variant]", runbox.ErrInvalidSpec, s)
		}
	}
	p := ocispec.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// Run runs cmd in a one-shot session opened from the default Spec
// (WithDefaultSpec) and closes the session afterwards, whatever happened.
func (e *Executor) Run(ctx context.Context, cmd runbox.Command, streams runbox.Streams) (runbox.Result, error) {
	failed := runbox.Result{ExitCode: -1}
	if e.defaultSpec == nil {
		return failed, ErrNoDefaultSpec
	}
	if err := cmd.Validate(); err != nil {
		return failed, err
	}
	s, err := e.Open(ctx, *e.defaultSpec)
	if err != nil {
		return failed, err
	}
	res, runErr := s.Run(ctx, cmd, streams)
	if cerr := s.Close(ctx); cerr != nil {
		return failed, errors.Join(runErr, cerr)
	}
	return res, runErr
}
