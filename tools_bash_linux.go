// tools_bash_linux.go makes telson a child subreaper, which Linux alone has
// (the syscall package has prctl on Linux only): a descendant that left its
// process group and cleared its environment is re-parented to telson, which
// kills it with the server (see procTracker.killAdoptedLocked).
package main

import "syscall"

const prSetChildSubreaper = 36

// becomeSubreaper asks Linux to re-parent telson's orphaned descendants to it.
func becomeSubreaper() bool {
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	return errno == 0
}
