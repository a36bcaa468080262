package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// New connections through a node port from outside: connectors in the
// sender's namespace each open a TCP connection to the node's connPort
// (nodePort + targets, a TCP Service whose endpoints are ep's addresses),
// send one line, read the echo server's answer and close, over and over.

// serverPort is where ep's echo server listens (every endpoint's port).
const serverPort = 8080

// connTarget is the node port the connectors address.
func connTarget(targets int) netip.AddrPort {
	return netip.AddrPortFrom(nodeIP, uint16(firstNodePort+targets))
}

// connSample is one window of connections.
type connSample struct {
	// PerSec is connections completed (answered and closed) per second;
	// Failed, those that failed (a refused or timed-out connect, no
	// answer) per second.
	PerSec, Failed float64
}

// connectors counts completed and failed connections while they run.
type connectors struct {
	done, failed atomic.Uint64
	stop         chan struct{}
	wg           sync.WaitGroup
}

// startConnectors starts n connectors in the sender's namespace.
func (t *topo) startConnectors(n, targets int) *connectors {
	c := &connectors{stop: make(chan struct{})}
	dst := connTarget(targets).String()
	for range n {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			// Sockets belong to the namespace of the thread that creates
			// them: the whole loop runs on one that entered gen.
			_ = t.gen.Do(func() error { c.loop(dst); return nil })
		}()
	}
	return c
}

func (c *connectors) loop(dst string) {
	d := net.Dialer{Timeout: time.Second}
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		if err := once(&d, dst); err != nil {
			c.failed.Add(1)
			continue
		}
		c.done.Add(1)
	}
}

// once is one connection: connect, one request, its answer, close.
func once(d *net.Dialer, dst string) error {
	conn, err := d.Dial("tcp", dst)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("hello\n")); err != nil {
		return err
	}
	_, err = bufio.NewReader(conn).ReadString('\n')
	return err
}

func (c *connectors) close() {
	close(c.stop)
	c.wg.Wait()
}

// measureConns runs n connectors and takes runs windows of the given
// length after a warm-up.
func (t *topo) measureConns(n, targets, runs int, warm, window time.Duration) []connSample {
	c := t.startConnectors(n, targets)
	defer c.close()
	time.Sleep(warm)
	var out []connSample
	for range runs {
		start, done, failed := time.Now(), c.done.Load(), c.failed.Load()
		time.Sleep(window)
		secs := time.Since(start).Seconds()
		out = append(out, connSample{PerSec: float64(c.done.Load()-done) / secs, Failed: float64(c.failed.Load()-failed) / secs})
	}
	return out
}

// prepareConns gets the endpoint's side ready for connections: every
// endpoint address on ep0, a route back to the node's outside subnet
// (the tc programs masquerade to the node's primary address), the echo
// server; and the sender's: its ports reused out of TIME_WAIT, so that
// the connectors' rate is not bounded by its port range.
func (t *topo) prepareConns() error {
	for _, ip := range endpoints[1:] {
		if err := t.ep.AddAddr(epIf, netip.PrefixFrom(ip, 32)); err != nil {
			return err
		}
	}
	if err := t.ep.AddRoute(netip.PrefixFrom(nodeIP, 24).Masked(), nodeIntIP); err != nil {
		return err
	}
	for key, value := range map[string]string{"net.ipv4.tcp_tw_reuse": "1", "net.ipv4.ip_local_port_range": "1024 65535"} {
		if err := t.gen.Sysctl(key, value); err != nil {
			return fmt.Errorf("sender's %s: %w", key, err)
		}
	}
	// Answers forwarded by XDP arrive at gen0 as XDP frames, which a veth
	// takes only in NAPI mode (GRO is enough here: they come redirected
	// from int0, and a redirect wakes the peer, which XDP_TX does only for
	// a peer with an XDP program; pkg/testing/xdppass). A veth passes a
	// packet's checksum on unfinished (offloaded) where a NIC would send
	// it complete, and np_xdp leaves such a packet to tc; the two ends
	// finish theirs before sending, so that XDP forwards them.
	if err := t.gen.Do(func() error {
		return errors.Join(setGRO(genIf, true), setTXChecksum(genIf, false))
	}); err != nil {
		return err
	}
	if err := t.ep.Do(func() error { return setTXChecksum(epIf, false) }); err != nil {
		return err
	}
	_, err := t.ep.Serve("ep", proxy.TCP, serverPort)
	return err
}
