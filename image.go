package runbox

import (
	"io"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Image is the resolved local identity of an image.
type Image struct {
	// ID is the content-addressed image ID ("sha256:...").
	ID string
	// OS is the operating system the image is built for, e.g. "linux".
	OS string
	// Architecture is the CPU architecture, e.g. "amd64".
	Architecture string
	// Variant is the CPU variant, e.g. "v8"; often empty.
	Variant string
}

// Platform returns the image's platform in image-spec form.
func (i Image) Platform() ocispec.Platform {
	return ocispec.Platform{OS: i.OS, Architecture: i.Architecture, Variant: i.Variant}
}

// PullOptions configures PullImage.
type PullOptions struct {
	// Platform selects the platform to pull; nil means the Engine's own.
	Platform *ocispec.Platform
	// Progress receives human-readable progress. It is rendered for a
	// terminal when it is one, as plain lines otherwise. nil discards it.
	Progress io.Writer
}

// SnapshotOptions configures Session.Snapshot.
type SnapshotOptions struct {
	// Reference optionally tags the new image ("name:tag").
	Reference string
	// Pause freezes the session's processes while the layer is captured.
	// It is off by default: capturing a running session is the caller's
	// explicit trade-off, never a silent pause.
	Pause bool
	// Comment and Author are recorded in the image metadata.
	Comment, Author string
	// Labels are added to the image. Labels runbox uses to find its own
	// sessions are never copied to a snapshot.
	Labels map[string]string
}
