// machine_linux.go holds the plan-mode sandbox, which only Linux has (the syscall package has
// these calls on Linux only). An agent's command in plan mode starts as telson itself
// (runSandbox) in a new session, without a controlling terminal, and in new user, mount,
// network, PID, IPC and UTS namespaces; there every mount is made read-only, /proc is the
// namespace's own, /run empty, /dev/shm a private writable directory (the command's TMPDIR),
// /dev/pts a devpts of its own, /dev/mqueue the IPC namespace's, and the loopback interface,
// the only one, is brought up. Then telson runs once more (confine) in a nested user
// namespace, where the read-only flags are locked: it makes /proc read-only, bounds the
// processes, lets writes reach only the private places (Landlock, where the kernel has it),
// installs a seccomp filter that refuses unix sockets, TIOCSTI, the keyrings and mounts, and
// executes the command in its place. What the filter and Landlock's rules hold is data, and
// pure functions, at the end of this file.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
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
	sysMountSetattr = 442        // the same on every architecture
	sandboxFailed   = 126        // the exit status of a sandbox that could not be made
	privateTmp      = "/dev/shm" // a plan-mode command's TMPDIR, private, empty, writable
	// maxProcs bounds a plan-mode command's processes and threads: its RLIMIT_NPROC, which
	// Linux 5.14+ counts in the command's own user namespace but never for root, and on Linux
	// 6.14+ its PID namespace's pid_max, which holds for root too.
	maxProcs = 512
)

// Values of amd64 and arm64, the architectures the filter is written for, which syscall lacks
// on some others (the sandbox is refused there).
const (
	rlimitNproc     = 6
	oPath           = 0x200000
	prSetNoNewPrivs = 38
	seccompFilterOn = 2 // SECCOMP_MODE_FILTER
)

// sandbox makes cmd start as runSandbox, as root mapped to the caller (sandboxCommand).
func sandbox(cmd *exec.Cmd, exe string) error {
	return sandboxCommand(cmd, exe, os.Getuid(), os.Getgid())
}

// runSandbox is telson started by sandbox, the first process of its namespaces: it makes the
// read-only view and the network, then runs telson once more (confine, which runs args) in a
// nested user namespace, where the read-only flags are locked, and exits as it did. When it
// exits, every process left in its PID namespace is killed.
func runSandbox(args []string) int {
	if os.Getpid() != 1 {
		return confine(args) // telson once more, in the nested namespace
	}
	syscall.CloseOnExec(dirFD) // the command does not inherit it
	cmd := exec.Command("/proc/self/exe", args...)
	// stdin stays /dev/null
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = namespaces(syscall.CLONE_NEWNS, 0, 0)
	err := readOnlyMounts()
	if err == nil {
		err = loopbackUp()
	}
	if err == nil {
		err = boundPids()
	}
	if err == nil {
		err = cmd.Start()
	}
	if err == nil {
		dir := watchDir(cmd.Process.Pid)
		err = cmd.Wait()
		if dir != "" { // the command's final directory, to telson
			syscall.Write(dirFD, []byte(dir+"\n"))
		}
	}
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "telson: plan-mode sandbox:", err)
		return sandboxFailed
	}
	return cmd.ProcessState.ExitCode() // 255 after a signal
}

// readOnlyMounts makes every mount of this mount namespace private and read-only, then mounts
// sandboxMounts, each where its target exists. mount_setattr(2) needs Linux 5.12.
func readOnlyMounts() error {
	err := mountReadOnly("/")
	for _, m := range sandboxMounts {
		if _, serr := os.Stat(m.target); err == nil && serr == nil {
			err = syscall.Mount(m.fstype, m.target, m.fstype, m.flags, m.data)
		}
	}
	if err != nil {
		return fmt.Errorf("read-only view: %w", err)
	}
	return nil
}

// boundPids gives the PID namespace at most maxProcs process IDs, on Linux 6.14+, where its
// pid_max is its own; before 6.14 pid_max is the host's and stays untouched.
func boundPids() error {
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil || !ownPidMax(string(release)) {
		return err
	}
	return os.WriteFile("/proc/sys/kernel/pid_max", []byte(strconv.Itoa(maxProcs)), 0)
}

// confine is telson run once more by runSandbox, in the nested namespaces, as the command's
// last step: /proc read-only, at most maxProcs processes, writes only where landlockRules
// allow, the seccomp filter, then the command itself, in this process with the environment
// less sandboxEnv, TMPDIR privateTmp. The thread stays locked: Landlock and the filter hold
// for the thread that executes the command.
func confine(args []string) int {
	runtime.LockOSThread()
	os.Unsetenv(sandboxEnv)
	os.Setenv("TMPDIR", privateTmp)
	// fails only where the limit is lower already
	syscall.Setrlimit(rlimitNproc, &syscall.Rlimit{Cur: maxProcs, Max: maxProcs})
	err := mountReadOnly("/proc")
	if err == nil {
		err = restrictWrites()
	}
	if err == nil {
		err = installFilter()
	}
	if err == nil {
		err = syscall.Exec(args[0], args, os.Environ())
	}
	fmt.Fprintln(os.Stderr, "telson: plan-mode sandbox:", err)
	return sandboxFailed
}

// restrictWrites lets this thread, and what it executes, write only where landlockRules allow
// (Landlock, Linux 5.13+); where the kernel has no Landlock it does nothing.
func restrictWrites() error {
	handled := uint64(landlockWrites)
	set, _, errno := syscall.Syscall(sysLandlockCreateRuleset, uintptr(unsafe.Pointer(&handled)),
		unsafe.Sizeof(handled), 0)
	if errno == syscall.ENOSYS || errno == syscall.EOPNOTSUPP {
		return nil // no Landlock: the read-only mounts still hold
	}
	for _, r := range landlockRules {
		fd, err := syscall.Open(r.path, oPath|syscall.O_CLOEXEC, 0)
		if err != nil || errno != 0 {
			continue // nothing there to allow
		}
		beneath := pathBeneath{r.access, int32(fd)} // fd is closed by the exec
		_, _, errno = syscall.Syscall6(sysLandlockAddRule, set, landlockPathBeneath,
			uintptr(unsafe.Pointer(&beneath)), 0, 0, 0)
	}
	if errno == 0 {
		_, _, errno = syscall.Syscall(sysLandlockRestrictSelf, set, 0, 0)
	}
	return errnoErr(errno)
}

// installFilter sets no_new_privs and installs the seccomp filter on this thread.
func installFilter() error {
	prog := seccompFilter(seccompRules(runtime.GOARCH))
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0)
	if errno == 0 {
		_, _, errno = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_SECCOMP, seccompFilterOn,
			uintptr(unsafe.Pointer(prog)))
	}
	return errnoErr(errno)
}

// mountReadOnly makes the mount tree at path read-only and private (mount_setattr(2), which
// syscall lacks).
func mountReadOnly(path string) error {
	attr := [4]uint64{mountAttrRdonly, 0, syscall.MS_PRIVATE, 0} // struct mount_attr
	name := []byte(path + "\x00")
	_, _, errno := syscall.Syscall6(sysMountSetattr, 0, uintptr(unsafe.Pointer(&name[0])),
		atRecursive, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	return errnoErr(errno)
}

// loopbackUp brings up lo, the new network namespace's only interface (SIOCSIFFLAGS on a
// struct ifreq): the command reaches its own loopback and nothing else.
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	// struct ifreq: the name, then the flags, whose low byte comes first on amd64 and arm64
	// (little-endian), the only architectures the sandbox runs on
	ifreq := [syscall.IFNAMSIZ + 24]byte{'l', 'o',
		syscall.IFNAMSIZ: syscall.IFF_UP | syscall.IFF_RUNNING}
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS,
		uintptr(unsafe.Pointer(&ifreq)))
	return errnoErr(errno)
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
	wait := func(options uintptr) syscall.Errno {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), options, 0, 0)
		return errno
	}
	for {
		errno := wait(syscall.WEXITED | syscall.WSTOPPED | wNoWait)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 || info[siCodeAt] != cldStopped {
			return dir
		}
		wait(syscall.WSTOPPED | syscall.WNOHANG) // the stop, taken
		if d, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd"); err == nil {
			dir = strings.TrimSuffix(d, " (deleted)")
		}
		syscall.Kill(pid, syscall.SIGCONT)
	}
}

// ---- what the sandbox holds: pure computation ----

// errnoErr is errno as an error; nil for 0.
func errnoErr(errno syscall.Errno) error {
	if errno != 0 {
		return errno
	}
	return nil
}

// sandboxCommand makes cmd start as runSandbox, telson (exe) re-executed, in a new session and
// in new user, mount, network, PID, IPC and UTS namespaces, as root mapped to uid and gid;
// runSandbox then runs cmd's program. It refuses where the seccomp filter is not written for
// the architecture.
func sandboxCommand(cmd *exec.Cmd, exe string, uid, gid int) error {
	if audit, _ := seccompRules(runtime.GOARCH); audit == 0 {
		return fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
	}
	cmd.Args = append([]string{exe}, cmd.Args...)
	cmd.Path = exe
	cmd.Env = append(cmd.Env, sandboxEnv+"=1")
	cmd.SysProcAttr = namespaces(syscall.CLONE_NEWNS|syscall.CLONE_NEWNET|syscall.CLONE_NEWPID|
		syscall.CLONE_NEWIPC|syscall.CLONE_NEWUTS, uid, gid)
	// A new session, without a controlling terminal (/dev/tty cannot be opened), whose leader
	// leads its process group as Setpgid would.
	cmd.SysProcAttr.Setsid = true
	return nil
}

// namespaces makes a process start in a new user namespace and the namespaces flags names, as
// root mapped to uid and gid.
func namespaces(flags uintptr, uid, gid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | flags,
		UidMappings: []syscall.SysProcIDMap{{HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{HostID: gid, Size: 1}}}
}

// ownPidMax reports whether Linux of release (6.18.2-arch1) gives each PID namespace its own
// pid_max: 6.14 and later.
func ownPidMax(release string) bool {
	var major, minor int
	fmt.Sscanf(release, "%d.%d", &major, &minor)
	return major > 6 || major == 6 && minor >= 14
}

// sandboxMount is a file system the sandbox mounts (the source is its type).
type sandboxMount struct {
	fstype, target string
	flags          uintptr
	data           string
}

// mountPrivate are the flags of every file system the sandbox mounts.
const mountPrivate = syscall.MS_NOSUID | syscall.MS_NODEV

// sandboxMounts are the file systems mounted over the read-only view: the PID namespace's own
// /proc (writable until confine: the nested namespace's ID maps are written there), an empty
// read-only /run (where the user's daemons keep their sockets and FIFOs), the private TMPDIR,
// a devpts of its own (none of the user's terminals) and the IPC namespace's message queues.
var sandboxMounts = []sandboxMount{{"proc", "/proc", mountPrivate | syscall.MS_NOEXEC, ""},
	{"tmpfs", "/run", mountPrivate | syscall.MS_RDONLY, ""},
	{"tmpfs", privateTmp, mountPrivate, "size=25%"},
	{"devpts", "/dev/pts", mountPrivate | syscall.MS_NOEXEC, "newinstance,ptmxmode=0666"},
	{"mqueue", "/dev/mqueue", mountPrivate | syscall.MS_NOEXEC, ""}}

// Landlock's calls and the rights it handles (Linux 5.13+), which syscall lacks; the numbers
// are the same on every architecture.
const (
	sysLandlockCreateRuleset = 444
	sysLandlockAddRule       = 445
	sysLandlockRestrictSelf  = 446
	landlockPathBeneath      = 1      // LANDLOCK_RULE_PATH_BENEATH
	landlockWriteFile        = 1 << 1 // LANDLOCK_ACCESS_FS_WRITE_FILE
	// landlockWrites are every write of Landlock's first version: write_file, remove_dir,
	// remove_file and make_char, make_dir, make_reg, make_sock, make_fifo, make_block,
	// make_sym. Renaming a file to another directory is refused under any of its rules.
	landlockWrites = 0x1ff2
)

// landlockRule lets a command write beneath path with access.
type landlockRule struct {
	path   string
	access uint64
}

// pathBeneath is struct landlock_path_beneath_attr (packed: the kernel reads its first 12 bytes).
type pathBeneath struct {
	access uint64
	fd     int32
}

// landlockRules are the places a plan-mode command may still write, of the writes Landlock
// handles (landlockWrites): its private TMPDIR, its own terminals, and the devices that discard
// or give bytes. Anywhere else a file, a FIFO or a device cannot be opened for writing, nor a
// file made or removed.
var landlockRules = []landlockRule{{privateTmp, landlockWrites}, {"/dev/pts", landlockWrites},
	{"/dev/ptmx", landlockWriteFile}, {"/dev/null", landlockWriteFile},
	{"/dev/zero", landlockWriteFile}, {"/dev/full", landlockWriteFile}}

// BPF and seccomp(2) values, which syscall lacks.
const (
	bpfLoad   = syscall.BPF_LD | syscall.BPF_W | syscall.BPF_ABS
	bpfAnd    = syscall.BPF_ALU | syscall.BPF_AND | syscall.BPF_K
	bpfJeq    = syscall.BPF_JMP | syscall.BPF_JEQ | syscall.BPF_K
	bpfJge    = syscall.BPF_JMP | syscall.BPF_JGE | syscall.BPF_K
	bpfRet    = syscall.BPF_RET | syscall.BPF_K
	retAllow  = 0x7fff0000                         // SECCOMP_RET_ALLOW
	retRefuse = 0x00050000 | uint32(syscall.EPERM) // SECCOMP_RET_ERRNO: the call fails with EPERM
	archAt    = 4                                  // offsets in struct seccomp_data: arch,
	argAt     = 16                                 // args[0], 8 bytes each, the low half first
	x32Bit    = 0x40000000                         // set in the numbers of amd64's x32 calls
	sockType  = 0xf                                // socket(2)'s type, without its flags
)

// seccompRule refuses system call nr when the 32-bit word at arg in struct seccomp_data,
// masked with mask, equals value; mask 0 refuses every call of nr.
type seccompRule struct{ nr, arg, mask, value uint32 }

// seccompRules are, for goarch, its AUDIT_ARCH and the rules of the filter: no unix socket
// (socketpair still works, but not a datagram pair, which could be pointed at a socket file),
// no TIOCSTI, no keyring, no mount, and no io_uring (which makes sockets without socket(2)).
// The AUDIT_ARCH is 0 where the filter is not written for goarch.
func seccompRules(goarch string) (uint32, []seccompRule) {
	var audit uint32
	var nr []uint32 // socket, socketpair, ioctl, add_key, keyctl, request_key, mount, umount2, pivot_root
	switch goarch {
	case "amd64":
		audit, nr = 0xc000003e, []uint32{41, 53, 16, 248, 250, 249, 165, 166, 155}
	case "arm64":
		audit, nr = 0xc00000b7, []uint32{198, 199, 29, 217, 219, 218, 40, 39, 41}
	default:
		return 0, nil
	}
	rules := []seccompRule{{nr[0], argAt, ^uint32(0), syscall.AF_UNIX},
		{nr[1], argAt + 8, sockType, syscall.SOCK_DGRAM}, {nr[2], argAt + 8, ^uint32(0), syscall.TIOCSTI}}
	// io_uring_setup, open_tree, move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr:
	// numbered alike on every architecture
	for _, n := range append(nr[3:], 425, 428, 429, 430, 431, 432, 433, sysMountSetattr) {
		rules = append(rules, seccompRule{nr: n})
	}
	return audit, rules
}

// seccompFilter is the BPF program of rules for the architecture audit: each call a rule
// matches fails with EPERM, and so does every call of another architecture (32-bit x86 on
// amd64) or of x32; the rest are allowed.
func seccompFilter(audit uint32, rules []seccompRule) *syscall.SockFprog {
	refuse := syscall.SockFilter{Code: bpfRet, K: retRefuse}
	allow := syscall.SockFilter{Code: bpfRet, K: retAllow}
	prog := []syscall.SockFilter{{Code: bpfLoad, K: archAt}, {Code: bpfJeq, Jt: 1, K: audit}, refuse,
		{Code: bpfLoad, K: 0}, {Code: bpfJge, Jf: 1, K: x32Bit}, refuse}
	for _, r := range rules { // A holds the call's number at each rule's start
		prog = append(prog, []syscall.SockFilter{{Code: bpfJeq, Jf: 5, K: r.nr},
			{Code: bpfLoad, K: r.arg}, {Code: bpfAnd, K: r.mask},
			{Code: bpfJeq, Jf: 1, K: r.value}, refuse, allow}...)
	}
	prog = append(prog, allow)
	return &syscall.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
}
