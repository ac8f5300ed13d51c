package bench

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestTheServerOfAnAddressIsTheProcessListeningOnItsPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	t.Run("a port this process listens on is this process's", func(t *testing.T) {
		if m := newCPUMeter(addr); m.server != os.Getpid() {
			t.Fatalf("server pid %d, want this process %d", m.server, os.Getpid())
		}
	})
	ln.Close()
	t.Run("a port nobody listens on measures this process only", func(t *testing.T) {
		if m := newCPUMeter(addr); m.server != 0 {
			t.Fatalf("server pid %d for a closed port", m.server)
		}
	})
	t.Run("an address without a port measures this process only", func(t *testing.T) {
		if m := newCPUMeter("/var/run/postgresql"); m.server != 0 {
			t.Fatalf("server pid %d", m.server)
		}
	})
}

// burn spends d of this thread's CPU time (by the kernel's per-thread
// count, not the wall clock, so a busy machine only makes it take longer).
func burn(t *testing.T, d time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	threadCPU := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(rusageThread, &ru); err != nil {
			t.Fatalf("getrusage: %v", err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for start := threadCPU(); threadCPU()-start < d; {
	}
}

// rusageThread is Linux's RUSAGE_THREAD, which package syscall does not name.
const rusageThread = 1

func TestASpanCountsTheCPUSpentInIt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("burn counts a thread's CPU time with Linux's RUSAGE_THREAD")
	}
	m := cpuMeter{}
	s := m.start()
	burn(t, 50*time.Millisecond)
	sp := m.end(s)
	if sp.cpu < 50*time.Millisecond || sp.elapsed < 50*time.Millisecond {
		t.Fatalf("span %+v after 50 ms of CPU", sp)
	}
	if sp.serverCPU != 0 {
		t.Fatalf("server CPU %v without a server", sp.serverCPU)
	}
}

func TestAProcessTreesCPUCountsItsDescendantsAliveAndReaped(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	self := os.Getpid()
	_, _, selfTicks, err := readStat("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	// A child that burns CPU, then sleeps so it is alive when measured.
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec sleep 30`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var childTicks int64
	for deadline := time.Now().Add(20 * time.Second); ; {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "comm"))
		if err == nil && string(b) == "sleep\n" {
			if _, _, childTicks, err = readStat(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "stat")); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not finish its loop")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if childTicks == 0 {
		t.Fatal("the child's loop took no CPU time to measure")
	}
	t.Run("a live child's time is in its parent's tree", func(t *testing.T) {
		got, err := treeCPU(self)
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Duration(selfTicks+childTicks) * cpuClockTick; got < want {
			t.Fatalf("tree CPU %v, want at least this process's %v and the child's %v", got,
				time.Duration(selfTicks)*cpuClockTick, time.Duration(childTicks)*cpuClockTick)
		}
	})
	cmd.Process.Kill()
	cmd.Wait()
	t.Run("a reaped child's time is still in its parent's tree", func(t *testing.T) {
		got, err := treeCPU(self)
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Duration(selfTicks+childTicks) * cpuClockTick; got < want {
			t.Fatalf("tree CPU %v after the child was reaped, want at least %v", got, want)
		}
	})
	t.Run("a process that is gone is an error", func(t *testing.T) {
		if _, err := treeCPU(cmd.Process.Pid); err == nil {
			t.Fatal("no error for a reaped process")
		}
	})
}

func TestReadStatCountsFieldsAfterTheCommandName(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		pid, ppid  int
		ticks      int64
		fails      bool
	}{
		{"a plain name", "42 (java) S 7 42 42 0 -1 4194560 1 2 3 4 100 20 3 4 20 0 1 0", 42, 7, 127, false},
		{"a name with spaces and parentheses", "43 (a) b (c)) R 8 1 1 0 -1 0 0 0 0 0 5 6 7 8 20 0", 43, 8, 26, false},
		{"a truncated line", "44 (x) S 9 1 1", 0, 0, 0, true},
		{"no name", "45 S 9", 0, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "stat")
			if err := os.WriteFile(f, []byte(tc.stat+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			pid, ppid, ticks, err := readStat(f)
			if tc.fails {
				if err == nil {
					t.Fatalf("no error for %q", tc.stat)
				}
				return
			}
			if err != nil || pid != tc.pid || ppid != tc.ppid || ticks != tc.ticks {
				t.Fatalf("got %d, %d, %d, %v; want %d, %d, %d", pid, ppid, ticks, err, tc.pid, tc.ppid, tc.ticks)
			}
		})
	}
}
