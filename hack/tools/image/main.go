// Command image builds, unpacks and describes svcproxy's OCI image layouts
// without a container engine: hack/image.sh prepares a Debian root file
// system and the binary per architecture, and this tool packs them as two
// layers (the Debian base, then svcproxy) into an OCI image layout, joins
// the architectures' images into one image index that a registry client can
// push (skopeo copy --all oci:..., crane push), flattens an image back into
// a directory, which is how hack/image.sh tests the result, and writes an
// image's SPDX SBOM.
//
//	image pack --base DIR --app DIR --out LAYOUT [--ref svcproxy:dev] [--version v1.2.3] [--arch amd64]
//	image index --out LAYOUT --ref svcproxy:v1.2.3 LAYOUT...
//	image unpack --layout LAYOUT --out DIR [--ref svcproxy:dev] [--arch amd64]
//	image sbom --binary FILE --rootfs DIR --digest sha256:... --version v1.2.3 --arch amd64 --created T --out FILE
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: image pack|index|unpack|sbom [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	ref := fs.String("ref", "svcproxy:dev", "org.opencontainers.image.ref.name of the image in the layout")
	out := fs.String("out", "", "output: the layout directory (pack, index), the root directory (unpack) or the SBOM file (sbom)")
	arch := fs.String("arch", "amd64", "image architecture")
	switch args[0] {
	case "pack":
		var o packOptions
		fs.StringVar(&o.base, "base", "", "root file system of the base layer")
		fs.StringVar(&o.app, "app", "", "directory tree of the svcproxy layer")
		fs.StringVar(&o.version, "version", "", "org.opencontainers.image.version label")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if o.base == "" || o.app == "" || *out == "" {
			return errors.New("pack needs --base, --app and --out")
		}
		o.out, o.ref, o.arch = *out, *ref, *arch
		return pack(o)
	case "index":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *out == "" || fs.NArg() == 0 {
			return errors.New("index needs --out and one layout per architecture")
		}
		return index(*out, *ref, fs.Args())
	case "unpack":
		layout := fs.String("layout", "", "OCI image layout directory")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *layout == "" || *out == "" {
			return errors.New("unpack needs --layout and --out")
		}
		return unpack(*layout, *ref, *arch, *out)
	case "sbom":
		return sbomCommand(fs, args[1:], out, arch)
	default:
		return fmt.Errorf("unknown command %q: want pack, index, unpack or sbom", args[0])
	}
}

// sbomCommand writes the SPDX SBOM of one architecture's image: its Go
// modules read from the binary (what `go version -m` prints), its Debian
// packages from the root file system's dpkg status.
func sbomCommand(fs *flag.FlagSet, args []string, out, arch *string) error {
	in := sbomInput{name: "svcproxy", license: "Apache-2.0"}
	binary := fs.String("binary", "", "the svcproxy binary in the image")
	rootfs := fs.String("rootfs", "", "the image's base root file system (its var/lib/dpkg/status)")
	fs.StringVar(&in.imageDigest, "digest", "", "the image manifest's digest, sha256:...")
	fs.StringVar(&in.version, "version", "", "svcproxy's version")
	fs.StringVar(&in.created, "created", "1970-01-01T00:00:00Z", "creation time, RFC 3339 UTC (the release commit's, for reproducible output)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" || *rootfs == "" || in.imageDigest == "" || in.version == "" || *out == "" {
		return errors.New("sbom needs --binary, --rootfs, --digest, --version and --out")
	}
	in.arch = *arch
	var err error
	if in.goBuild, err = readGoBuild(*binary); err != nil {
		return err
	}
	if in.debs, err = readDpkgStatus(*rootfs); err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := writeSBOM(f, buildSBOM(in)); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	return f.Close()
}
