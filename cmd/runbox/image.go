package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/moby/term"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// imageJSON is the documented, stable shape of `runbox image inspect --json`.
type imageJSON struct {
	ID           string `json:"id"`
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant,omitempty"`
}

func newImage() *cobra.Command {
	img := &cobra.Command{
		Use:   "image",
		Short: "Inspect and pull images",
	}
	img.AddCommand(newImageInspect(), newImagePull())
	return img
}

func newImageInspect() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect REF",
		Short: "Print the local identity of an image (ID and platform)",
		Long: `inspect prints the local image's ID and platform as "ID OS/ARCH[/VARIANT]",
or with --json as {"id","os","architecture","variant"}. An image that is not
present is an error (exit 125); an unreachable Engine is reported as such,
never as a missing image.`,
		Example: "  runbox image inspect busybox:latest\n  runbox image inspect --json busybox:latest | jq -r .id",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := newEngine()
			if err != nil {
				return err
			}
			defer e.Close()
			img, err := e.InspectImage(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printImage(cmd, img, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: {\"id\",\"os\",\"architecture\",\"variant\"}")
	return cmd
}

func printImage(cmd *cobra.Command, img runbox.Image, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		return enc.Encode(imageJSON{ID: img.ID, OS: img.OS, Architecture: img.Architecture, Variant: img.Variant})
	}
	p := img.OS + "/" + img.Architecture
	if img.Variant != "" {
		p += "/" + img.Variant
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", img.ID, p)
	return err
}

func newImagePull() *cobra.Command {
	var platform string
	var quiet, asJSON bool
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image for a platform, showing progress",
		Long: `pull fetches REF for --platform (the Engine's own when not given). Progress
goes to stderr: live bars on a terminal, plain lines otherwise, nothing with
--quiet. The pulled image's ID is printed on stdout. Errors the Engine
reports inside the progress stream (unknown tag, no such platform,
unauthorized) fail the command with exit status 125.`,
		Example: "  runbox image pull alpine:3.20\n  runbox image pull --platform linux/arm64/v8 --quiet alpine:3.20",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := runbox.PullOptions{Progress: os.Stderr}
			if quiet {
				opts.Progress = nil
			}
			if platform != "" {
				p, err := docker.ParsePlatform(platform)
				if err != nil {
					return err
				}
				opts.Platform = &p
			}
			e, err := newEngine()
			if err != nil {
				return err
			}
			defer e.Close()
			img, err := e.PullImage(cmd.Context(), args[0], opts)
			if err != nil {
				return fmt.Errorf("%w: %w", errPullFailed, err)
			}
			if asJSON {
				return printImage(cmd, img, true)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), img.ID)
			return err
		},
	}
	cmd.Flags().StringVar(&platform, "platform", "", "platform as OS/ARCH[/VARIANT], e.g. linux/arm64")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print no progress")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"id","os","architecture","variant"} instead of the ID`)
	return cmd
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, ok := term.GetFdInfo(f)
	return ok
}

// errPullFailed marks a failed pull made for --pull, so that its hint
// does not suggest pulling.
var errPullFailed = errors.New("pulling the image failed")

// Pull policies of open and run, as docker spells them.
const (
	pullMissing = "missing"
	pullAlways  = "always"
	pullNever   = "never"
)

// ensureImage makes ref present as --pull and --platform ask: "missing"
// pulls it when it is absent (or of another platform than --platform),
// "always" pulls it, "never" leaves it to open, which reports an absent
// image. Progress goes to stderr.
func ensureImage(ctx context.Context, e *docker.Executor, ref, policy, platform string, progress io.Writer) error {
	var want *ocispec.Platform
	if platform != "" {
		p, err := docker.ParsePlatform(platform)
		if err != nil {
			return err
		}
		want = &p
	}
	switch policy {
	case pullAlways:
	case pullMissing, pullNever:
		img, err := e.InspectImage(ctx, ref)
		switch {
		case err == nil && (want == nil || samePlatform(*want, img)):
			return nil
		case err == nil && policy == pullNever:
			return fmt.Errorf("%w: %s is %s, wanted %s (and --pull never)", runbox.ErrPlatformMismatch, ref, img.OS+"/"+img.Architecture, platform)
		case err != nil && (policy == pullNever || !errors.Is(err, runbox.ErrImageUnavailable)):
			return err
		}
	default:
		return fmt.Errorf("%w: --pull %q: want missing, always or never", runbox.ErrInvalidSpec, policy)
	}
	if _, err := e.PullImage(ctx, ref, runbox.PullOptions{Platform: want, Progress: progress}); err != nil {
		return fmt.Errorf("%w: %w", errPullFailed, err)
	}
	return nil
}

// samePlatform reports whether img is of the platform p (its variant only
// when both name one).
func samePlatform(p ocispec.Platform, img runbox.Image) bool {
	return strings.EqualFold(p.OS, img.OS) && strings.EqualFold(p.Architecture, img.Architecture) &&
		(p.Variant == "" || img.Variant == "" || p.Variant == img.Variant)
}
