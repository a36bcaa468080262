package framework

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Proc is a process started inside a network namespace (`ip netns exec`
// execs, so the PID is the program's own), logging to a file.
type Proc struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts a program the framework does not run itself (upstream
// kube-proxy, for the differential suite) in namespace ns, with its output
// appended to logPath.
func Start(name, ns, logPath string, argv ...string) (*Proc, error) {
	return startProc(name, ns, logPath, argv...)
}

// startProc starts argv in namespace ns with output to logPath.
func startProc(name, ns, logPath string, argv ...string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log for %s: %w", name, err)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Alive reports whether the process is still running.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Exited waits up to d for the process to end and returns its exit error.
func (p *Proc) Exited(d time.Duration) (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	case <-time.After(d):
		return false, nil
	}
}

// Kill sends SIGKILL (a crash, for the restart tests) and waits.
func (p *Proc) Kill() {
	if p.Alive() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// Stop asks politely (SIGTERM), then kills after grace.
func (p *Proc) Stop(grace time.Duration) {
	if !p.Alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if ok, _ := p.Exited(grace); !ok {
		p.Kill()
	}
}

// Pid is the program's own PID (ip netns exec execs it).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Rusage is the resource usage wait4 reported once the process ended (nil
// before). Linux fills it as RUSAGE_BOTH: Maxrss is the larger of the
// process's own peak and that of its largest waited-for child, in KiB.
func (p *Proc) Rusage() *syscall.Rusage {
	if p.Alive() || p.cmd.ProcessState == nil {
		return nil
	}
	ru, _ := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return ru
}

// Tail returns the last n bytes of the log, for failure messages.
func (p *Proc) Tail(n int64) string {
	f, err := os.Open(p.Log)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	buf := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}
