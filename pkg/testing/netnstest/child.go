package netnstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// childEnv marks a run of the test binary as a client child (ServeChild);
// its value is the role of the namespace it runs in.
const childEnv = "SVCPROXY_NETNSTEST_CHILD"

// ServeChild turns this run of the test binary into the child a Client
// with a Cgroup asks through, when it is one, and exits when its parent
// closes its input; otherwise it returns at once. A test package whose
// tests use such Clients calls it first thing in TestMain.
func ServeChild() {
	role := os.Getenv(childEnv)
	if role == "" {
		return
	}
	if err := serveChild(role, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// childRequest is one Ask of a Client, run by the child.
type childRequest struct {
	ID         int
	Protocol   proxy.Protocol
	Dst        netip.AddrPort
	Source     netip.Addr
	SourcePort uint16
	Timeout    time.Duration
}

// childReply is the Ask's answer, or its error's outcome and text.
type childReply struct {
	ID      int
	Answer  Answer
	Outcome Outcome
	Err     string
}

// serveChild answers requests, each on a goroutine of its own, so that a
// request waiting for a drop does not hold up the others (a Load beside
// the checks), until in ends.
func serveChild(role string, in io.Reader, out io.Writer) error {
	here, err := netns.Get() // nsenter put the whole process there
	if err != nil {
		return err
	}
	ns := &NS{Name: role, Role: role, handle: here}
	dec, enc := json.NewDecoder(in), json.NewEncoder(out)
	var mu sync.Mutex
	for {
		var req childRequest
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		go func() {
			c := Client{NS: ns, Source: req.Source, SourcePort: req.SourcePort, Timeout: req.Timeout}
			ans, err := c.Ask(req.Protocol, req.Dst)
			rep := childReply{ID: req.ID, Answer: ans, Outcome: OutcomeOf(err)}
			if err != nil {
				rep.Err = err.Error()
			}
			mu.Lock()
			defer mu.Unlock()
			_ = enc.Encode(rep)
		}()
	}
}

// error rebuilds the child's error so that OutcomeOf classifies it as the
// child did.
func (r childReply) error() error {
	var cause error
	switch r.Outcome {
	case OK:
		return nil
	case Refused:
		cause = syscall.ECONNREFUSED
	case Timeout:
		cause = os.ErrDeadlineExceeded
	case Unreachable:
		cause = syscall.EHOSTUNREACH
	default:
		return fmt.Errorf("in the cgroup: %s", r.Err)
	}
	return fmt.Errorf("in the cgroup: %s: %w", r.Err, cause)
}

// child is a running ServeChild process and its pending requests.
type child struct {
	role string
	cmd  *exec.Cmd
	done chan struct{} // closed when its output ends
	died error         // why, once done is closed

	mu      sync.Mutex
	enc     *json.Encoder
	in      io.Closer
	next    int
	waiting map[int]chan childReply
}

// childIn returns the child process asking for ns's Clients in cgroup,
// starting it the first time; it ends when the Lab closes.
func (ns *NS) childIn(cgroup string) (*child, error) {
	ns.childMu.Lock()
	defer ns.childMu.Unlock()
	if c := ns.children[cgroup]; c != nil {
		return c, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &child{role: ns.Role, cmd: TestBinaryIn(ctx, ns, childEnv+"="+ns.Role),
		done: make(chan struct{}), waiting: map[int]chan childReply{}}
	c.cmd.Stderr = os.Stderr
	stdin, err := c.cmd.StdinPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if err := StartInCgroup(c.cmd, cgroup); err != nil {
		cancel()
		return nil, err
	}
	c.enc, c.in = json.NewEncoder(stdin), stdin
	go c.read(stdout)
	if ns.children == nil {
		ns.children = map[string]*child{}
	}
	ns.children[cgroup] = c
	ns.lab.OnClose(func() {
		_ = c.in.Close()
		select {
		case <-c.done:
		case <-time.After(2 * time.Second):
		}
		cancel()
		_ = c.cmd.Wait()
	})
	return c, nil
}

// read hands each reply to its waiter until the child's output ends.
func (c *child) read(stdout io.Reader) {
	dec := json.NewDecoder(stdout)
	for {
		var rep childReply
		if err := dec.Decode(&rep); err != nil {
			c.died = fmt.Errorf("the client process in %s ended (%w); does the test binary's TestMain call netnstest.ServeChild?", c.role, err)
			close(c.done)
			return
		}
		c.mu.Lock()
		ch := c.waiting[rep.ID]
		delete(c.waiting, rep.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- rep
		}
	}
}

// ask has the child run req and waits for its reply.
func (c *child) ask(req childRequest) (Answer, error) {
	ch := make(chan childReply, 1)
	c.mu.Lock()
	c.next++
	req.ID = c.next
	c.waiting[req.ID] = ch
	err := c.enc.Encode(req)
	c.mu.Unlock()
	if err != nil {
		return Answer{}, fmt.Errorf("asking the client process in %s: %w", c.role, err)
	}
	select {
	case rep := <-ch:
		return rep.Answer, rep.error()
	case <-c.done:
		return Answer{}, c.died
	}
}

// askInCgroup is Ask made by the child process in c.Cgroup.
func (c Client) askInCgroup(protocol proxy.Protocol, dst netip.AddrPort) (Answer, error) {
	ch, err := c.NS.childIn(c.Cgroup)
	if err != nil {
		return Answer{}, err
	}
	return ch.ask(childRequest{Protocol: protocol, Dst: dst, Source: c.Source, SourcePort: c.SourcePort, Timeout: c.timeout()})
}
