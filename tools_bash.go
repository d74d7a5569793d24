// tools_bash.go holds the Bash tool and the process handling every tool that
// starts a program shares: run markers, the kill loop, the reaper that
// outlives telson, the plan-mode sandbox, the output capture and the shell's
// working directory.
//
// Rules:
//   - every child runs in its own process group and carries TELSON_RUN=<marker>
//     in its environment; a marker names the server, the session and the run,
//     so a kill finds what a run left behind (setsid, double forks) in /proc;
//   - one kill path, stopRun, for a timeout, a cancellation, KillBgTask, a
//     session's end, the server's end and the reaper: TERM to every marked
//     process and its group, KILL after killGrace;
//   - nothing outlives the server: closeAll kills its marker, the reaper does
//     the same after telson has died, even by SIGKILL;
//   - output is captured in bounded memory; a cut output is kept whole in a
//     bounded file; the model reads it as a terminal would show it;
//   - in plan mode a command sees the filesystem read-only (Linux namespaces);
//   - procTracker's lock guards bookkeeping only: processes start and die,
//     and files are made and removed, outside it.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"unicode"
)

var bashTool = toolDef{
	name:  "Bash",
	title: "Run a shell command",
	description: `Runs a command with bash -c; stdout and stderr merged.

- The working directory persists between calls; environment changes do not. stdin is /dev/null.
- timeout: milliseconds (default 30000, max 600000); then the command and its children are stopped.
- Output reads as a terminal shows it (colours and progress redraws removed).
- Long output keeps its first and last lines; the whole raw output is saved to output_file.
- run_in_background: true starts it as BackgroundBash does (for servers and watchers).
- In plan mode the filesystem is read-only (/tmp writable).`,
	input: `{"type":"object","properties":{
		"command":{"type":"string","minLength":1},
		"timeout":{"type":"integer","minimum":1,"maximum":600000},
		"description":{"type":"string","description":"What the command does, in a few words."},
		"run_in_background":{"type":"boolean"}},
		"required":["command"]}`,
	output: `{"type":"object","properties":{` + bgProps + `,
		"output":{"type":"string"},
		"exit_code":{"type":"integer","description":"-1 after a signal or the timeout"},
		"timed_out":{"type":"boolean"},
		"truncated":{"type":"boolean"},
		"omitted_lines":{"type":"integer"},
		"omitted_bytes":{"type":"integer"},
		"output_file":{"type":"string","description":"the complete output of a cut reply"},
		"duration_ms":{"type":"integer"},
		"cwd":{"type":"string","description":"the working directory after the command"},
		"hint":{"type":"string"}}}`,
	hints: toolHints{destructive: true, openWorld: true},
	run:   runBash,
}

type bashArgs struct {
	Command    string `json:"command"`
	Timeout    int    `json:"timeout"`
	Background bool   `json:"run_in_background"`
}

type bashOutcome struct {
	Output       string `json:"output"`
	ExitCode     int    `json:"exit_code"`
	Signal       string `json:"signal,omitempty"`
	TimedOut     bool   `json:"timed_out"`
	Truncated    bool   `json:"truncated"`
	OmittedLines int    `json:"omitted_lines,omitempty"`
	OmittedBytes int64  `json:"omitted_bytes,omitempty"`
	OutputFile   string `json:"output_file,omitempty"`
	DurationMS   int64  `json:"duration_ms"`
	Cwd          string `json:"cwd"`
	Hint         string `json:"hint,omitempty"`
}

func runBash(ctx context.Context, c *toolCall) toolResult {
	var a bashArgs
	json.Unmarshal(c.args, &a) // checked against the input schema: it fits
	if strings.TrimSpace(a.Command) == "" {
		return errorResult("command is empty")
	}
	if a.Background {
		return runBackgroundBash(ctx, c)
	}
	s := c.s
	set := s.srv.set
	capture := &outputCapture{limit: set.OutputLimit, procs: s.srv.procs}
	if set.Streaming && len(c.req.progressToken) > 0 {
		capture.stream = c.req
	}
	cmd := bashCommand(a.Command)
	var cwdR, cwdW *os.File // the pipe the cwd trap writes to, when there is one
	if mayChangeDir(a.Command) {
		cmd = bashCommand("trap 'builtin pwd -P >&" + strconv.Itoa(cwdFD) + "' EXIT\n" + a.Command)
		var err error
		cwdR, cwdW, err = os.Pipe()
		if err != nil {
			return errorResult("run: %v", err)
		}
		defer cwdR.Close()
		cmd.ExtraFiles = make([]*os.File, cwdFD-2) // fds 3 to cwdFD, all closed but cwdFD
		cmd.ExtraFiles[cwdFD-3] = cwdW
	}
	run := s.srv.procs.scope(s.bg.scope)
	out, err := s.startShell(cmd, run)
	cwdW.Close()
	if err != nil {
		return errorResult("%v", err)
	}
	defer out.Close()
	timeout := cmp.Or(time.Duration(a.Timeout)*time.Millisecond, set.BashTimeout)
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stopKill := context.AfterFunc(runCtx, func() { stopRun(run, cmd.Process) })
	start := time.Now()
	capture.readUntilExit(out, cmd)
	stopKill()
	o := capture.outcome()
	o.DurationMS = time.Since(start).Milliseconds()
	o.ExitCode, o.Signal = exitStatus(cmd)
	if runCtx.Err() != nil && ctx.Err() == nil { // the timeout, not a cancellation
		o.TimedOut = true
		o.ExitCode = -1
		o.Hint = "To let it finish, call Bash again with a larger timeout (up to 600000 ms), " +
			"or use BackgroundBash."
	}
	if cwdR != nil {
		cwdR.SetReadDeadline(time.Now().Add(leftWait))
		if d, err := bufio.NewReader(cwdR).ReadString('\n'); err == nil {
			s.shell.setDir(strings.TrimSuffix(d, "\n"))
		}
	}
	o.Cwd = s.shell.dir()
	if o.Cwd != cmd.Dir {
		s.checkSkills()
	}
	res := structuredResult(o.text(), o)
	res.isError = o.ExitCode != 0 || o.TimedOut
	return res
}

// text is the reply the model reads: the output, then the status when it is not success.
func (o *bashOutcome) text() string {
	text := cmp.Or(o.Output, "(no output)")
	status := ""
	switch {
	case o.TimedOut:
		status = fmt.Sprintf("timed out after %s; the command was stopped. %s",
			time.Duration(o.DurationMS)*time.Millisecond, o.Hint)
	case o.Signal != "":
		status = "killed by signal " + o.Signal
	case o.ExitCode != 0:
		status = "exit status " + strconv.Itoa(o.ExitCode)
	}
	if status == "" {
		return text
	}
	return strings.TrimSuffix(text, "\n") + "\n[" + status + "]"
}

func lastBytes(b []byte, n int) []byte { return b[max(0, len(b)-n):] }

// cwdFD is the descriptor the shell's EXIT trap writes its final working directory to: a
// command's ExtraFiles[cwdFD-3], the slots before it left closed.
const cwdFD = 9

// startShell starts cmd, a bash command, as run in the shell's directory with its output to
// a new pipe, whose read end it returns. In plan mode, cmd runs in runSandbox's read-only view
// of the filesystem, or is refused where that cannot be made.
func (s *session) startShell(cmd *exec.Cmd, run string) (*os.File, error) {
	cmd.Dir = s.shell.dir()
	if s.planActive() {
		exe, err := os.Executable()
		if err == nil {
			err = userNamespace(cmd)
		}
		if err != nil {
			return nil, fmt.Errorf("refused: in plan mode commands run in a read-only sandbox, "+
				"which this system cannot make (%v); finish planning with PlanMode first", err)
		}
		cmd.Args = append([]string{exe}, cmd.Args...)
		cmd.Path = exe
		cmd.Env = append(os.Environ(), sandboxEnv+"=1")
	}
	out, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	defer w.Close() // the child has its own copy
	cmd.Stdout = w
	cmd.Stderr = w
	if err := s.srv.procs.startRun(cmd, run); err != nil {
		out.Close()
		return nil, fmt.Errorf("start: %w", err)
	}
	return out, nil
}

// Reading a command's output: most commands end within quickEnd, waited for
// without a goroutine; a process bash left behind may hold the output open
// for leftWait after bash exited.
const (
	quickEnd = 50 * time.Millisecond
	leftWait = 100 * time.Millisecond
)

// readUntilExit copies out, the output pipe, until every process holding it
// has closed it or leftWait after bash exited, and waits for bash.
func (oc *outputCapture) readUntilExit(out *os.File, cmd *exec.Cmd) {
	out.SetReadDeadline(time.Now().Add(quickEnd))
	_, err := io.Copy(oc, out)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		cmd.Wait()
		return
	}
	out.SetReadDeadline(time.Time{})
	exited := make(chan struct{})
	go func() { // exits with bash
		cmd.Wait()
		out.SetReadDeadline(time.Now().Add(leftWait))
		close(exited)
	}()
	io.Copy(oc, out)
	<-exited
}

// bashPath is where bash is, looked up once.
var bashPath = sync.OnceValue(func() string {
	path, err := exec.LookPath("bash")
	if err != nil {
		return "bash" // exec.Command looks again and says why it cannot run
	}
	return path
})

// bashCommand is bash -c command. bash is named by its path, which spares
// bash its own search of PATH; $0 stays "bash".
func bashCommand(command string) *exec.Cmd {
	return exec.Command(bashPath(), "-c", command, "bash")
}

// mayChangeDir says whether command could change the shell's working
// directory. Only then does bash run an EXIT trap reporting it, which costs
// bash the exec of the command's last program in place of a fork. It
// could when a word is a builtin that changes directory or runs other text
// (cd, pushd, popd, eval, source, .), or when the shell builds words:
// expansions, quotes, escapes, globs and braces can spell cd.
func mayChangeDir(command string) bool {
	if strings.ContainsAny(command, "$`'\"\\*?[{") {
		return true
	}
	notWord := func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("._-/+:,@%", r)
	}
	for _, w := range strings.FieldsFunc(command, notWord) {
		if slices.Contains(dirBuiltins, w) {
			return true
		}
	}
	return false
}

// dirBuiltins are the words that make mayChangeDir true.
var dirBuiltins = []string{"cd", "pushd", "popd", "eval", "source", "."}

// signalNames are the names exitStatus gives signals; others are numbers.
var signalNames = map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGKILL: "KILL",
	syscall.SIGINT: "INT", syscall.SIGHUP: "HUP", syscall.SIGSEGV: "SEGV",
	syscall.SIGABRT: "ABRT", syscall.SIGPIPE: "PIPE"}

// exitStatus is how cmd, waited for, ended: its exit code, or -1 and a signal's name.
func exitStatus(cmd *exec.Cmd) (code int, signal string) {
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return -1, cmp.Or(signalNames[ws.Signal()], strconv.Itoa(int(ws.Signal())))
	}
	return cmd.ProcessState.ExitCode(), ""
}

// shellState is the shell's working directory, which Bash's cd changes and
// BackgroundBash and ReadImage use.
type shellState struct {
	mu  sync.Mutex // guards cwd
	cwd string
}

func newShellState() *shellState {
	wd, _ := os.Getwd() // "" when it failed: dir falls back to "." or "/"
	return &shellState{cwd: wd}
}

// dir is the working directory, or the nearest existing parent when it was removed.
func (sh *shellState) dir() string {
	sh.mu.Lock()
	cwd := sh.cwd
	sh.mu.Unlock()
	for d := cwd; ; d = filepath.Dir(d) {
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

// outputCapture keeps the first limit bytes a command prints and its last
// limit/2; once the output is longer than limit, all of it goes to a kept
// file too, so memory stays bounded whatever a command prints. Only the
// goroutine that runs the command uses it: it has no lock.
type outputCapture struct {
	limit  int
	procs  *procTracker
	stream *rpcRequest // when set, new lines go to it as progress
	head   []byte
	tail   []byte // the last bytes, at most limit before trimming to limit/2
	total  int64
	lines  int // newlines printed
	file   *keptFile
	sent   time.Time // when progress was last sent
}

func (oc *outputCapture) Write(p []byte) (int, error) {
	oc.total += int64(len(p))
	oc.lines += bytes.Count(p, []byte{'\n'})
	if oc.file == nil && oc.total > int64(oc.limit) { // a file once the output is cut
		oc.file = oc.procs.keepFile("bash")
		oc.file.keep(oc.head)
	}
	oc.file.keep(p)
	// progress: the lines p ends, at most every 100 ms
	if end := bytes.LastIndexByte(p, '\n'); oc.stream != nil && end >= 0 &&
		time.Since(oc.sent) >= 100*time.Millisecond {
		text, _ := terminalText(string(lastBytes(p[:end], 2000)))
		oc.stream.progress(float64(oc.total), text)
		oc.sent = time.Now()
	}
	take := min(oc.limit-len(oc.head), len(p))
	oc.head = append(oc.head, p[:take]...)
	oc.tail = append(oc.tail, p[take:]...)
	if len(oc.tail) > oc.limit {
		oc.tail = append(oc.tail[:0], lastBytes(oc.tail, oc.limit/2)...)
	}
	return len(p), nil
}

// outcome is the kept output, once the command is done; a cut falls on line
// boundaries when there are any, and says how many lines and bytes it left out.
func (oc *outputCapture) outcome() *bashOutcome {
	if oc.total <= int64(oc.limit) {
		text, hidden := terminalText(string(oc.head))
		return &bashOutcome{Output: text + terminalNote(hidden, "")}
	}
	oc.file.f.Close()
	head := oc.head[:oc.limit/2]
	if i := bytes.LastIndexByte(head, '\n'); i >= 0 {
		head = head[:i+1]
	}
	tail := lastBytes(oc.tail, oc.limit/2)
	if i := bytes.IndexByte(tail, '\n'); i < len(tail)-1 {
		tail = tail[i+1:]
	}
	o := &bashOutcome{Truncated: true, OutputFile: oc.file.path}
	o.OmittedBytes = oc.total - int64(len(head)) - int64(len(tail))
	o.OmittedLines = oc.lines - bytes.Count(head, []byte{'\n'}) - bytes.Count(tail, []byte{'\n'})
	headText, hiddenHead := terminalText(string(head))
	tailText, hiddenTail := terminalText(string(tail))
	o.Output = fmt.Sprintf("%s\n[... %d lines (%d bytes) left out; "+
		"the complete output is in %s ...]\n\n%s", headText, o.OmittedLines,
		o.OmittedBytes, o.OutputFile, tailText) + terminalNote(hiddenHead+hiddenTail, o.OutputFile)
	return o
}

// terminalEscape matches what follows an ESC in a line: a CSI (colours, cursor moves), a
// string to BEL, ST or the line's end (OSC: titles, links; DCS, SOS, PM, APC; its text the
// submatch: a terminal shows none of it), or a short one.
var terminalEscape = regexp.MustCompile(`^(?:\[[0-?]*[ -/]*[@-~]?|` +
	`[\]PX^_]([^\x07\x1b]*)(?:\x07|\x1b\\)?|[ -/]*[0-~]?)`)

// terminalText is command output as a terminal shows its final text: escape sequences are
// dropped and end with their line at the latest, a carriage return goes back to the line's
// start and what follows overwrites it ("abcdef\rXY" shows "XYcdef"; a column is a rune),
// invalid UTF-8 is replaced and what a reader does not see goes (stripControls). hidden
// counts the printable characters a terminal would not show: overwritten, or the text of
// an escape sequence.
func terminalText(s string) (text string, hidden int) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if !strings.ContainsAny(s, "\r\x1b") { // most output: nothing to render
		return stripControls(s), 0
	}
	hide := func(r rune) { // a printable character not shown
		if unicode.IsGraphic(r) && !unicode.IsSpace(r) {
			hidden++
		}
	}
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		var b strings.Builder // the line without its escape sequences
		for j := strings.IndexByte(line, 0x1b); j >= 0; j = strings.IndexByte(line, 0x1b) {
			seq := terminalEscape.FindStringSubmatch(line[j+1:])
			for _, r := range seq[1] {
				hide(r)
			}
			b.WriteString(line[:j])
			line = line[j+1+len(seq[0]):]
		}
		b.WriteString(line)
		lines[i] = b.String()
		if !strings.ContainsRune(lines[i], '\r') {
			continue
		}
		var cells []rune // the line as shown, a rune a column
		col := 0
		for _, r := range lines[i] {
			switch {
			case r == '\r':
				col = 0
			case unicode.IsControl(r) && r != '\t': // no column
			case col < len(cells):
				if cells[col] != r { // the same again hides nothing
					hide(cells[col])
				}
				cells[col] = r
				col++
			default:
				cells = append(cells, r)
				col++
			}
		}
		lines[i] = string(cells)
	}
	return stripControls(strings.Join(lines, "\n")), hidden
}

// terminalNote says that terminalText hid printable characters, and where the raw bytes
// are: in file, or, when the output was short enough to keep none, through cat -v.
func terminalNote(hidden int, file string) string {
	if hidden == 0 {
		return ""
	}
	where := "run the command again through `cat -v` to see them, if that is safe"
	if file != "" {
		where = "the raw bytes are in " + file
	}
	return fmt.Sprintf("\n[the terminal rendering above hid %d printable characters "+
		"(overwritten after a carriage return, or inside escape sequences); %s]\n", hidden, where)
}

// Kept output files: each holds up to keptFileBytes; the oldest beyond keptFiles are removed.
const (
	keptFileBytes = 16 << 20
	keptFiles     = 32
)

// keptFile is a command's complete output, up to keptFileBytes. One that
// could not be created has no file, and keeps nothing, as a nil one.
type keptFile struct {
	f    *os.File
	path string
	left int64
}

func (k *keptFile) keep(p []byte) {
	if k == nil || k.f == nil {
		return
	}
	n := min(int64(len(p)), k.left)
	k.f.Write(p[:n])
	k.left -= n
}

// killGrace is how long processes have between TERM and KILL, whatever ends them.
const killGrace = 2 * time.Second

const (
	reaperEnv  = "TELSON_REAPER"
	sandboxEnv = "TELSON_SANDBOX"
	markerEnv  = "TELSON_RUN"
)

// procTracker starts the server's children and ends them. Every child carries a marker: the
// server's id, then one number per scope (a session, a run), each followed by a dot. When
// telson ends without stopping (even by SIGKILL), its reaper, a child process reading its
// stdin (the lifeline pipe) until it closes, kills the server's marker and removes the
// directories telson wrote to the lifeline. The reaper starts before the first child.
type procTracker struct {
	log           *slog.Logger
	id            string         // the server's marker
	reaperStarted atomic.Bool    // the first start claimed the reaper's start
	reaperReady   chan struct{}  // closed once the reaper runs (or failed to)
	reaper        *exec.Cmd      // set before reaperReady closes
	lifeline      *os.File       // the reaper's stdin; nil without a reaper. Lines are
	outDir        string         // written whole, without a lock. Kept files live in outDir.
	starting      sync.WaitGroup // starts under way; closeAll waits for them

	mu     sync.Mutex // guards the fields below
	scopes int
	kept   []string // kept output files, oldest first
	closed bool
}

func newProcTracker(log *slog.Logger) *procTracker {
	id := fmt.Sprintf("%d-%d.", os.Getpid(), time.Now().UnixNano()) // unique on this machine
	return &procTracker{log: log, id: id, reaperReady: make(chan struct{})}
}

// scope returns a new marker under parent, a marker.
func (pt *procTracker) scope(parent string) string {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.scopes++
	return parent + strconv.Itoa(pt.scopes) + "."
}

// start starts cmd with the server's marker.
func (pt *procTracker) start(cmd *exec.Cmd) error { return pt.startRun(cmd, pt.id) }

// startRun starts cmd as the leader of a new process group carrying marker.
func (pt *procTracker) startRun(cmd *exec.Cmd, marker string) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, markerEnv+"="+marker)
	pt.ensureReaper()
	pt.mu.Lock()
	closed := pt.closed
	if !closed {
		pt.starting.Add(1)
	}
	pt.mu.Unlock()
	if closed {
		return errors.New("server is shutting down")
	}
	defer pt.starting.Done()
	return cmd.Start()
}

// ensureReaper starts the reaper and the kept files' directory on the first call; every call
// returns once they are there (or failed).
func (pt *procTracker) ensureReaper() {
	if !pt.reaperStarted.CompareAndSwap(false, true) {
		<-pt.reaperReady
		return
	}
	defer close(pt.reaperReady)
	exe, _ := os.Executable() // "" fails to start below
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), reaperEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	if err == nil {
		cmd.Stdin = r
		fmt.Fprintln(w, pt.id) // the pipe holds it: the reaper always reads the marker
		err = cmd.Start()
		r.Close()
	}
	if err != nil {
		pt.log.Warn("reaper: children may outlive a killed telson", "err", err)
	} else {
		pt.reaper = cmd
		pt.lifeline = w
	}
	dir, err := os.MkdirTemp("", "telson-output-*")
	if err != nil {
		pt.log.Warn("output files", "err", err)
		return
	}
	pt.outDir = dir
	if pt.lifeline != nil {
		pt.lifeline.WriteString(dir + "\n")
	}
}

// removeAtExit registers dir with the reaper, which removes it once telson has ended,
// however it ended (the owner still removes it when it stops).
func (pt *procTracker) removeAtExit(dir string) {
	pt.ensureReaper()
	if pt.lifeline != nil && filepath.IsAbs(dir) && !strings.Contains(dir, "\n") {
		pt.lifeline.WriteString(dir + "\n") // one short write to a pipe is never interleaved
	}
}

// keepFile creates a kept output file named after what, removing the oldest beyond keptFiles.
func (pt *procTracker) keepFile(what string) *keptFile {
	pt.ensureReaper()
	if pt.outDir == "" { // its making failed, and was logged
		return &keptFile{}
	}
	f, err := os.CreateTemp(pt.outDir, what+"-*.log")
	if err != nil {
		pt.log.Warn("output files", "err", err)
		return &keptFile{}
	}
	oldest := ""
	pt.mu.Lock()
	pt.kept = append(pt.kept, f.Name())
	if len(pt.kept) > keptFiles {
		oldest = pt.kept[0]
		pt.kept = pt.kept[1:]
	}
	pt.mu.Unlock()
	if oldest != "" {
		os.Remove(oldest)
	}
	return &keptFile{f: f, path: f.Name(), left: keptFileBytes}
}

// closeAll kills every process of the server, removes the kept files and lets the reaper go.
func (pt *procTracker) closeAll() {
	pt.mu.Lock()
	pt.closed = true
	pt.mu.Unlock()
	pt.starting.Wait()
	if !pt.reaperStarted.Load() {
		return // nothing was ever started
	}
	<-pt.reaperReady
	stopRun(pt.id)
	os.RemoveAll(pt.outDir)
	if pt.lifeline != nil {
		pt.lifeline.Close() // the reaper finds nothing left to kill and exits
		pt.reaper.Wait()
	}
}

// runReaper is the reaper process: when its stdin closes because telson ended, it kills the
// marker on its first line and removes the directories listed after.
func runReaper(lifeline io.Reader) int {
	b, _ := io.ReadAll(lifeline)
	lines := strings.Split(string(b), "\n")
	stopRun(lines[0])
	for _, dir := range lines[1:] {
		if dir != "" {
			removeWhenQuiet(dir)
		}
	}
	return 0
}

// removeWhenQuiet removes dir until it has stayed gone for a second (at most
// ten): a killed browser's helper processes die a little after it, and may
// write to its profile meanwhile (Chromium rewrites their environment, so
// markers do not find them).
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
// marker and to its process group until they are gone, KILL after killGrace; then it kills
// each leader through its os.Process: a scan misses a process in the middle of an exec (its
// environment reads empty then), and the leader is the one its caller waits for.
func stopRun(marker string, leaders ...*os.Process) {
	deadline := time.Now().Add(killGrace)
	signal := syscall.SIGTERM
	for wait := time.Millisecond; wait < 10*time.Second; wait += min(wait, 50*time.Millisecond) {
		pids := markedPids(marker)
		if len(pids) == 0 {
			break
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
		time.Sleep(min(wait, 50*time.Millisecond)) // polling external processes, bounded
	}
	for _, p := range leaders {
		p.Kill() // an ended leader is not signalled again (os.Process knows)
	}
}

// markedPids lists the processes whose marker starts with marker (a zombie
// has none). Without /proc (macOS) it asks ps, which shows environments.
func markedPids(marker string) []int {
	want := markerEnv + "=" + marker
	var pids []int
	ents, err := os.ReadDir("/proc")
	if err != nil {
		out, _ := exec.Command("ps", "-axEww", "-o", "pid=,command=").Output()
		for _, line := range strings.Split(string(out), "\n") {
			pid, err := strconv.Atoi(strings.Fields(line + " x")[0])
			if err == nil && strings.Contains(line, " "+want) {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		if bytes.Contains(append([]byte{0}, env...), []byte("\x00"+want)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// sandboxFailed is the exit status of a sandbox that could not be made.
const sandboxFailed = 126

// runSandbox is telson started by startShell, inside its namespaces: it makes
// every mount read-only and /tmp a private tmpfs, then runs args in a nested
// user namespace, where the read-only flags are locked, and exits as it did.
func runSandbox(args []string) int {
	cmd := exec.Command(args[0], args[1:]...)
	// stdin stays /dev/null; cwdFD, inherited without close-on-exec, stays open
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	os.Unsetenv(sandboxEnv)
	userNamespace(cmd)
	err := readOnlyMounts()
	if err == nil {
		err = cmd.Run()
	}
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "telson: plan-mode sandbox:", err)
		return sandboxFailed
	}
	return cmd.ProcessState.ExitCode() // 255 after a signal
}
