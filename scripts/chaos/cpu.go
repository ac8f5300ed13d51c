package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuUse accounts the CPU time of the run, to tell what limits the send
// rate on this machine: the driver (load generator, emulators, proxies,
// observer), its children (every herald role incarnation, reaped, and
// the ClickHouse server) and the cluster's JVMs (their current processes:
// a node restarted during the run counts from its restart).
type cpuUse struct {
	self, children time.Duration
	brokers        map[string]time.Duration // node -> CPU of its JVM
}

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sampleCPU reads the driver's, its children's (reaped, plus the live
// ones named by pids) and each cluster node's CPU time so far
// (clusterDir: the nodes' node-N/kafka.pid).
func sampleCPU(clusterDir string, pids []int) cpuUse {
	u := cpuUse{self: rusage(syscall.RUSAGE_SELF), children: rusage(syscall.RUSAGE_CHILDREN), brokers: map[string]time.Duration{}}
	for _, pid := range pids {
		u.children += procCPU(pid)
	}
	for _, n := range []string{"1", "2", "3"} {
		b, err := os.ReadFile(filepath.Join(clusterDir, "node-"+n, "kafka.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		u.brokers[n] = procCPU(pid)
	}
	return u
}

// procCPU is a live process's user and system CPU time (0 when gone).
func procCPU(pid int) time.Duration {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th (14 and 15 of the whole line).
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// since is the CPU used between an earlier sample and u; a node whose
// JVM restarted (less CPU than before) counts from its restart.
func (u cpuUse) since(earlier cpuUse) cpuUse {
	d := cpuUse{self: u.self - earlier.self, children: u.children - earlier.children, brokers: map[string]time.Duration{}}
	for n, t := range u.brokers {
		if e := earlier.brokers[n]; e <= t {
			t -= e
		}
		d.brokers[n] = t
	}
	return d
}

func (u cpuUse) String() string {
	var b time.Duration
	for _, t := range u.brokers {
		b += t
	}
	return fmt.Sprintf("brokers %.0f s (%d JVMs), herald roles and ClickHouse %.0f s, the driver (load, emulators, proxies, observer) %.0f s",
		b.Seconds(), len(u.brokers), u.children.Seconds(), u.self.Seconds())
}
