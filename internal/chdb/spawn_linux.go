package chdb

import "syscall"

// sysProcAttr makes the kernel send the child SIGTERM when its parent dies,
// so a crashed herald dev leaves no server behind. (Pdeathsig fires when the
// thread that started the child exits; the Go runtime keeps its threads
// unless a goroutine locked to one ends, which herald does not do there.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
