package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU time is the figure a noisy host does not move: on a machine whose
// cores are shared (steal time, a neighbour's load), requests/s swings by
// a third between identical runs, while the CPU seconds a run spends per
// request stay put. Each row reports the CPU time of this process (which
// runs herald's stage, or the PostgreSQL and Redis clients) and, when the
// backend's server listens on this machine, of the server's process and
// its descendants (PostgreSQL's backends) over the timed part.

// cpuClockTick is the unit of the times in /proc/<pid>/stat: USER_HZ,
// 100 on every Linux architecture herald builds for.
const cpuClockTick = 10 * time.Millisecond

// cpuMeter reads the CPU time of this process and of a server's process
// tree. Its zero value measures this process only.
type cpuMeter struct {
	server int // pid of the server's listening process; 0: not measured
}

// newCPUMeter measures this process and, when addr ("host:port") is
// served by a process of this machine that this process may read, that
// process's tree. Finding none is not an error: the server is remote, or
// in another PID namespace, and only this process is measured.
func newCPUMeter(addr string) cpuMeter {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return cpuMeter{}
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return cpuMeter{}
	}
	pid, _ := listenerPID(uint16(p))
	return cpuMeter{server: pid}
}

// selfCPU is this process's user and system time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the server's tree's CPU time so far (0: not measured).
func (m cpuMeter) serverCPU() time.Duration {
	if m.server == 0 {
		return 0
	}
	d, _ := treeCPU(m.server)
	return d
}

// span is a timed part of a run: its wall time, and the CPU time this
// process and the server spent in it (serverCPU 0: not measured).
type span struct {
	elapsed, cpu, serverCPU time.Duration
}

// spanStart is where a span began.
type spanStart struct {
	at          time.Time
	cpu, server time.Duration
}

// start begins a span now. The server is read first and the clock last,
// so the scan of /proc that reading the server takes is in neither this
// process's CPU time nor the span's wall time.
func (m cpuMeter) start() spanStart {
	server := m.serverCPU()
	cpu := selfCPU()
	return spanStart{at: time.Now(), cpu: cpu, server: server}
}

// end ends the span begun at s now: the clock first, the server last, as
// in start.
func (m cpuMeter) end(s spanStart) span {
	elapsed := time.Since(s.at)
	sp := span{elapsed: elapsed, cpu: selfCPU() - s.cpu}
	if m.server != 0 {
		sp.serverCPU = m.serverCPU() - s.server
	}
	return sp
}

// listenerPID is the process listening on TCP port (IPv4 or IPv6, any
// address): the owner of the socket's inode among /proc/<pid>/fd.
func listenerPID(port uint16) (int, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if err := listeningInodes(f, port, inodes); err != nil && !os.IsNotExist(err) {
			return 0, err
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("bench: cpu: no socket listens on port %d", port)
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			return strconv.Atoi(strings.Split(fd, "/")[2])
		}
	}
	return 0, fmt.Errorf("bench: cpu: the socket listening on port %d belongs to no process this one can read", port)
}

// listeningInodes adds the inodes of the sockets that listen on port in
// the table of file (/proc/net/tcp's format: "sl local rem st ... inode").
func listeningInodes(file string, port uint16, inodes map[string]bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" { // 0A: TCP_LISTEN
			inodes[fields[9]] = true
		}
	}
	return sc.Err()
}

// treeCPU is the CPU time of pid and of its descendants, alive or
// reaped: each process's user and system time and its reaped children's
// (so a PostgreSQL backend that exits between two marks is still
// counted, in its parent's children's time).
func treeCPU(root int) (time.Duration, error) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	children := map[int][]int{}
	ticks := map[int]int64{}
	for _, f := range stats {
		pid, ppid, t, err := readStat(f)
		if err != nil {
			continue // exited since the glob
		}
		children[ppid] = append(children[ppid], pid)
		ticks[pid] = t
	}
	if _, ok := ticks[root]; !ok {
		return 0, fmt.Errorf("bench: cpu: process %d is gone", root)
	}
	var sum int64
	todo := []int{root}
	for len(todo) > 0 {
		pid := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], children[pid]...)
		sum += ticks[pid]
	}
	return time.Duration(sum) * cpuClockTick, nil
}

// readStat reads a /proc/<pid>/stat file: the pid, its parent, and its
// utime + stime + cutime + cstime in clock ticks. The command name (field
// 2) is in parentheses and may hold spaces, so fields are counted from
// the last ')'.
func readStat(file string) (pid, ppid int, ticks int64, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, 0, 0, err
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return 0, 0, 0, fmt.Errorf("bench: cpu: %s: unexpected format", file)
	}
	if pid, err = strconv.Atoi(string(bytes.TrimSpace(b[:open]))); err != nil {
		return 0, 0, 0, fmt.Errorf("bench: cpu: %s: %w", file, err)
	}
	f := strings.Fields(string(b[end+1:])) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0, 0, 0, fmt.Errorf("bench: cpu: %s: %d fields", file, len(f)+2)
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, 0, fmt.Errorf("bench: cpu: %s: ppid: %w", file, err)
	}
	for _, s := range f[11:15] { // fields 14-17: utime stime cutime cstime
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("bench: cpu: %s: times: %w", file, err)
		}
		ticks += n
	}
	return pid, ppid, ticks, nil
}
