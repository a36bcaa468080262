package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The nft processes' own peak RSS. getrusage(RUSAGE_CHILDREN) charges a
// child that was vforked (as Go's os/exec does) with its parent's RSS until
// exec: with the benchmark at 130 MiB every nft would seem to peak at
// 130 MiB. So the child process puts this binary first in PATH under the
// name "nft" (New and knftables look nft up there): that small shim runs
// the real nft and appends its maxrss to a log. A value is then at most
// max(nft's own peak, the shim's RSS of a few MiB).
const (
	shimRealEnv = "NFTBENCH_REAL_NFT"
	shimLogEnv  = "NFTBENCH_NFT_RSS_LOG"
)

// isShim reports whether this process was started as the nft shim.
func isShim() bool {
	return filepath.Base(os.Args[0]) == "nft" && os.Getenv(shimRealEnv) != ""
}

// shimMain runs the real nft with this process's arguments and stdio,
// records its maxrss and exits with its status.
func shimMain() int {
	cmd := exec.Command(os.Getenv(shimRealEnv), os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			if f, ferr := os.OpenFile(os.Getenv(shimLogEnv), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); ferr == nil {
				fmt.Fprintln(f, ru.Maxrss)
				f.Close()
			}
		}
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintln(os.Stderr, "nft shim:", err)
		return 127
	}
	return 0
}

// installShim makes this binary the "nft" of this process and its
// children; it returns the log of maxrss values and what removes the shim.
func installShim() (log string, remove func(), err error) {
	real, err := exec.LookPath("nft")
	if err != nil {
		return "", nil, fmt.Errorf("nft shim: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("nft shim: %w", err)
	}
	dir, err := os.MkdirTemp("", "nftbench-shim-")
	if err != nil {
		return "", nil, fmt.Errorf("nft shim: %w", err)
	}
	remove = func() { os.RemoveAll(dir) }
	if err := os.Symlink(self, filepath.Join(dir, "nft")); err != nil {
		remove()
		return "", nil, fmt.Errorf("nft shim: %w", err)
	}
	log = filepath.Join(dir, "maxrss")
	os.Setenv(shimRealEnv, real)
	os.Setenv(shimLogEnv, log)
	os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return log, remove, nil
}

// shimMaxRSS returns the largest maxrss in the log, KiB (0: no nft ran,
// or no log: -nftrss=false).
func shimMaxRSS(log string) (int64, error) {
	if log == "" {
		return 0, nil
	}
	f, err := os.Open(log)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var peak int64
	s := bufio.NewScanner(f)
	for s.Scan() {
		v, err := strconv.ParseInt(strings.TrimSpace(s.Text()), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("nft shim log: %w", err)
		}
		peak = max(peak, v)
	}
	return peak, s.Err()
}
