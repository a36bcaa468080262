package nodeport

// The generated files are committed so that building svcproxy needs no
// clang; hack/update-bpf.sh regenerates them and hack/verify.sh compares
// where clang is installed.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -strip llvm-strip -no-global-types -target bpfel nodeport ../bpf/nodeport.c -- -O2 -Wall -Werror -I/usr/include/x86_64-linux-gnu
