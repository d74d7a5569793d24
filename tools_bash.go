// tools_bash.go holds the Bash tool: a command run with bash -c in the shell's working
// directory, its output captured in bounded memory and shown as a terminal would show it, and
// the shell's working directory, which a cd changes.
//
// Rules:
//   - a command starts through session.startCommand (machine.go): its own process group and
//     marker, the plan-mode sandbox while plan mode is on; a timeout or a cancellation ends it
//     and all it started through stopRun, the one kill path;
//   - output is captured in bounded memory; a cut output is kept whole in a bounded file; the
//     model reads it as a terminal would show it.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	command := a.Command
	trackDir := mayChangeDir(command)
	if trackDir {
		command = "trap 'builtin pwd -P >&" + strconv.Itoa(cwdFD) + "' EXIT\n" + command
	}
	marker := s.srv.procs.scope(s.bg.scope)
	ch, err := s.startCommand(command, marker, trackDir)
	if err != nil {
		return errorResult("%v", err)
	}
	timeout := cmp.Or(time.Duration(a.Timeout)*time.Millisecond, set.BashTimeout)
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stopKill := context.AfterFunc(runCtx, func() { stopRun(marker, ch.cmd.Process) })
	start := time.Now()
	ch.wait(capture, false)
	stopKill()
	o := capture.outcome()
	o.DurationMS = time.Since(start).Milliseconds()
	o.ExitCode, o.Signal = ch.status()
	if runCtx.Err() != nil && ctx.Err() == nil { // the timeout, not a cancellation
		o.TimedOut = true
		o.ExitCode = -1
		o.Hint = "To let it finish, call Bash again with a larger timeout (up to 600000 ms), " +
			"or use BackgroundBash."
	}
	if trackDir {
		if d := ch.finalDir(); d != "" {
			s.shell.setDir(d)
		}
	}
	o.Cwd = s.shell.dir()
	if o.Cwd != ch.cmd.Dir {
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

// shellState is the shell's working directory, which Bash's cd changes and
// BackgroundBash and ReadImage use.
type shellState struct {
	home string // where ~/ points

	mu  sync.Mutex // guards cwd
	cwd string
}

// dir is the working directory, or the nearest existing parent when it was removed.
func (sh *shellState) dir() string {
	sh.mu.Lock()
	cwd := sh.cwd
	sh.mu.Unlock()
	for d := cwd; ; d = filepath.Dir(d) {
		if isDir(d) {
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
	path = expandHome(path, sh.home)
	if filepath.IsAbs(path) {
		return filepath.Clean(path)
	}
	return filepath.Join(sh.dir(), path)
}

// outputCapture keeps the first limit bytes a command prints and its last
// limit/2; once the output is longer than limit, all of it goes to a kept
// file too, so memory stays bounded whatever a command prints. Only the
// goroutine that copies the command's output writes it, and outcome reads it
// once that is done: it has no lock.
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
		oc.stream.progress(float64(oc.total), terminalText(string(lastBytes(p[:end], 2000))))
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

// Close ends the capture: the command's output has ended.
func (oc *outputCapture) Close() error {
	oc.file.close()
	return nil
}

// outcome is the kept output, once the command is done; a cut falls on line
// boundaries when there are any, and says how many lines and bytes it left out.
func (oc *outputCapture) outcome() *bashOutcome {
	if oc.total <= int64(oc.limit) {
		return &bashOutcome{Output: terminalText(string(oc.head))}
	}
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
	o.Output = fmt.Sprintf("%s\n[... %d lines (%d bytes) left out; "+
		"the complete output is in %s ...]\n\n%s", terminalText(string(head)), o.OmittedLines,
		o.OmittedBytes, o.OutputFile, terminalText(string(tail)))
	return o
}

// terminalEscape matches an escape sequence: CSI (colours, cursor moves), OSC (titles,
// links; to BEL or ST, or the end) and the two-byte ones.
var terminalEscape = regexp.MustCompile(`\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[ -/]*[0-~])`)

// terminalText is command output as a terminal shows its final text: escape sequences are
// dropped, each line keeps what its last carriage return left (a progress bar's last state),
// invalid UTF-8 is replaced and other control characters but tab go.
func terminalText(s string) string {
	s = terminalEscape.ReplaceAllString(strings.ToValidUTF8(s, "\uFFFD"), "")
	if strings.Contains(s, "\r") { // most output has none: its lines are left whole
		lines := strings.Split(s, "\n")
		for i, line := range lines {
			line = strings.TrimSuffix(line, "\r") // a CRLF line ending
			lines[i] = line[strings.LastIndexByte(line, '\r')+1:]
		}
		s = strings.Join(lines, "\n")
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return -1
		}
		return r
	}, s)
}
