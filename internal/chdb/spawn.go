package chdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Process is a chDB server running as a child process (`herald
// clickhouse-server`), started by Spawn.
type Process struct {
	cmd      *exec.Cmd
	tail     *tailBuffer
	tcpAddr  string
	httpAddr string
	grace    time.Duration

	exited  chan struct{} // closed once the child is reaped
	waitErr error         // set before exited is closed

	stopOnce sync.Once
	stopErr  error
}

// Spawn starts `exe clickhouse-server --path ... --tcp-port ... --http-port
// ...` as a child process and waits until GET /ping on its HTTP port answers
// "Ok.", at most o.StartTimeout. exe is a herald binary; herald dev passes
// os.Executable(). The child dies with its parent (Linux: SIGTERM through
// Pdeathsig) and is stopped by Stop or when ctx is cancelled.
//
// If the child exits or does not answer in time, Spawn returns an error that
// ends with the tail of the child's output.
func Spawn(ctx context.Context, exe string, o ServeOptions) (*Process, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	path, err := filepath.Abs(o.Path)
	if err != nil {
		return nil, fmt.Errorf("chdb: data directory %s: %w", o.Path, err)
	}
	if err := awaitPortsFree(ctx, o.PortWait, o.TCPPort, o.HTTPPort); err != nil {
		return nil, err
	}
	args := []string{"clickhouse-server",
		"--path", path,
		"--tcp-port", strconv.Itoa(o.TCPPort),
		"--http-port", strconv.Itoa(o.HTTPPort),
	}
	if o.LibPath != "" {
		args = append(args, "--lib", o.LibPath)
	}
	if o.LogLevel != "" {
		args = append(args, "--chdb-log-level", o.LogLevel)
	}
	if o.MaxMemoryMB > 0 {
		args = append(args, "--max-memory-mb", strconv.Itoa(o.MaxMemoryMB))
	}
	if o.StopTimeout > 0 {
		args = append(args, "--stop-timeout", o.StopTimeout.String())
	}

	tail := &tailBuffer{max: 16 << 10}
	var out io.Writer = tail
	if o.Stderr != nil {
		out = io.MultiWriter(tail, o.Stderr)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("chdb: start %s clickhouse-server: %w", exe, err)
	}
	p := &Process{
		cmd:      cmd,
		tail:     tail,
		tcpAddr:  hostPort(o.TCPPort),
		httpAddr: hostPort(o.HTTPPort),
		// The child waits StopTimeout for the engine; give it a little more.
		grace:  o.stopTimeout() + 5*time.Second,
		exited: make(chan struct{}),
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()

	startCtx, cancel := context.WithTimeout(ctx, o.startTimeout())
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- waitPing(startCtx, o.HTTPPort) }()
	select {
	case err = <-ready:
	case <-p.exited:
		err = fmt.Errorf("exited before listening: %v", p.waitErr)
	}
	if err != nil {
		cancel()
		_ = p.Stop()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer on http://%s/ping within %s", p.httpAddr, o.startTimeout())
		}
		return nil, fmt.Errorf("chdb: clickhouse-server (pid %d): %w; its output ends with:\n%s", cmd.Process.Pid, err, p.tail.String())
	}

	go func() {
		select {
		case <-ctx.Done():
			_ = p.Stop()
		case <-p.exited:
		}
	}()
	return p, nil
}

// TCPAddr is the native protocol address, 127.0.0.1:port.
func (p *Process) TCPAddr() string { return p.tcpAddr }

// HTTPAddr is the HTTP interface address, 127.0.0.1:port.
func (p *Process) HTTPAddr() string { return p.httpAddr }

// Pid is the child's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the child has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Output returns the tail of the child's stdout and stderr.
func (p *Process) Output() string { return p.tail.String() }

// Stop terminates the child: SIGTERM, which makes it stop the engine
// gracefully, then SIGKILL if it has not exited after the grace period. It
// reaps the child and is safe to call more than once and concurrently; every
// call returns the first call's result. The error is nil when the child
// exited on SIGTERM, cleanly or not.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.stop() })
	return p.stopErr
}

func (p *Process) stop() error {
	select {
	case <-p.exited:
		return nil // already gone; Spawn or the caller saw why
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("chdb: stop clickhouse-server (pid %d): %w", p.Pid(), err)
	}
	t := time.NewTimer(p.grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	return fmt.Errorf("chdb: clickhouse-server (pid %d) ignored SIGTERM for %s; killed", p.Pid(), p.grace)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := bytes.TrimSpace(t.buf)
	if len(s) == 0 {
		return "(no output)"
	}
	return string(s)
}

// awaitPortsFree waits up to limit for the ports to be free: a server of a
// process that just crashed (herald dev restarted at once) is still shutting
// down after its parent-death signal, and owns the data directory until it
// exits.
func awaitPortsFree(ctx context.Context, limit time.Duration, ports ...int) error {
	deadline := time.Now().Add(limit)
	for {
		var err error
		for _, port := range ports {
			if err = portFree(port); err != nil {
				break
			}
		}
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
