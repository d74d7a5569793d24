// tools_bash.go holds the Bash tool and the process handling every tool that
// starts a program shares: process groups, the group kill with a grace
// period, the reaper that outlives telson, the head-and-tail output capture
// and the shell's working directory.
//
// Rules:
//   - every child runs in its own process group, registered with procTracker
//     from start until the group is gone; nothing outlives the server;
//   - a kill is TERM to the whole group, then KILL after a short grace;
//   - output is captured in bounded memory whatever a command prints;
//   - nothing here waits on a grandchild that holds a pipe open.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

var bashTool = toolDef{
	name:  "Bash",
	title: "Run a shell command",
	description: `Runs a command with bash -c and returns its output (stdout and stderr merged, in order).

- The working directory persists between calls: "cd src" in one call applies to the next. Environment changes (export, source) do not persist.
- stdin is /dev/null: interactive programs get end-of-file, so pass flags such as -y or --no-pager.
- timeout is in milliseconds (default 30000, at most 600000). At the timeout the command's whole process group is stopped (TERM, then KILL) and you get the output so far.
- Long output keeps its beginning and end with a marker saying how much was cut from the middle; redirect to a file and read parts of it when you need everything.
- A non-zero exit status, a signal or a timeout makes the result an error and states the status.
- For servers, watchers or anything that should keep running, use BackgroundBash instead.

Example: {"command": "go test ./... 2>&1 | tail -20", "timeout": 120000}`,
	input: `{"type":"object","properties":{
		"command":{"type":"string","minLength":1,"description":"The command line to run with bash -c."},
		"timeout":{"type":"integer","minimum":1,"maximum":600000,"description":"Milliseconds before the command is stopped (default 30000, max 600000)."}},
		"required":["command"],"additionalProperties":false}`,
	output: `{"type":"object","properties":{
		"output":{"type":"string"},
		"exit_code":{"type":"integer","description":"-1 when killed by a signal or the timeout"},
		"signal":{"type":"string"},
		"timed_out":{"type":"boolean"},
		"truncated":{"type":"boolean"},
		"duration_ms":{"type":"integer"},
		"cwd":{"type":"string","description":"the working directory after the command"}},
		"required":["output","exit_code","timed_out","truncated","duration_ms","cwd"]}`,
	hints: toolHints{destructive: true, openWorld: true},
	run:   runBash,
}

type bashArgs struct {
	Command string `json:"command"`
	Timeout int    `json:"timeout"`
}

type bashOutcome struct {
	Output     string `json:"output"`
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timed_out"`
	Truncated  bool   `json:"truncated"`
	DurationMS int64  `json:"duration_ms"`
	Cwd        string `json:"cwd"`
}

func runBash(ctx context.Context, c *toolCall) toolResult {
	if res, refused := c.s.planGate("Bash"); refused {
		return res
	}
	var a bashArgs
	if err := json.Unmarshal(c.args, &a); err != nil {
		return errorResult("Bash: invalid arguments: %v", err)
	}
	if strings.TrimSpace(a.Command) == "" {
		return errorResult("Bash: command is empty")
	}
	cfg := c.s.srv.cfg
	timeout := time.Duration(a.Timeout) * time.Millisecond
	if a.Timeout == 0 {
		timeout = time.Duration(cfg.int("BASH_TIMEOUT_MS")) * time.Millisecond
	}
	var stream func(chunk []byte, total int64)
	if cfg.bool("STREAMING") && len(c.req.progressToken) > 0 {
		stream = newLineStreamer(c.req)
	}
	o, err := runShell(ctx, c.s.srv.procs, c.s.shell, a.Command, timeout, cfg.int("OUTPUT_LIMIT"), stream)
	if err != nil {
		return errorResult("Bash: %v", err)
	}
	res := textResult(o.text())
	res.structured = o
	res.isError = o.ExitCode != 0 || o.TimedOut
	return res
}

// text is the reply the model reads: the output, then the status when it is not success.
func (o *bashOutcome) text() string {
	var b strings.Builder
	b.WriteString(o.Output)
	if o.Output == "" {
		b.WriteString("(no output)")
	}
	status := ""
	switch {
	case o.TimedOut:
		status = fmt.Sprintf("timed out after %s; the process group was stopped", time.Duration(o.DurationMS)*time.Millisecond)
	case o.Signal != "":
		status = "killed by signal " + o.Signal
	case o.ExitCode != 0:
		status = "exit status " + strconv.Itoa(o.ExitCode)
	}
	if status != "" {
		if !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
		b.WriteString("[" + status + "]")
	}
	return b.String()
}

// newLineStreamer sends a running command's new complete lines as progress
// messages, at most one every 100 ms, each at most 2,000 characters.
func newLineStreamer(r *rpcRequest) func(chunk []byte, total int64) {
	var (
		partial []byte
		ready   []byte
		last    time.Time
	)
	return func(chunk []byte, total int64) {
		partial = append(partial, chunk...)
		if i := strings.LastIndexByte(string(partial), '\n'); i >= 0 {
			ready = append(ready, partial[:i+1]...)
			partial = append(partial[:0], partial[i+1:]...)
		}
		if len(partial) > 4096 {
			partial = partial[len(partial)-4096:]
		}
		if len(ready) == 0 || time.Since(last) < 100*time.Millisecond {
			if len(ready) > 4096 {
				ready = ready[len(ready)-4096:]
			}
			return
		}
		msg := strings.TrimRight(strings.ToValidUTF8(string(ready), "\uFFFD"), "\n")
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		r.progress(float64(total), 0, msg)
		ready, last = ready[:0], time.Now()
	}
}

// runShell runs command with bash -c in sh's directory, in its own process
// group, and returns what it printed (bounded to limit characters) and how it ended.
func runShell(ctx context.Context, procs *procTracker, sh *shellState, command string, timeout time.Duration, limit int, stream func([]byte, int64)) (*bashOutcome, error) {
	// The EXIT trap tells where the command left the shell, on fd 9, so a cd sticks.
	cmd := exec.Command("bash", "-c", "")
	cmd.Args[2] = procs.shellPreamble(cmd) + "trap 'builtin pwd -P 2>/dev/null >&9' EXIT\n" + command
	cmd.Dir = sh.dir()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	defer pr.Close()
	cwdR, cwdW, err := os.Pipe()
	if err != nil {
		pw.Close()
		return nil, fmt.Errorf("run: %w", err)
	}
	defer cwdR.Close()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.ExtraFiles[6] = cwdW // fd 3+6 = 9
	start := time.Now()
	err = procs.start(cmd)
	pw.Close()
	cwdW.Close()
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	capture := newOutputCapture(limit)
	readDone := make(chan struct{})
	go func() { // exits at EOF or when the read deadline set after exit passes
		defer close(readDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				capture.Write(buf[:n])
				if stream != nil {
					stream(buf[:n], capture.total)
				}
			}
			if err != nil {
				return
			}
		}
	}()
	var timedOut atomic.Bool
	pgid := cmd.Process.Pid
	timer := time.AfterFunc(timeout, func() { timedOut.Store(true); procs.killGroup(pgid, killGrace) })
	stopCancel := context.AfterFunc(ctx, func() { procs.killGroup(pgid, killGrace) })
	waitErr := cmd.Wait()
	timer.Stop()
	stopCancel()
	o := &bashOutcome{TimedOut: timedOut.Load()}
	// bash is gone; what it wrote is in the pipe. A grandchild may still hold
	// the pipe open, so read for a moment only.
	pr.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	<-readDone
	procs.forgetIfGone(cmd.Process.Pid)

	o.DurationMS = time.Since(start).Milliseconds()
	o.Output, o.Truncated = capture.String()
	o.ExitCode, o.Signal = exitStatus(cmd, waitErr)
	if o.TimedOut {
		o.ExitCode = -1
	}
	if d := readLastLine(cwdR); d != "" {
		sh.setDir(d)
	}
	o.Cwd = sh.dir()
	if ctx.Err() != nil && !o.TimedOut {
		return o, fmt.Errorf("cancelled: %w", ctx.Err())
	}
	return o, nil
}

// readLastLine reads what the exited shell wrote to r, stopping at a
// newline or after a moment (a grandchild may hold the pipe), and returns its last line.
func readLastLine(r *os.File) string {
	r.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var b []byte
	buf := make([]byte, 4096)
	for len(b) < 1<<16 {
		n, err := r.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil || (n > 0 && buf[n-1] == '\n') {
			break
		}
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func exitStatus(cmd *exec.Cmd, waitErr error) (code int, signal string) {
	if cmd.ProcessState == nil {
		return -1, ""
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, signalName(ws.Signal())
	}
	return cmd.ProcessState.ExitCode(), ""
}

func signalName(sig syscall.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGKILL: "KILL", syscall.SIGINT: "INT",
		syscall.SIGHUP: "HUP", syscall.SIGSEGV: "SEGV", syscall.SIGABRT: "ABRT", syscall.SIGPIPE: "PIPE", syscall.SIGQUIT: "QUIT"}
	if n, ok := names[sig]; ok {
		return n
	}
	return strconv.Itoa(int(sig))
}

// shellState is the shell's working directory, which Bash's cd changes and
// BackgroundBash and ReadImage use.
type shellState struct {
	mu  sync.Mutex // guards cwd
	cwd string
}

func newShellState() *shellState {
	wd, err := os.Getwd()
	if err != nil {
		wd = "/"
	}
	return &shellState{cwd: wd}
}

// dir is the working directory, or the nearest existing parent when it was removed.
func (sh *shellState) dir() string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for d := sh.cwd; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return d
		}
		if d == filepath.Dir(d) {
			return "/"
		}
	}
}

func (sh *shellState) setDir(d string) {
	sh.mu.Lock()
	sh.cwd = d
	sh.mu.Unlock()
}

// resolve makes path absolute against the working directory.
func (sh *shellState) resolve(path string) string {
	if strings.HasPrefix(path, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			path = filepath.Join(home, path[2:])
		}
	}
	if filepath.IsAbs(path) {
		return filepath.Clean(path)
	}
	return filepath.Join(sh.dir(), path)
}

// outputCapture keeps the first and the last limit/2 bytes written to it and
// counts the rest, so memory stays bounded whatever a command prints.
type outputCapture struct {
	mu    sync.Mutex // guards the fields below
	limit int
	head  []byte
	tail  []byte // the last bytes, at most 2×limit/2 before trimming
	total int64
}

func newOutputCapture(limit int) *outputCapture {
	if limit < 200 {
		limit = 200
	}
	return &outputCapture{limit: limit}
}

func (oc *outputCapture) Write(p []byte) (int, error) {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	n := len(p)
	oc.total += int64(n)
	half := oc.limit / 2
	if room := oc.limit - len(oc.head); room > 0 && len(oc.tail) == 0 {
		take := min(room, len(p))
		oc.head = append(oc.head, p[:take]...)
		p = p[take:]
	}
	if len(p) > 0 {
		if len(p) >= half {
			oc.tail = append(oc.tail[:0], p[len(p)-half:]...)
		} else {
			oc.tail = append(oc.tail, p...)
			if len(oc.tail) > 2*half {
				oc.tail = append(oc.tail[:0], oc.tail[len(oc.tail)-half:]...)
			}
		}
	}
	return n, nil
}

// String returns the kept output as valid UTF-8 and whether anything was cut.
func (oc *outputCapture) String() (string, bool) {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if oc.total <= int64(oc.limit) {
		return validUTF8(string(oc.head) + string(oc.tail)), false
	}
	half := oc.limit / 2
	head := oc.head
	if len(head) > half {
		head = head[:half]
	}
	tail := oc.tail
	if len(tail) > half {
		tail = tail[len(tail)-half:]
	}
	for i := 0; i < 3 && len(head) > 0; i++ { // drop a rune cut in two
		if r, size := utf8.DecodeLastRune(head); r != utf8.RuneError || size != 1 {
			break
		}
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	cut := oc.total - int64(len(head)) - int64(len(tail))
	return validUTF8(string(head)) + fmt.Sprintf("\n\n[... %d bytes of output cut from the middle ...]\n\n", cut) + validUTF8(string(tail)), true
}

func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// killGrace is how long a process group has between TERM and KILL.
const killGrace = 2 * time.Second

const reaperEnv = "TELSON_REAPER"

// procTracker knows every live child process group. It kills them all when
// the server stops. For the case where telson dies without stopping (even by
// SIGKILL) it keeps a reaper process: telson appends "+pgid" and "-pgid"
// lines to a registry file (an unlinked temporary file both processes hold,
// so a spawn costs one write and wakes nobody), and the reaper waits for its
// stdin, a lifeline pipe, to close, then kills every group still registered.
type procTracker struct {
	log *logger

	mu       sync.Mutex // guards the fields below
	groups   map[int]bool
	reaper   *exec.Cmd
	registry *os.File       // append-only "+pgid"/"-pgid" lines the reaper reads
	lifeline io.WriteCloser // the reaper's stdin; closes when telson ends
	closed   bool
}

func newProcTracker(log *logger) *procTracker {
	return &procTracker{log: log, groups: map[int]bool{}}
}

// start starts cmd as the leader of a new process group and tracks the group.
func (pt *procTracker) start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.closed {
		return errors.New("server is shutting down")
	}
	pt.startReaperLocked()
	if err := cmd.Start(); err != nil {
		return err
	}
	pgid := cmd.Process.Pid
	pt.groups[pgid] = true
	if pt.registry != nil {
		fmt.Fprintf(pt.registry, "+%d\n", pgid)
	}
	return nil
}

// shellPreamble readies cmd, a bash -c, to register its own process group
// with the reaper before it runs anything: without it, a telson killed
// between starting the shell and registering the group would leave whatever
// the shell started. It sets cmd.ExtraFiles (fd 8 is the registry) and
// returns the script line to put first.
func (pt *procTracker) shellPreamble(cmd *exec.Cmd) string {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.startReaperLocked()
	cmd.ExtraFiles = make([]*os.File, 7)
	if pt.registry == nil {
		return ""
	}
	cmd.ExtraFiles[5] = pt.registry
	return "builtin echo +$$ >&8; exec 8>&-\n"
}

// removeAtExit registers dir with the reaper, which removes it once telson
// has ended, however it ended (the owner still removes it when it stops).
func (pt *procTracker) removeAtExit(dir string) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.startReaperLocked()
	if pt.registry != nil && !strings.ContainsAny(dir, "\n") {
		fmt.Fprintf(pt.registry, "d%s\n", dir)
	}
}

// forgetIfGone stops tracking a group once no process is left in it.
func (pt *procTracker) forgetIfGone(pgid int) {
	if groupAlive(pgid) {
		return // a grandchild lives on; closeAll will end it
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.groups[pgid] {
		delete(pt.groups, pgid)
		if pt.registry != nil {
			fmt.Fprintf(pt.registry, "-%d\n", pgid)
		}
	}
}

// killGroup sends TERM to the group, waits up to grace for it to empty, then sends KILL.
func (pt *procTracker) killGroup(pgid int, grace time.Duration) {
	killGroupWithGrace(pgid, grace)
}

func killGroupWithGrace(pgid int, grace time.Duration) {
	if syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return
	}
	deadline := time.Now().Add(grace)
	for wait := time.Millisecond; time.Now().Before(deadline); wait = min(wait*2, 50*time.Millisecond) {
		if !groupAlive(pgid) {
			return
		}
		time.Sleep(wait) // polling an external process group, bounded by the grace
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// groupAlive reports whether process group pgid has a process that is not a
// zombie (a zombie waits for its reaper, not for us). Without /proc it
// counts zombies as alive.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		i := strings.LastIndexByte(string(b), ')')
		if err != nil || i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:])) // state ppid pgrp ...
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}

// closeAll kills every tracked group and lets the reaper go.
func (pt *procTracker) closeAll() {
	pt.mu.Lock()
	pt.closed = true
	groups := make([]int, 0, len(pt.groups))
	for g := range pt.groups {
		groups = append(groups, g)
	}
	pt.groups = map[int]bool{}
	reaper, lifeline, registry := pt.reaper, pt.lifeline, pt.registry
	pt.mu.Unlock()
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func(g int) { defer wg.Done(); killGroupWithGrace(g, 500*time.Millisecond) }(g) // exits when the group is gone
	}
	wg.Wait()
	if lifeline != nil {
		lifeline.Close() // the reaper finds nothing left to kill and exits
		reaper.Wait()
		registry.Close()
	}
}

// startReaperLocked starts the reaper on the first spawn. pt.mu must be held.
func (pt *procTracker) startReaperLocked() {
	if pt.reaper != nil {
		return
	}
	pt.reaper = &exec.Cmd{} // tried once; a failure is logged, not retried
	exe, err := os.Executable()
	if err != nil {
		pt.log.warnf("reaper: %v; children may outlive a killed telson", err)
		return
	}
	registry, err := os.CreateTemp("", "telson-groups-*")
	if err != nil {
		pt.log.warnf("reaper: %v; children may outlive a killed telson", err)
		return
	}
	os.Remove(registry.Name()) // both processes hold it open; nothing to clean up
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), reaperEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.ExtraFiles = []*os.File{registry} // fd 3
	w, err := cmd.StdinPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		registry.Close()
		pt.log.warnf("reaper: %v; children may outlive a killed telson", err)
		return
	}
	pt.reaper, pt.lifeline, pt.registry = cmd, w, registry
}

// runReaper is the reaper process: when its stdin closes because telson
// ended, it kills every group the registry on fd 3 still lists.
func runReaper(lifeline io.Reader) int {
	io.Copy(io.Discard, lifeline)
	registry := os.NewFile(3, "registry")
	if registry == nil {
		return 1
	}
	registry.Seek(0, io.SeekStart)
	groups := map[int]bool{}
	var dirs []string
	sc := bufio.NewScanner(registry)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "d/") {
			dirs = append(dirs, line[1:])
			continue
		}
		if n, err := strconv.Atoi(line[min(1, len(line)):]); err == nil && n > 1 {
			groups[n] = line[0] == '+'
		}
	}
	var wg sync.WaitGroup
	for g, live := range groups {
		if live {
			wg.Add(1)
			go func(g int) { defer wg.Done(); killGroupWithGrace(g, 500*time.Millisecond) }(g) // exits when the group is gone
		}
	}
	wg.Wait()
	for _, dir := range dirs {
		os.RemoveAll(dir)
	}
	return 0
}
