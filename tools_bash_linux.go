// tools_bash_linux.go holds what only Linux has (the syscall package has
// these calls on Linux only): the namespaces and mounts of the plan-mode
// sandbox.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"unsafe"
)

const (
	mountAttrRdonly = 0x1
	atRecursive     = 0x8000
	sysMountSetattr = 442 // the same on every architecture
)

// userNamespace makes cmd, which has no SysProcAttr yet, start in new user and
// mount namespaces, as root mapped to the caller.
func userNamespace(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{HostID: os.Getgid(), Size: 1}},
	}
	return nil
}

// readOnlyMounts makes every mount of this mount namespace private and
// read-only but /proc (a read-only /proc would stop the nested namespace's ID
// maps), then mounts a tmpfs on /tmp. A working directory under /tmp (a
// project cloned there) is bound back into it, read-only, so it stays in view:
// the bind's source "." is still the directory the tmpfs hid. mount_setattr(2)
// needs Linux 5.12.
func readOnlyMounts() error {
	wd, _ := os.Getwd()
	under := strings.HasPrefix(wd, "/tmp/")
	err := mountSetattr("/", mountAttrRdonly, 0)
	if err == nil {
		err = mountSetattr("/proc", 0, mountAttrRdonly)
	}
	if err == nil {
		err = syscall.Mount("tmpfs", "/tmp", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV,
			"size=25%")
	}
	if err == nil && under {
		err = os.MkdirAll(wd, 0o700)
	}
	if err == nil && under {
		err = syscall.Mount(".", wd, "", syscall.MS_BIND|syscall.MS_REC, "")
	}
	if err == nil && under {
		err = mountSetattr(wd, mountAttrRdonly, 0)
	}
	if err != nil {
		return fmt.Errorf("read-only view: %w", err)
	}
	return nil
}

// mountSetattr sets and clears attributes of the mount tree at path and
// makes it private (mount_setattr(2), which syscall lacks).
func mountSetattr(path string, set, clear uint64) error {
	attr := [4]uint64{set, clear, syscall.MS_PRIVATE, 0} // struct mount_attr
	name, err := syscall.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, errno := syscall.Syscall6(sysMountSetattr, 0,
		uintptr(unsafe.Pointer(name)), atRecursive,
		uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
