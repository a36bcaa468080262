// Command image builds and unpacks svcproxy's OCI image layout without a
// container engine: hack/image.sh prepares a Debian root file system and
// the binary, and this tool packs them as two layers (the Debian base, then
// svcproxy) into an OCI image layout that a registry client can push
// (crane push, skopeo copy oci:...). "unpack" flattens an image of a layout
// back into a directory, which is how hack/image.sh tests the result.
//
//	image pack --base DIR --app DIR --out LAYOUT [--ref svcproxy:dev] [--version v1.2.3]
//	image unpack --layout LAYOUT --out DIR [--ref svcproxy:dev]
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
		return errors.New("usage: image pack|unpack [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	ref := fs.String("ref", "svcproxy:dev", "org.opencontainers.image.ref.name of the image in the layout")
	out := fs.String("out", "", "output: the layout directory (pack) or the root directory (unpack)")
	switch args[0] {
	case "pack":
		var o packOptions
		fs.StringVar(&o.base, "base", "", "root file system of the base layer")
		fs.StringVar(&o.app, "app", "", "directory tree of the svcproxy layer")
		fs.StringVar(&o.version, "version", "", "org.opencontainers.image.version label")
		fs.StringVar(&o.arch, "arch", "amd64", "image architecture")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if o.base == "" || o.app == "" || *out == "" {
			return errors.New("pack needs --base, --app and --out")
		}
		o.out, o.ref = *out, *ref
		return pack(o)
	case "unpack":
		layout := fs.String("layout", "", "OCI image layout directory")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *layout == "" || *out == "" {
			return errors.New("unpack needs --layout and --out")
		}
		return unpack(*layout, *ref, *out)
	default:
		return fmt.Errorf("unknown command %q: want pack or unpack", args[0])
	}
}
