// Package testimage builds a tiny local image around a static busybox, so
// that tests and the demo need neither a registry nor a network. The image
// is imported through the Engine API (ImageImport).
package testimage

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/moby/moby/client"
)

// EnvBusybox names a static busybox binary to use instead of the system's.
const EnvBusybox = "RUNBOX_BUSYBOX"

// ImageEnv is an environment entry the image itself defines; tests use it to
// see whether the image's environment reaches a command.
const ImageEnv = "RUNBOX_FROM_IMAGE=1"

// Busybox returns the path of a static busybox: $RUNBOX_BUSYBOX, or the one
// Debian's busybox-static package installs.
func Busybox() (string, error) {
	candidates := []string{"/bin/busybox", "/usr/bin/busybox"}
	if p := os.Getenv(EnvBusybox); p != "" {
		candidates = []string{p}
	}
	var errs []error
	for _, p := range candidates {
		if err := checkStatic(p); err != nil {
			errs = append(errs, err)
			continue
		}
		return p, nil
	}
	return "", fmt.Errorf("no static busybox found (install busybox-static or set %s): %w", EnvBusybox, errors.Join(errs...))
}

// checkStatic accepts an ELF executable without a program interpreter: it
// runs in an image that has no libc.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", path)
		}
	}
	return nil
}

// Tar returns a root filesystem: /bin/busybox, a /bin symlink for every
// applet it has, and an empty world-writable /tmp.
func Tar(busybox string) ([]byte, error) {
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", busybox, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := []struct {
		name string
		mode int64
	}{{"bin/", 0o755}, {"tmp/", 0o1777}, {"etc/", 0o755}, {"root/", 0o700}}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777}); err != nil {
			return nil, err
		}
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644, Size: int64(len(passwd))}); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(tw, passwd); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Import builds the busybox image and imports it under ref with labels.
// It returns the image ID.
func Import(ctx context.Context, cli *client.Client, ref string, labels map[string]string) (string, error) {
	bb, err := Busybox()
	if err != nil {
		return "", err
	}
	rootfs, err := Tar(bb)
	if err != nil {
		return "", err
	}
	changes := []string{"ENV PATH=/bin", "ENV " + ImageEnv, "WORKDIR /"}
	for k, v := range labels {
		changes = append(changes, fmt.Sprintf("LABEL %q=%q", k, v))
	}
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: changes})
	if err != nil {
		return "", fmt.Errorf("importing %s: %w", ref, err)
	}
	// The import answers with a JSON progress stream; read it to the end
	// so that an error inside it is not lost.
	defer res.Close()
	body, err := io.ReadAll(res)
	if err != nil {
		return "", fmt.Errorf("importing %s: %w", ref, err)
	}
	if bytes.Contains(body, []byte(`"error"`)) {
		return "", fmt.Errorf("importing %s: %s", ref, body)
	}
	img, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		return "", err
	}
	return img.ID, nil
}
