package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// The two BPF programs of the benchmark itself are a few instructions
// each, assembled here rather than compiled from C: the sender's, run with
// BPF_PROG_RUN in live-frame mode, and the endpoint's counter.

// liveFrames is BPF_F_TEST_XDP_LIVE_FRAMES: BPF_PROG_RUN transmits what
// the program returns XDP_TX for, out of the context's ingress interface.
const liveFrames = 1 << 1

// xdpMD is struct xdp_md, the context BPF_PROG_RUN takes for XDP.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// Offsets in the sender's frame (Ethernet, IPv4 without options, UDP).
const (
	offSrcPort = 14 + 20
	offDstPort = offSrcPort + 2
	headerLen  = offSrcPort + 8
	frameLen   = 60 // the Ethernet minimum without the FCS
)

// senderSpec is an XDP program that writes template's headers into each
// frame, gives it a random UDP source port in [firstSrc, firstSrc+srcSpan)
// and destination port in [firstDst, firstDst+dstSpan), and transmits it
// (XDP_TX). Both spans are powers of two. The UDP checksum is zero (none,
// valid for IPv4) and the IP header is the template's, so no checksum
// needs fixing. The headers are written every time because live-frame
// mode recycles a frame's page without copying the template again: a
// frame comes back with what the receiver's stack left in it (a forwarded
// frame's rewritten MAC addresses, its NATed and TTL-decremented IP
// header).
func senderSpec(template []byte, firstSrc, srcSpan, firstDst, dstSpan uint16) *ebpf.ProgramSpec {
	insns := asm.Instructions{
		asm.LoadMem(asm.R6, asm.R1, 0, asm.Word), // data
		asm.LoadMem(asm.R7, asm.R1, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R2, asm.R6),
		asm.Add.Imm(asm.R2, headerLen),
		asm.JGT.Reg(asm.R2, asm.R7, "pass"),
	}
	// Stores keep the bytes' order as the CPU does (little-endian here).
	for off := 0; off+4 <= headerLen; off += 4 {
		insns = append(insns, asm.StoreImm(asm.R6, int16(off), int64(int32(binary.LittleEndian.Uint32(template[off:]))), asm.Word))
	}
	insns = append(insns, asm.StoreImm(asm.R6, headerLen-2, int64(binary.LittleEndian.Uint16(template[headerLen-2:])), asm.Half))
	insns = append(insns,
		asm.FnGetPrandomU32.Call(),
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.And.Imm(asm.R1, int32(srcSpan-1)),
		asm.Add.Imm(asm.R1, int32(firstSrc)),
		asm.HostTo(asm.BE, asm.R1, asm.Half),
		asm.StoreMem(asm.R6, offSrcPort, asm.R1, asm.Half),
		asm.RSh.Imm(asm.R0, 16),
		asm.And.Imm(asm.R0, int32(dstSpan-1)),
		asm.Add.Imm(asm.R0, int32(firstDst)),
		asm.HostTo(asm.BE, asm.R0, asm.Half),
		asm.StoreMem(asm.R6, offDstPort, asm.R0, asm.Half),
		asm.Mov.Imm(asm.R0, 3), // XDP_TX
		asm.Return(),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("pass"), // XDP_PASS
		asm.Return(),
	)
	return &ebpf.ProgramSpec{Name: "bench_sender", Type: ebpf.XDP, License: "GPL", Instructions: insns}
}

// counterSpec is an XDP program that counts every IPv4 UDP frame in slot
// 0 of counts (a per-CPU array) and drops it: the endpoint's side, where a
// frame that arrives has been forwarded by the node. Other frames (the
// connections' TCP, ARP) go on to the endpoint's stack.
func counterSpec(counts *ebpf.Map) *ebpf.ProgramSpec {
	return &ebpf.ProgramSpec{
		Name:    "bench_counter",
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
			asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, 14+20),
			asm.JGT.Reg(asm.R4, asm.R3, "pass"),
			asm.LoadMem(asm.R4, asm.R2, 12, asm.Half),
			asm.JNE.Imm(asm.R4, 0x0008, "pass"), // ETH_P_IP, as the CPU reads it
			asm.LoadMem(asm.R4, asm.R2, 14+9, asm.Byte),
			asm.JNE.Imm(asm.R4, 17, "pass"),
			asm.LoadMapPtr(asm.R1, counts.FD()),
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "drop"),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 1).WithSymbol("drop"), // XDP_DROP
			asm.Return(),
			asm.Mov.Imm(asm.R0, 2).WithSymbol("pass"), // XDP_PASS
			asm.Return(),
		},
	}
}

func newCounts() (*ebpf.Map, error) {
	return ebpf.NewMap(&ebpf.MapSpec{Name: "bench_counts", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
}

// readCount sums the counter over the CPUs.
func readCount(counts *ebpf.Map) (uint64, error) {
	var per []uint64
	if err := counts.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read the endpoint's counter: %w", err)
	}
	var sum uint64
	for _, v := range per {
		sum += v
	}
	return sum, nil
}

// udpFrame is the sender's template: from src to dst (ports set per frame
// by the program), padded to frameLen.
func udpFrame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr) []byte {
	f := make([]byte, frameLen)
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(frameLen-14))
	ip[8] = 64 // TTL
	ip[9] = 17 // UDP
	s, d := src.As4(), dst.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	binary.BigEndian.PutUint16(f[offDstPort+2:], uint16(frameLen-offSrcPort)) // UDP length
	return f
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
