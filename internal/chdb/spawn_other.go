//go:build !linux

package chdb

import "syscall"

// sysProcAttr: only Linux can tie the child's life to its parent's.
func sysProcAttr() *syscall.SysProcAttr { return nil }
