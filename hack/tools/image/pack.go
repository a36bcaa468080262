package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const refAnnotation = "org.opencontainers.image.ref.name"

type packOptions struct {
	base, app, out, ref, version, arch string
}

// pack builds the image from two trees and writes it into a fresh layout.
// Two layers, so that a new svcproxy binary ships as a small layer over an
// unchanged Debian base.
func pack(o packOptions) error {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, dir := range []string{o.base, o.app} {
		layer, err := treeLayer(dir)
		if err != nil {
			return err
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return fmt.Errorf("adding the layer of %s: %w", dir, err)
		}
	}
	img, err := configure(img, o)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(o.out); err != nil {
		return fmt.Errorf("removing the old layout: %w", err)
	}
	p, err := layout.Write(o.out, empty.Index)
	if err != nil {
		return fmt.Errorf("creating the layout %s: %w", o.out, err)
	}
	err = p.AppendImage(img, layout.WithAnnotations(map[string]string{refAnnotation: o.ref}))
	if err != nil {
		return fmt.Errorf("writing the image: %w", err)
	}
	d, err := img.Digest()
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	fmt.Printf("%s %s@%s\n", o.out, o.ref, d)
	return nil
}

// treeLayer packs dir into an in-memory gzip layer. The base is about 100 MB
// uncompressed; holding it once in memory keeps digesting simple.
func treeLayer(dir string) (v1.Layer, error) {
	var buf bytes.Buffer
	if err := writeTree(&buf, dir); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer of %s: %w", dir, err)
	}
	return layer, nil
}

// configure sets what the Dockerfile's runtime stage sets: platform, PATH,
// entrypoint and labels.
func configure(img v1.Image, o packOptions) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cf.Config.Entrypoint = []string{"/usr/local/bin/svcproxy"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "svcproxy",
		"org.opencontainers.image.source":  "https://github.com/svcproxy/svcproxy",
		"org.opencontainers.image.version": o.version,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("writing the config: %w", err)
	}
	return img, nil
}

// unpack flattens the image named ref in the layout into dir; where ref is
// an index, its image for arch.
func unpack(dir, ref, arch, out string) error {
	img, err := imageOf(dir, ref, arch)
	if err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return extract(rc, out)
}
