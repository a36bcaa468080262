package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// epoch is every entry's modification time, so that packing the same tree
// twice gives the same layer digest.
var epoch = time.Unix(0, 0)

// writeTree writes the tree under root as a layer tar: paths relative to
// root, owners and modes kept, hard links as links. Device nodes, sockets
// and pipes are skipped: the container runtime provides /dev.
func writeTree(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	seen := map[uint64]string{} // inode → first path, for hard links
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		return writeEntry(tw, path, rel, seen)
	})
	if err != nil {
		return fmt.Errorf("packing %s: %w", root, err)
	}
	return tw.Close()
}

func writeEntry(tw *tar.Writer, path, rel string, seen map[uint64]string) error {
	info, err := os.Lstat(path)
	if err != nil {
		return err
	}
	mode := info.Mode()
	if mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeSocket|fs.ModeNamedPipe) != 0 {
		return nil
	}
	link := ""
	if mode&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(path); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	hdr.Name = filepath.ToSlash(rel)
	if info.IsDir() {
		hdr.Name += "/"
	}
	hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = epoch, time.Time{}, time.Time{}
	hdr.Uname, hdr.Gname = "", ""
	hdr.Format = tar.FormatPAX
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
		if mode.IsRegular() && st.Nlink > 1 {
			if first, ok := seen[st.Ino]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			seen[st.Ino] = hdr.Name
		}
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !mode.IsRegular() {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

// extract unpacks a flattened image tar (whiteouts already applied) into
// dir, keeping owners and modes. Entries may not escape dir.
func extract(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading image tar: %w", err)
		}
		if err := extractEntry(tr, hdr, dir); err != nil {
			return fmt.Errorf("extracting %s: %w", hdr.Name, err)
		}
	}
}

func extractEntry(tr *tar.Reader, hdr *tar.Header, dir string) error {
	target, err := within(dir, hdr.Name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	mode := fs.FileMode(hdr.Mode) & fs.ModePerm
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.MkdirAll(target, mode); err != nil {
			return err
		}
	case tar.TypeSymlink:
		_ = os.Remove(target)
		if err := os.Symlink(hdr.Linkname, target); err != nil {
			return err
		}
	case tar.TypeLink:
		first, err := within(dir, hdr.Linkname)
		if err != nil {
			return err
		}
		_ = os.Remove(target)
		return os.Link(first, target)
	case tar.TypeReg:
		if err := writeFile(tr, target, mode); err != nil {
			return err
		}
	default:
		return nil // devices and the like: the runtime provides them
	}
	if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeSymlink {
		return nil
	}
	// Chmod after chown: chown clears setuid bits.
	return os.Chmod(target, mode|modeBits(hdr.Mode))
}

// modeBits maps tar's setuid/setgid/sticky bits onto fs.FileMode's.
func modeBits(m int64) fs.FileMode {
	var out fs.FileMode
	if m&04000 != 0 {
		out |= fs.ModeSetuid
	}
	if m&02000 != 0 {
		out |= fs.ModeSetgid
	}
	if m&01000 != 0 {
		out |= fs.ModeSticky
	}
	return out
}

func writeFile(r io.Reader, target string, mode fs.FileMode) error {
	_ = os.Remove(target)
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// within joins name onto dir and refuses results outside dir, including
// through a symbolic link already extracted (an absolute link such as
// /etc/alternatives/iptables would otherwise lead onto the host, and this
// runs as root).
func within(dir, name string) (string, error) {
	target := filepath.Join(dir, filepath.FromSlash(name))
	rel, err := filepath.Rel(dir, target)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("path %q leaves the root", name)
	}
	for p := filepath.Dir(target); len(p) > len(dir); p = filepath.Dir(p) {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("path %q goes through the symbolic link %s", name, p)
		}
	}
	return target, nil
}
