// machine.go holds the machinery the tools share, below them: the processes telson starts and
// the one kill path that ends them, the files it writes, the files it reads. Its functions that
// touch the machine are few and small, each in its boundary's section, and the README's "How to
// audit telson in an afternoon" names every one; the rest of this file computes.
//
// Rules:
//   - every process starts through procTracker.start: the leader of its own process group,
//     carrying its run marker (TELSON_RUN), with telson's environment less telson's own secrets
//     (withheldEnv), in the plan-mode sandbox (machine_linux.go) when its spec says so: the tools
//     decide that (session.startTask, tools_bg.go); this file calls nothing above it;
//   - one kill path, stopRun, ends every process telson started, the browser included: TERM to
//     every marked process and its group, and to the group of every leader telson started
//     (leaderGroups), KILL after killGrace; if telson dies, even by SIGKILL, the reaper (telson
//     re-executed before the first child) does the same for the marked ones; a marker must be
//     one telson made;
//   - telson writes only its state files, whole, under STATE_DIR (writeState), its kept output
//     files in one temporary directory, and the browser's profile; what is temporary goes at the
//     end, removed by telson or its reaper;
//   - every file telson reads is a regular file, opened without blocking, read through a cap;
//     every directory it lists is opened without blocking and listed to a cap; in STATE_DIR it
//     reads and writes only what is the user's alone (stateOwn);
//   - procTracker's lock guards bookkeeping only: processes start and die, and files are made and
//     removed, outside it.
package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ---- processes and the kill path ------------------------------------------------------------

const (
	killGrace = 2 * time.Second // between TERM and KILL, whatever ends a process
	// leftWait is how long output may go on once a command's leader has exited: a process it
	// left behind may hold the pipe open.
	leftWait = 100 * time.Millisecond
)

// Variables telson puts in the environment of what it starts.
const (
	markerEnv  = "TELSON_RUN"     // a process's run marker
	reaperEnv  = "TELSON_REAPER"  // telson re-executed as its reaper
	sandboxEnv = "TELSON_SANDBOX" // telson re-executed as the plan-mode sandbox
)

// procSpec is a program to start. What every process gets is not in it: start adds that.
type procSpec struct {
	argv    []string // argv[0] is the program's path
	dir     string
	env     []string            // besides the environment telson passes on
	marker  string              // its run marker (see procTracker.scope)
	sandbox bool                // an agent's command in plan mode
	output  bool                // its stdout and stderr to one pipe, child.out
	cwd     bool                // report its final working directory (child.dir)
	files   []*os.File          // its descriptors 3, 4, ...
	stderr  io.Writer           // its stderr, when not to child.out
	cred    *syscall.Credential // the user it runs as; nil: telson's
}

// child is a process start started, with the read ends of its pipes.
type child struct {
	cmd   *exec.Cmd
	out   *os.File // its stdout and stderr; nil unless asked for
	cwd   *os.File // its descriptor dirFD, where its final directory comes; nil unless asked for
	watch bool     // wait reads its final directory from the kernel (watchDir), not from cwd
	// once waited for: the working directory the command ended in, when Bash's EXIT trap
	// reported it; and whether its process group outlived it (a process it left behind)
	dir  string
	left bool
}

// procTracker starts the server's children and ends them. Every child carries a marker: the
// server's id, then one number per scope (a session, a run), each followed by a dot. The
// reaper, started before the first child, is a child reading its stdin (the lifeline) until it
// closes: telson has then ended; unless telson said it ended cleanly, the reaper kills the
// server's marker and removes the directories telson wrote to the lifeline.
type procTracker struct {
	log      *slog.Logger
	cfg      procConfig
	id       string         // the server's marker
	once     sync.Once      // starts the reaper and makes outDir, before the first child
	started  bool           // set by once: the reaper was tried
	reaper   *exec.Cmd      // nil when it could not start
	lifeline io.WriteCloser // the reaper's stdin: each line is one write, whole, without a lock
	outDir   string         // the kept output files; "" when it could not be made
	starting sync.WaitGroup // starts under way: closeAll waits for them
	scopes   atomic.Int64   // the scopes made so far

	mu     sync.Mutex  // guards the fields below
	kept   []*keptFile // oldest first
	closed bool
}

// procConfig is what the processes telson starts get of telson's start: its executable, which
// the reaper and the sandbox re-execute, and its environment, which childEnv passes on less
// telson's secrets.
type procConfig struct {
	exe  string
	vars []string
}

func newProcTracker(cfg procConfig, log *slog.Logger) *procTracker {
	return &procTracker{log: log, cfg: cfg, id: randomHex(8) + "."}
}

// scope returns a new marker under parent, a marker.
func (pt *procTracker) scope(parent string) string {
	return parent + strconv.FormatInt(pt.scopes.Add(1), 10) + "."
}

// start starts spec as the leader of a new process group, carrying its marker, with telson's
// environment less telson's secrets, and in the plan-mode sandbox when spec says so.
func (pt *procTracker) start(spec procSpec) (*child, error) {
	if !pt.begin() {
		return nil, errors.New("start: the server is shutting down")
	}
	defer pt.starting.Done()
	return pt.launch(spec)
}

// begin counts a start under way, unless the server is closing.
func (pt *procTracker) begin() bool {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if !pt.closed {
		pt.starting.Add(1)
	}
	return !pt.closed
}

// launch starts spec, once the reaper is there: the leader of a new process group (command),
// in the plan-mode sandbox when spec says so, its pipes made.
func (pt *procTracker) launch(spec procSpec) (*child, error) {
	pt.once.Do(pt.startReaper)
	c := &child{cmd: command(spec, pt.cfg.vars)}
	var err error
	if spec.sandbox {
		err = sandbox(c.cmd, pt.cfg.exe)
	}
	var outW, cwdW *os.File
	if spec.output && err == nil {
		c.out, outW, err = os.Pipe()
		c.cmd.Stdout = outW
		c.cmd.Stderr = outW
	}
	c.watch = spec.cwd && !spec.sandbox && dirFromKernel
	if (spec.cwd || spec.sandbox) && !c.watch && err == nil {
		c.cwd, cwdW, err = os.Pipe()
		c.cmd.ExtraFiles = make([]*os.File, dirFD-2) // fds 3 to dirFD, all closed but dirFD
		c.cmd.ExtraFiles[dirFD-3] = cwdW
	}
	if err == nil {
		err = c.cmd.Start()
	}
	outW.Close() // the child has its own copies (a nil file's Close fails, harmlessly)
	cwdW.Close()
	if err != nil {
		c.out.Close()
		c.cwd.Close()
		return nil, fmt.Errorf("start: %w", err)
	}
	return c, nil
}

// command is spec as a command: the leader of its own process group, with its environment.
// Wait waits for a stderr that is not a file at most leftWait once the process has exited.
func command(spec procSpec, vars []string) *exec.Cmd {
	return &exec.Cmd{Path: spec.argv[0], Args: spec.argv, Dir: spec.dir, Stderr: spec.stderr,
		Env: childEnv(vars, spec), ExtraFiles: spec.files, WaitDelay: leftWait,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: spec.cred}}
}

// childEnv is the environment a child gets: telson's, less telson's secrets and internal
// variables (none of it for another user's child: that user's processes could read it), then
// spec's, then its marker.
func childEnv(vars []string, spec procSpec) []string {
	if spec.cred != nil {
		vars = nil
	}
	env := slices.DeleteFunc(slices.Clone(vars), func(kv string) bool {
		name, ok := strings.CutPrefix(kv, "TELSON_")
		name, _, _ = strings.Cut(name, "=")
		return ok && slices.Contains(withheldEnv, name)
	})
	return append(append(env, spec.env...), markerEnv+"="+spec.marker)
}

// internalEnv are the TELSON_ variables that are not settings: markers and the test harness's.
var internalEnv = []string{"RUN", "RUN_MAIN", "REAPER", "SANDBOX", "REQUIRE_BROWSER"}

// withheldEnv are the TELSON_ variables no child's environment gets: the secret ones (the
// HTTP token), then internalEnv.
var withheldEnv = append([]string{"HTTP_TOKEN"}, internalEnv...)

// wait copies c's output to w until every process holding the pipe has closed it, then closes
// w; and it waits for the leader, from the output's end or leftWait on (a wait in the kernel
// while bash runs makes a short command 15% slower), and reads its final directory: from the
// kernel when Bash's EXIT trap stopped it (watchDir), else what came on dirFD. Once the leader
// has exited, the output has leftWait more to end; then wait returns, and the copy goes on
// until the output ends.
func (c *child) wait(w io.WriteCloser) {
	copied := make(chan struct{})
	go func() { // exits at the output's end
		io.Copy(w, c.out)
		c.out.Close()
		w.Close()
		close(copied)
	}()
	if c.watch {
		c.dir = watchDir(c.cmd.Process.Pid)
	} else {
		select {
		case <-copied: // the usual end: bash exited, and nothing it left holds the output
		case <-time.After(leftWait):
		}
	}
	c.cmd.Wait()
	c.left = syscall.Kill(-c.cmd.Process.Pid, 0) == nil // reaped a moment ago: its pid is not reused
	if c.cwd != nil {
		c.cwd.SetReadDeadline(time.Now().Add(leftWait)) // a process left behind may hold it
		d, err := bufio.NewReader(c.cwd).ReadString('\n')
		c.cwd.Close()
		if err == nil {
			c.dir = strings.TrimSuffix(d, "\n")
		}
	}
	select {
	case <-copied:
	case <-time.After(leftWait):
	}
}

// signalNames are the names status gives signals; others are numbers.
var signalNames = map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGKILL: "KILL",
	syscall.SIGINT: "INT", syscall.SIGHUP: "HUP", syscall.SIGSEGV: "SEGV",
	syscall.SIGABRT: "ABRT", syscall.SIGPIPE: "PIPE"}

// status is how the leader ended, once waited for: its exit code, or -1 and a signal's name.
func (c *child) status() (code int, signal string) {
	ws, _ := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return -1, cmp.Or(signalNames[ws.Signal()], strconv.Itoa(int(ws.Signal())))
	}
	return ws.ExitStatus(), ""
}

// startReaper starts the reaper, telson re-executed with the lifeline as its stdin, and makes
// the kept output files' directory, which the reaper removes if telson dies.
func (pt *procTracker) startReaper() {
	pt.started = true
	cmd := command(procSpec{argv: []string{pt.cfg.exe}, env: []string{reaperEnv + "=1"}},
		pt.cfg.vars)
	w, err := cmd.StdinPipe() // closed by a failed start
	if err == nil {
		err = cmd.Start()
	}
	if err == nil {
		pt.reaper = cmd
		pt.lifeline = w
	} else {
		pt.log.Warn("reaper: children may outlive a killed telson", "err", err)
	}
	pt.tellReaper(pt.id) // the marker, first: no child has started yet
	pt.outDir, err = os.MkdirTemp("", "telson-output-*")
	if err != nil {
		pt.log.Warn("output files", "err", err)
	}
	pt.tellReaper(pt.outDir)
}

// tellReaper writes a line to the lifeline: a directory to remove, or "." for a clean end.
func (pt *procTracker) tellReaper(line string) {
	if pt.lifeline != nil && line != "" && !strings.Contains(line, "\n") {
		io.WriteString(pt.lifeline, line+"\n") // one short write to a pipe is never interleaved
	}
}

// removeAtExit has the reaper remove dir once telson has ended, if telson did not.
func (pt *procTracker) removeAtExit(dir string) {
	pt.once.Do(pt.startReaper)
	if filepath.IsAbs(dir) {
		pt.tellReaper(dir)
	}
}

// closeAll lets no process start from now on, once those under way have; then, if the reaper
// was ever tried (something may have started), it kills every process of the server, removes
// the kept files and lets the reaper go.
func (pt *procTracker) closeAll() {
	pt.mu.Lock()
	pt.closed = true
	pt.mu.Unlock()
	pt.starting.Wait()
	pt.once.Do(func() {}) // none starts from now on; one under way has ended
	if !pt.started {
		return // nothing was ever started
	}
	stopRun(pt.id)
	os.RemoveAll(pt.outDir) // "" when it was not made: RemoveAll does nothing
	if pt.lifeline != nil {
		pt.tellReaper(".") // everything is stopped and removed: the reaper has nothing to do
		pt.lifeline.Close()
		pt.reaper.Wait()
	}
}

// runReaper is the reaper process: when its stdin closes, telson has ended. Unless telson said
// it ended cleanly (a last line "."), it kills the marker on the first line and removes the
// directories on the others.
func runReaper(lifeline io.Reader) int {
	b, _ := io.ReadAll(lifeline)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if lines[len(lines)-1] == "." {
		return 0
	}
	if !markerPattern.MatchString(lines[0]) {
		return 2 // run by hand: what it would kill is no run of telson's
	}
	stopRun(lines[0])
	for _, dir := range lines[1:] {
		removeWhenQuiet(dir)
	}
	return 0
}

// removeWhenQuiet removes dir until it has stayed gone for a second (at most ten): a killed
// browser's helper processes die a little after it, and may write to its profile meanwhile
// (Chromium rewrites their environment, so markers do not find them).
func removeWhenQuiet(dir string) {
	const step = 100 * time.Millisecond
	gone := 0
	for i := 0; i < 100 && gone < 10; i++ {
		if _, err := os.Lstat(dir); err == nil {
			os.RemoveAll(dir)
			gone = 0
		} else {
			gone++
		}
		time.Sleep(step) // polling what other processes do, bounded
	}
}

// stopRun is the one kill path. It sends TERM to every process whose marker starts with
// marker and to its process group, and to the groups of leaders, until they are gone, KILL
// after killGrace; then it kills each leader through its os.Process, the one its caller waits
// for (and which someone waits for meanwhile: an unreaped leader keeps its group). A scan
// misses a process in the middle of an exec (its environment reads empty then), such as a
// leader's leftover started as the leader ended: with leaders, it stops at the third scan at
// the soonest.
func stopRun(marker string, leaders ...*os.Process) {
	deadline := time.Now().Add(killGrace)
	signal := syscall.SIGTERM
	for wait := time.Millisecond; wait < 10*time.Second; wait += min(wait, 50*time.Millisecond) {
		pids := markedPids(marker)
		groups := leaderGroups(leaders)
		if len(pids)+len(groups) == 0 && (len(leaders) == 0 || wait > 2*time.Millisecond) {
			break // with leaders, the third scan at the soonest
		}
		if time.Now().After(deadline) {
			signal = syscall.SIGKILL
		}
		for _, pid := range pids {
			pgid, _ := syscall.Getpgid(pid)
			syscall.Kill(pid, signal)
			if pgid > 1 && pgid != syscall.Getpgrp() {
				syscall.Kill(-pgid, signal)
			}
		}
		for _, p := range groups {
			syscall.Kill(-p.Pid, signal)
		}
		time.Sleep(min(wait, 50*time.Millisecond)) // polling external processes, bounded
	}
	for _, p := range leaders {
		p.Kill() // an ended leader is not signalled again (os.Process knows)
	}
}

// leaderGroups are the process groups of leaders that still have members, which no marker
// may find (env -i clears it). A group's id is its leader's pid, which the kernel gives no
// other process while the leader is unreaped or the group has a member: the group is the
// leader's while os.Process has not reaped it, and after while no process has its pid.
func leaderGroups(leaders []*os.Process) []*os.Process {
	return slices.DeleteFunc(slices.Clone(leaders), func(p *os.Process) bool {
		ours := p.Signal(syscall.Signal(0)) == nil || syscall.Kill(p.Pid, 0) == syscall.ESRCH
		return !ours || syscall.Kill(-p.Pid, 0) != nil
	})
}

// markerPattern is a marker procTracker makes: "", which every marker starts with, or any
// other is no marker of one run's.
var markerPattern = regexp.MustCompile(`^[0-9a-f]{16}\.([0-9]+\.)*$`)

// markedPids lists the processes whose marker starts with marker (a zombie has none); none
// when marker is not one (markerPattern). Without /proc (macOS) it asks ps, which shows
// environments.
func markedPids(marker string) []int {
	if !markerPattern.MatchString(marker) {
		return nil
	}
	want := markerEnv + "=" + marker
	ents, err := os.ReadDir("/proc")
	if err != nil {
		out, _ := exec.Command("ps", "-axEww", "-o", "pid=,command=").Output()
		return psMarked(string(out), want)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		if strings.Contains("\x00"+string(env), "\x00"+want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// randomHex is n bytes from crypto/rand in hex (crypto/rand does not fail on the systems
// telson runs on: Go's reader panics rather than return short).
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// psMarked lists the pids in out, ps's lines of a pid and a command with its environment, whose
// environment holds want.
func psMarked(out, want string) []int {
	var pids []int
	for _, line := range strings.Split(out, "\n") {
		pid, err := strconv.Atoi(strings.Fields(line + " x")[0])
		if err == nil && strings.Contains(line, " "+want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ---- files written --------------------------------------------------------------------------

// Kept output files: each holds up to keptFileBytes; beyond keptFiles, the oldest finished ones
// are removed. The first keptEarly bytes wait in memory until more come or the file is named.
const (
	keptFileBytes = 16 << 20
	keptFiles     = 32
	keptEarly     = 64 << 10
)

// keptFile is a command's complete output, up to keptFileBytes. It is made only when its
// output passes keptEarly or a reply names it, so most Bash calls make none (making a file
// costs more than running `true`). One that could not be made keeps nothing. Only its writer
// writes it, but for what came before it was made, which the one who makes it writes.
type keptFile struct {
	path string    // chosen at the start; "" when there is nowhere to keep it
	once sync.Once // makes the file
	f    *os.File
	left int64
	done atomic.Bool // closed: it may be removed to make room

	mu    sync.Mutex // guards the fields below
	early []byte     // what came before the file was made
	named bool       // the file is made, or being made: what comes goes to it
	ended bool       // its writer closed it
}

// keepFile picks a kept output file's path, named after what, and removes the oldest finished
// files beyond keptFiles: a file still being written stays.
func (pt *procTracker) keepFile(what string) *keptFile {
	pt.once.Do(pt.startReaper)
	k, drop := pt.track(what)
	for _, old := range drop {
		os.Remove(old.path)
	}
	return k
}

// track makes a kept file, named after what in outDir, and counts it among the kept ones,
// oldest first: drop are the oldest finished files beyond keptFiles (more are kept while they
// are still written).
func (pt *procTracker) track(what string) (k *keptFile, drop []*keptFile) {
	k = &keptFile{left: keptFileBytes}
	if pt.outDir == "" { // its making failed, and was logged
		return k, nil
	}
	k.path = filepath.Join(pt.outDir, what+"-"+randomHex(8)+".log")
	pt.mu.Lock()
	defer pt.mu.Unlock()
	all := append(pt.kept, k)
	pt.kept = nil
	for _, old := range all {
		if len(all)-len(drop) > keptFiles && old.done.Load() {
			drop = append(drop, old)
		} else {
			pt.kept = append(pt.kept, old)
		}
	}
	return k, drop
}

// discard removes a kept file nobody needs (a Bash reply that was not cut), and none is made
// after. Its writer may go on writing to it (a process the command left behind), under no name.
func (pt *procTracker) discard(k *keptFile) {
	if pt.forget(k) {
		os.Remove(k.path)
	}
}

// forget drops k from the kept files, and from now on it is never made; it reports whether it
// was made.
func (pt *procTracker) forget(k *keptFile) bool {
	pt.mu.Lock()
	pt.kept = slices.DeleteFunc(pt.kept, func(x *keptFile) bool { return x == k })
	pt.mu.Unlock()
	k.once.Do(func() {})
	return k.f != nil
}

// keep keeps p: in memory while the output fits in keptEarly and nobody named the file, else
// in the file.
func (k *keptFile) keep(p []byte) {
	k.mu.Lock()
	early := !k.named && len(k.early)+len(p) <= keptEarly
	if early {
		k.early = append(k.early, p...)
	}
	k.mu.Unlock()
	if !early {
		k.name()
		k.write(p)
	}
}

// name makes the file, unless it is made, and returns its path: a reply names only a file
// that is there.
func (k *keptFile) name() string { return k.mark(true, false) }

// close ends the output: its writer's last call.
func (k *keptFile) close() { k.mark(false, true) }

// mark records that the file is named (then it is made) or that its output ended; once both
// came, the first time, it is closed.
func (k *keptFile) mark(named, ended bool) string {
	k.mu.Lock()
	was := k.named && k.ended
	k.named = k.named || named
	k.ended = k.ended || ended
	named, last := k.named, k.named && k.ended && !was
	k.mu.Unlock()
	if named {
		k.make()
	}
	if last {
		k.f.Close() // a nil file's Close fails, harmlessly
		k.done.Store(true)
	}
	return k.path
}

// make makes the file, once, and writes what came before.
func (k *keptFile) make() {
	k.once.Do(func() {
		k.f, _ = os.OpenFile(k.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		k.mu.Lock()
		early := k.early
		k.early = nil
		k.mu.Unlock()
		k.write(early)
	})
}

func (k *keptFile) write(p []byte) {
	n := min(int64(len(p)), k.left)
	k.f.Write(p[:n]) // a file that was not made is nil: its Write fails, harmlessly
	k.left -= n
}

// stateDir is STATE_DIR, and the user telson runs as, who alone may write there.
type stateDir struct {
	path string
	uid  int
}

// tmpInfix is in the name of writeState's temporary files, then random digits.
const tmpInfix = ".tmp-"

// stateOwn says why path, in STATE_DIR, is not to be trusted, nil when it is (or is not in
// STATE_DIR): STATE_DIR, the folder path is in and path, where they exist, must each be the
// user's and writable by no one else, a symlink and its target both; another user could
// otherwise have made them first and put a token, tasks or a plan there.
func stateOwn(st stateDir, path string) error {
	if rel, err := filepath.Rel(st.path, path); err != nil || !filepath.IsLocal(rel) {
		return nil
	}
	for _, p := range []string{st.path, filepath.Dir(path), path} {
		link, err := os.Lstat(p)
		target, serr := os.Stat(p)
		if serr != nil {
			target = link // a dangling symlink, whose mode means nothing
		}
		if err == nil && notYours(link, target, st.uid) {
			return fmt.Errorf("state: %s is another user's, or others may write it (ls -ldn "+
				"says which), so another user could have put what telson reads there; use a "+
				"STATE_DIR only you can write (chown, chmod go-w, or set TELSON_STATE_DIR)", p)
		}
	}
	return nil
}

// notYours reports whether a path whose link and target are these (the same when it is no
// symlink) is not uid's alone: another user owns either, or others may write the target.
func notYours(link, target fs.FileInfo, uid int) bool {
	return notOwn(link, uid) || notOwn(target, uid) ||
		target.Mode()&fs.ModeSymlink == 0 && target.Mode().Perm()&0o022 != 0
}

// notOwn reports whether another user than uid owns fi.
func notOwn(fi fs.FileInfo, uid int) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) != uid
}

// statePath is where STATE_DIR/name is, through a symlink there to its target (tasks.json may
// be one, for the user's own reasons); name must stay inside STATE_DIR.
func statePath(st stateDir, name string) (string, error) {
	if !filepath.IsLocal(name) {
		return "", fmt.Errorf("state file %s: not a name inside STATE_DIR", name)
	}
	path := filepath.Join(st.path, name)
	if target, err := filepath.EvalSymlinks(path); err == nil {
		return target, nil
	}
	return path, nil
}

// writeState puts data whole in STATE_DIR/name, mode 0600: a temporary file beside it, fsync,
// then a rename over what is there (replace: a regular file, or nothing), else a link, which
// fails when anything is there, a dangling symlink too. A symlink at name is written through
// when replacing (see statePath), never otherwise; stateOwn must find both the user's.
func writeState(st stateDir, name string, data []byte, replace bool) error {
	if err := stateOwn(st, filepath.Join(st.path, name)); err != nil {
		return err
	}
	path, err := statePath(st, name)
	if !replace {
		path = filepath.Join(st.path, name)
	}
	if fi, lerr := os.Lstat(path); replace && lerr == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("write %s: not a regular file", path)
	}
	if err != nil {
		return err
	}
	dir, base := filepath.Split(path)
	os.MkdirAll(dir, 0o700) // the temporary file's making reports a failure
	tmp, err := os.CreateTemp(dir, base+tmpInfix+"*")
	if err != nil {
		return err // os's errors name the file
	}
	defer os.Remove(tmp.Name()) // after a rename it is gone; after a link, a second name
	_, err = tmp.Write(data)
	if err = errors.Join(err, tmp.Sync(), tmp.Close()); err != nil {
		return err
	}
	if replace {
		return os.Rename(tmp.Name(), path)
	}
	return os.Link(tmp.Name(), path)
}

// withStateLock runs fn holding an exclusive flock on STATE_DIR/name.lock. It gives up after
// 5 s, so a stuck process cannot hang a tool call.
func withStateLock(ctx context.Context, st stateDir, name string, fn func() error) error {
	os.MkdirAll(st.path, 0o700) // the open below reports a failure
	path := filepath.Join(st.path, name+".lock")
	// not through a symlink: one another user made would have the user make a file elsewhere
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer f.Close() // closing releases the flock
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Holders keep the lock for milliseconds, so polling is cheap.
	for syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("lock %s: another process holds it; try again", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fn()
}

// removeStaleTemps removes the temporary files writeState left for name when telson was
// killed mid-write. The caller holds name's lock: none is in use.
func removeStaleTemps(st stateDir, name string) {
	path, _ := statePath(st, name) // "" when name is not local: nothing is listed
	dir, base := filepath.Split(path)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), base+tmpInfix) {
			os.Remove(dir + e.Name())
		}
	}
}

// keepAside renames STATE_DIR/name, which does not parse, to name.corrupt-<time> and returns
// that path. A symlink is refused, naming it: what it points to is the user's.
func keepAside(st stateDir, name string) (string, error) {
	path := filepath.Join(st.path, name)
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return "", fmt.Errorf("%s is a symlink: what it points to stays as it is; fix that, "+
			"or remove the link", path)
	}
	aside := path + ".corrupt-" + time.Now().Format("20060102-150405.000000000")
	return aside, os.Rename(path, aside)
}

// ---- files read -----------------------------------------------------------------------------

// readCapped reads path, which must be a regular file of at most limit bytes. The open does
// not block: a FIFO is refused, not waited on.
func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("read %s: not a regular file", path)
	case fi.Size() > limit:
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, limit)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// readState is readCapped, once stateOwn finds path the user's own when it is in STATE_DIR.
func readState(st stateDir, path string, limit int64) ([]byte, error) {
	if err := stateOwn(st, path); err != nil {
		return nil, err
	}
	return readCapped(path, limit)
}

// readableByOthers reports whether users but the owner may read path.
func readableByOthers(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Perm()&0o044 != 0
}

// listDir returns max entries of the directory dir (a symlink to one too), opened without
// blocking, sorted by name; none when it is not one.
func listDir(dir string, max int) []fs.DirEntry {
	f, _ := os.OpenFile(dir, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	defer f.Close()
	entries, _ := f.ReadDir(max) // none when the open failed (a nil file's calls fail)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries
}

// isDir reports whether path is a directory (through symlinks).
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// sameDir reports whether a and b are the same directory, whatever the links to them.
func sameDir(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// exists reports whether anything is at path, a dangling symlink too.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
