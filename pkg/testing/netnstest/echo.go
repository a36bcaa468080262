package netnstest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Answer is what an echo server replies: its own name and the address it
// saw the request come from (which tells whether the source was NATed).
type Answer struct {
	Server string
	Peer   netip.AddrPort
}

func (a Answer) String() string { return a.Server + " " + a.Peer.String() }

func formatAnswer(name string, peer netip.AddrPort) string {
	return name + " " + peer.String() + "\n"
}

func parseAnswer(line string) (Answer, error) {
	name, peer, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok {
		return Answer{}, fmt.Errorf("malformed echo answer %q", line)
	}
	ap, err := netip.ParseAddrPort(peer)
	if err != nil {
		return Answer{}, fmt.Errorf("malformed peer in echo answer %q: %w", line, err)
	}
	return Answer{Server: name, Peer: ap}, nil
}

// Server is an echo server running inside a namespace.
type Server struct {
	Name     string
	Protocol proxy.Protocol
	Port     uint16

	close func() error
	wg    sync.WaitGroup
}

// Close stops the server and waits for its goroutines.
func (s *Server) Close() error {
	err := s.close()
	s.wg.Wait()
	return err
}

// Serve starts an echo server called name on port (all addresses, both
// families) inside ns. TCP answers every line received on a connection, UDP
// every datagram, SCTP every INIT (see sctp.go). The server stops when the
// Lab closes, or earlier with Close.
func (ns *NS) Serve(name string, protocol proxy.Protocol, port uint16) (*Server, error) {
	if strings.ContainsAny(name, " \n") {
		return nil, fmt.Errorf("server name %q must not contain spaces", name)
	}
	s := &Server{Name: name, Protocol: protocol, Port: port}
	var err error
	switch protocol {
	case proxy.TCP:
		err = ns.serveTCP(s)
	case proxy.UDP:
		err = ns.serveUDP(s)
	case proxy.SCTP:
		err = ns.serveSCTP(s)
	default:
		err = fmt.Errorf("unknown protocol %q", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("%s server %s in %s: %w", protocol, name, ns.Role, err)
	}
	ns.lab.OnClose(func() { _ = s.Close() })
	return s, nil
}

func (ns *NS) serveTCP(s *Server) error {
	var ln net.Listener
	err := ns.Do(func() (err error) {
		// A socket belongs to the namespace it was created in, whichever
		// thread later uses it.
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", s.Port))
		return err
	})
	if err != nil {
		return err
	}
	var conns sync.Map
	s.close = func() error {
		err := ln.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		return err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, nil)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer conns.Delete(c)
				answerTCP(s.Name, c)
			}()
		}
	}()
	return nil
}

func answerTCP(name string, c net.Conn) {
	defer c.Close()
	peer := addrPortOf(c.RemoteAddr())
	r := bufio.NewReader(c)
	for {
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
		if _, err := c.Write([]byte(formatAnswer(name, peer))); err != nil {
			return
		}
	}
}

func (ns *NS) serveUDP(s *Server) error {
	var pc net.PacketConn
	err := ns.Do(func() (err error) {
		pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", s.Port))
		return err
	})
	if err != nil {
		return err
	}
	s.close = pc.Close
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			_, _ = pc.WriteTo([]byte(formatAnswer(s.Name, addrPortOf(from))), from)
		}
	}()
	return nil
}

// addrPortOf converts a net.Addr to an AddrPort with IPv4-mapped addresses
// unmapped (dual-stack sockets report IPv4 peers as ::ffff:a.b.c.d).
func addrPortOf(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
