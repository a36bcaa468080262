package ebpf

// The generated files are committed so that building svcproxy needs no
// clang; hack/verify-bpf.sh regenerates them where clang is installed and
// fails on any difference.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -strip llvm-strip -no-global-types -target bpfel sock bpf/sock.c -- -O2 -Wall -Werror -I/usr/include/x86_64-linux-gnu
