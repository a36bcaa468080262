package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// rateCmd measures the new-connection rate to a TCP address: -conns
// workers, each in a loop of connect, one HTTP/1.0 request, read the answer
// to the end (podserver closes), close; for -duration. It prints one line
// for the benchmark to parse, with the 50th and 99th percentile of a
// successful connection's time from connect to the answer's end:
//
//	rate <connections/s> ok <n> errors <n> seconds <s> p50-ms <ms> p99-ms <ms> first-error <msg>
func rateCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("rate", flag.ContinueOnError)
	addr := fs.String("addr", "", "HOST:PORT to connect to (HTTP over TCP)")
	conns := fs.Int("conns", 16, "connections in flight")
	duration := fs.Duration("duration", 10*time.Second, "how long to measure")
	timeout := fs.Duration("timeout", 2*time.Second, "per-connection timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		return fmt.Errorf("-addr is required")
	}
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	// Each worker keeps its own durations: no lock on the measured path.
	took := make([][]time.Duration, *conns)
	start := time.Now()
	for w := 0; w < *conns; w++ {
		wg.Go(func() {
			buf := make([]byte, 512)
			for ctx.Err() == nil {
				t0 := time.Now()
				if err := oneRequest(*addr, *timeout, buf); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				took[w] = append(took[w], time.Since(t0))
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	msg, _ := firstErr.Load().(string)
	all := slices.Concat(took...)
	slices.Sort(all)
	fmt.Printf("rate %.1f ok %d errors %d seconds %.3f p50-ms %.3f p99-ms %.3f first-error %s\n",
		float64(ok.Load())/secs, ok.Load(), failed.Load(), secs, quantileMS(all, 0.50), quantileMS(all, 0.99), msg)
	return nil
}

// quantileMS is the nearest-rank q-quantile of sorted durations in
// milliseconds, -1 when there are none.
func quantileMS(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return -1
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return float64(sorted[max(i, 0)]) / float64(time.Millisecond)
}

var request = []byte("GET / HTTP/1.0\r\n\r\n")

// oneRequest is one connection: connect, request, answer, close.
func oneRequest(addr string, timeout time.Duration, buf []byte) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(request); err != nil {
		return err
	}
	var got []byte
	for {
		n, err := conn.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.0 200")) && !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) {
		return fmt.Errorf("unexpected answer %.40q", got)
	}
	return nil
}
