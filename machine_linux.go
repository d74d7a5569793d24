// machine_linux.go holds the plan-mode sandbox, which only Linux has (the syscall package has
// these calls on Linux only): an agent's command in plan mode starts as telson itself
// (runSandbox) in new user, mount, network and PID namespaces; there every mount is made
// read-only, /tmp and /run private and empty, /proc the namespace's own, and the loopback
// interface, the only one, is brought up; then the command runs in a nested user namespace,
// where the read-only flags are locked.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// Bash's directory comes from the kernel: its EXIT trap stops it, and its parent (telson, or the
// sandbox in plan mode) reads its working directory from /proc and continues it. Nothing the
// command writes can set it. The sandbox, bash's parent in plan mode, sends it to telson on
// descriptor dirFD, which bash does not inherit.
const (
	dirTrap       = "trap 'builtin kill -STOP $$' EXIT\n"
	dirFromKernel = true
	dirFD         = 3
)

const (
	mountAttrRdonly = 0x1
	atRecursive     = 0x8000
	sysMountSetattr = 442 // the same on every architecture
	sandboxFailed   = 126 // the exit status of a sandbox that could not be made
)

// sandbox makes cmd start as runSandbox, telson re-executed, in new user, mount, network and
// PID namespaces, as root mapped to the caller; runSandbox then runs cmd's program.
func sandbox(cmd *exec.Cmd, exe string) error {
	cmd.Args = append([]string{exe}, cmd.Args...)
	cmd.Path = exe
	cmd.Env = append(cmd.Env, sandboxEnv+"=1")
	cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS |
		syscall.CLONE_NEWNET | syscall.CLONE_NEWPID
	cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{HostID: os.Getuid(), Size: 1}}
	cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{HostID: os.Getgid(), Size: 1}}
	return nil
}

// runSandbox is telson started by sandbox, the first process of its namespaces: it makes the
// read-only view and the network, then runs args in a nested user namespace, where the
// read-only flags are locked, and exits as it did. When it exits, every process left in its
// PID namespace is killed.
func runSandbox(args []string) int {
	os.Unsetenv(sandboxEnv)
	syscall.CloseOnExec(dirFD) // the command does not inherit it
	cmd := exec.Command(args[0], args[1:]...)
	// stdin stays /dev/null
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{Size: 1}}, GidMappings: []syscall.SysProcIDMap{{Size: 1}}}
	err := readOnlyMounts()
	if err == nil {
		err = loopbackUp()
	}
	if err == nil {
		err = cmd.Start()
	}
	if err == nil {
		dir := watchDir(cmd.Process.Pid)
		err = cmd.Wait()
		reportDir(dir)
	}
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "telson: plan-mode sandbox:", err)
		return sandboxFailed
	}
	return cmd.ProcessState.ExitCode() // 255 after a signal
}

// readOnlyMounts makes every mount of this mount namespace private and read-only, mounts the
// PID namespace's own /proc (writable: the nested namespace's ID maps are written there), and
// empty tmpfs on /tmp and /run (the sockets of the user's daemons live there). A working
// directory under /tmp (a project cloned there) is bound back into it, read-only, so it stays
// in view: the bind's source "." is still the directory the tmpfs hid. mount_setattr(2) needs
// Linux 5.12.
func readOnlyMounts() error {
	wd, _ := os.Getwd()
	under := strings.HasPrefix(wd, "/tmp/")
	const private = syscall.MS_NOSUID | syscall.MS_NODEV
	err := mountSetattr("/", mountAttrRdonly, 0)
	if err == nil {
		err = syscall.Mount("proc", "/proc", "proc", private|syscall.MS_NOEXEC, "")
	}
	if err == nil {
		err = syscall.Mount("tmpfs", "/tmp", "tmpfs", private, "size=25%")
	}
	if _, serr := os.Stat("/run"); err == nil && serr == nil {
		err = syscall.Mount("tmpfs", "/run", "tmpfs", private, "size=1m")
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

// mountSetattr sets and clears attributes of the mount tree at path and makes it private
// (mount_setattr(2), which syscall lacks).
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

// loopbackUp brings up lo, the new network namespace's only interface (SIOCSIFFLAGS on a
// struct ifreq): the command reaches its own loopback and nothing else.
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ifreq struct {
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [22]byte // the rest of the union
	}
	copy(ifreq.name[:], "lo")
	ifreq.flags = syscall.IFF_UP | syscall.IFF_RUNNING
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS,
		uintptr(unsafe.Pointer(&ifreq)))
	if errno != 0 {
		return errno
	}
	return nil
}

// Constants of waitid(2), which syscall lacks.
const (
	pPID       = 1         // idtype P_PID
	wNoWait    = 0x1000000 // WNOWAIT: leave the child waitable
	cldStopped = 5         // si_code CLD_STOPPED
	siCodeAt   = 8         // si_code's offset in siginfo_t, on every architecture
)

// watchDir waits until the child pid has exited, leaving it to be reaped, and returns the
// working directory it had when it last stopped itself (Bash's EXIT trap), read from
// /proc/PID/cwd; each stop is continued at once. "" when it never stopped.
func watchDir(pid int) string {
	dir := ""
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WSTOPPED|wNoWait, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 || info[siCodeAt] != cldStopped {
			return dir
		}
		syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), // the stop, taken
			uintptr(unsafe.Pointer(&info)), syscall.WSTOPPED|syscall.WNOHANG, 0, 0)
		if d, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd"); err == nil {
			dir = strings.TrimSuffix(d, " (deleted)")
		}
		syscall.Kill(pid, syscall.SIGCONT)
	}
}

// reportDir sends dir, the command's final directory, to telson on dirFD.
func reportDir(dir string) {
	if dir != "" {
		syscall.Write(dirFD, []byte(dir+"\n"))
	}
}
