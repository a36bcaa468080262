// Command podserver is the "pod" of the e2e tests and the demo: it answers every TCP
// connection with an HTTP response and every UDP datagram with a datagram, both carrying
// its pod name and the client address it saw, so a test can tell which endpoint served it
// and whether the source was masqueraded.
//
//	podserver -name pod-a -listen :8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	name := flag.String("name", os.Getenv("POD_NAME"), "pod name to answer with")
	listen := flag.String("listen", ":8080", "TCP (HTTP) and UDP listen address")
	flag.Parse()
	if *name == "" {
		log.Fatal("podserver: -name is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *name, *listen); err != nil {
		log.Fatalf("podserver: %v", err)
	}
}

func run(ctx context.Context, name, listen string) error {
	pc, err := net.ListenPacket("udp", listen)
	if err != nil {
		return err
	}
	defer pc.Close()
	go serveUDP(pc, name)

	// The client decides when a connection ends: e2ectl closes its own
	// after one answer, so that TIME_WAIT stays on the client (see
	// e2ectl's askHTTP); an HTTP/1.0 or "Connection: close" client is
	// closed after its answer, as any server does.
	srv := &http.Server{
		Addr:              listen,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s\n", name, r.RemoteAddr)
		}),
	}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	log.Printf("podserver %s listening on %s (tcp/http, udp)", name, listen)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func serveUDP(pc net.PacketConn, name string) {
	buf := make([]byte, 2048)
	for {
		_, addr, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(fmt.Appendf(nil, "%s %s\n", name, addr), addr)
	}
}
