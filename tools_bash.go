// tools_bash.go holds the Bash tool: a command run with bash -c in the shell's working
// directory, its output captured in bounded memory and shown as a terminal would show it, and
// the shell's working directory, which a cd changes.
//
// Rules:
//   - a command starts through session.startTask (tools_bg.go): its own process group and
//     marker, the plan-mode sandbox while plan mode is on; a timeout or a cancellation ends it
//     and all it started through stopRun, the one kill path;
//   - output is captured in bounded memory; a cut output is kept whole in a bounded file; the
//     model reads it as a terminal would show it.
package main

import (
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
	"unicode/utf8"
)

var bashTool = toolDef{
	name:  "Bash",
	title: "Run a shell command",
	description: `Runs a command with bash -c; stdout and stderr merged.

- The working directory persists between calls; environment changes do not. stdin is /dev/null.
- timeout: milliseconds (default 30000, max 600000); then the command and its children are stopped.
- A command still running after 240 s (less for clients that give up sooner) comes back with its
  output so far as a background task, which goes on: follow it with ReadBgOutput.
- Output reads as a terminal shows it (colours and progress redraws removed).
- Long output keeps its first and last lines; the whole raw output is saved to output_file.
- run_in_background: true starts it as BackgroundBash does (for servers and watchers).
- In plan mode every file is read-only, /tmp too: write scratch files to $TMPDIR (private, empty).`,
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
	TaskID       int    `json:"task_id,omitempty"` // handed to the background as this task
	Status       string `json:"status,omitempty"`
	Hint         string `json:"hint,omitempty"`
}

// progressEvery is how often a command's new lines are sent as progress, at most.
const progressEvery = 100 * time.Millisecond

// runBash runs the command under a task (see startTask) and waits until it ends, is cancelled,
// or reaches the blocking limit: then it goes on as a background task, and the reply says so.
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
	limit := c.req.outputLimit()
	timeout := cmp.Or(time.Duration(a.Timeout)*time.Millisecond, set.BashTimeout)
	t, ch, err := s.startTask(a.Command, mayChangeDir(a.Command), limit, timeout)
	if err != nil {
		return errorResult("%v", err)
	}
	block := time.After(c.req.blockLimit())
	changed := t.changes()
	var calm <-chan time.Time // new lines are sent at most every progressEvery
	for {
		select {
		case <-t.ended:
			return bashEnded(s, t, ch, limit, false)
		case <-block:
			if s.bg.reserve(set.BgMaxTasks) == 0 { // else the call waits on, up to its timeout
				return bashHandOff(s, t, limit, timeout)
			}
		case <-ctx.Done():
			stopRun(t.marker, t.leader)
			<-t.ended
			t.log.name()
			s.notices.push(t.cancelNotice(s))
			return bashEnded(s, t, ch, limit, true)
		case <-changed:
			changed = nil
			calm = time.After(progressEvery)
			if set.Streaming {
				c.req.progress(t.newestLines())
			}
		case <-calm:
			calm = nil
			changed = t.changes()
		}
	}
}

// bashEnded is the reply once the command has ended: its output, then its status unless it
// succeeded, and its directory. The kept output file goes unless the reply is cut or keep says
// (a cancelled call's notice names it).
func bashEnded(s *session, t *bgTask, ch *child, limit int, keep bool) toolResult {
	o := &bashOutcome{TimedOut: t.timedOut.Load()}
	t.mu.Lock()
	hidden := t.showLocked(o, limit)
	o.ExitCode, o.Signal = t.code, t.signal
	o.DurationMS = t.runtime.Milliseconds()
	t.mu.Unlock()
	if o.Truncated || hidden > 0 {
		o.OutputFile = t.log.name()
	} else if !keep {
		s.srv.procs.discard(t.log)
	}
	o.Output += terminalNote(hidden, o.OutputFile)
	status := "exit status " + strconv.Itoa(o.ExitCode)
	if o.Signal != "" {
		status = "killed by signal " + o.Signal
	}
	if o.TimedOut {
		o.ExitCode = -1
		o.Hint = s.srv.served("To let it finish, call Bash again with a larger timeout (up to " +
			"600000 ms), or use BackgroundBash.")
		status = fmt.Sprintf("timed out after %s; the command was stopped. %s",
			time.Duration(o.DurationMS)*time.Millisecond, o.Hint)
	}
	if ch.dir != "" && !sameDir(ch.dir, ch.cmd.Dir) { // only a call that moved
		s.shell.setDir(ch.dir)
	}
	o.Cwd = s.shell.dir()
	text := cmp.Or(o.Output, "(no output)")
	if o.ExitCode != 0 { // -1 after a signal or the timeout: the status follows the output
		text = strings.TrimSuffix(text, "\n") + "\n[" + status + "]"
	}
	res := structuredResult(text, o)
	res.isError = o.ExitCode != 0
	return res
}

// bashHandOff makes the command, still running at the blocking limit, a background task, and
// replies with its output so far, which the task's reads then go on from.
func bashHandOff(s *session, t *bgTask, limit int, timeout time.Duration) toolResult {
	o := &bashOutcome{Status: "running", OutputFile: t.log.name(), ExitCode: -1}
	t.mu.Lock()
	hidden := t.showLocked(o, limit)
	t.unread = nil // shown: reads go on from here
	t.dropped = 0
	t.dropNL = 0
	t.partial = false
	t.limit = s.srv.set.BgBuffer // a background task's, in a new array from the next write
	t.buf = nil
	t.mu.Unlock()
	s.adopt(t)
	o.TaskID = t.id
	o.Output += terminalNote(hidden, o.OutputFile)
	o.DurationMS = time.Since(t.start).Milliseconds()
	o.Cwd = s.shell.dir()
	o.Hint = fmt.Sprintf(s.srv.served(`It goes on as background task %[1]d: ReadBgOutput `+
		`{"task_id": %[1]d, "wait_ms": 30000} reads what it prints next, KillBgTask `+
		`{"task_id": %[1]d} stops it; it is stopped when it reaches its timeout, %[2]s after it `+
		`started.`), t.id, timeout)
	text := strings.TrimSuffix(cmp.Or(o.Output, "(no output yet)"), "\n") +
		fmt.Sprintf("\n[still running after %s; its complete output goes to %s]\n%s",
			time.Duration(o.DurationMS)*time.Millisecond, o.OutputFile, o.Hint)
	return structuredResult(text, o)
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
		if slices.Contains([]string{"cd", "pushd", "popd", "eval", "source", "."}, w) {
			return true
		}
	}
	return false
}

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

// terminalEscape matches what follows an ESC: a CSI (colours, cursor moves, erasing), a string
// to BEL, ST or the line's end (OSC: titles, links; DCS, SOS, PM, APC; its text the submatch: a
// terminal shows none of it), or a short one. None goes past its line's end.
var terminalEscape = regexp.MustCompile(`^(?:\[[0-?]*[ -/]*[@-~]?|` +
	`[\]PX^_]([^\x07\x1b\n]*)(?:\x07|\x1b\\)?|[ -/]*[0-~]?)`)

// terminalText is command output as a terminal finally shows it, and the count of printable
// characters a terminal never showed: the text of escape sequences (a title, a link's target),
// and concealed text (SGR 8), drawn as blanks.
// A person watching saw every redraw, so what a redraw covered is not counted: bytes do not say
// how long a state was on screen, and a progress line erased by the next is the same bytes
// whether it stayed a second or none. Invalid UTF-8 is replaced, and what a reader does not see
// goes (stripControls).
func terminalText(s string) (text string, hidden int) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if !strings.ContainsAny(s, "\r\b\x1b") { // most output: nothing to render
		return stripControls(s), 0
	}
	sc := screen{rows: [][]rune{nil}}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r != 0x1b {
			if sc.conceal && unicode.IsGraphic(r) && !unicode.IsSpace(r) {
				hidden++
				r = ' ' // as a terminal draws it
			}
			sc.put(r)
			continue
		}
		seq := terminalEscape.FindStringSubmatch(s[i:])
		esc := seq[0]
		i += len(esc)
		for _, r := range seq[1] {
			if unicode.IsGraphic(r) && !unicode.IsSpace(r) {
				hidden++
			}
		}
		if len(esc) > 1 && esc[0] == '[' {
			sc.csi(esc[1:len(esc)-1], esc[len(esc)-1])
		}
	}
	var lines []string
	for _, row := range sc.rows { // blank cells: spaces, none at a line's end
		lines = append(lines,
			strings.ReplaceAll(strings.TrimRight(string(row), "\x00"), "\x00", " "))
	}
	return stripControls(strings.Join(lines, "\n")), hidden
}

// screen is output drawn as on a terminal: rows of cells, a rune each (0 when blank), and a
// cursor, which moves within the rows and columns drawn so far (a terminal's size is unknown);
// a line feed on the last row adds one, as a terminal scrolls.
type screen struct {
	rows     [][]rune
	row, col int
	conceal  bool // SGR 8: characters are drawn as blanks
}

// put draws r at the cursor, or applies it: a line feed, a carriage return, a backspace (the
// cursor moves of csi's E, G and D).
func (sc *screen) put(r rune) {
	line := sc.rows[sc.row]
	switch {
	case r == '\n':
		if sc.row == len(sc.rows)-1 {
			sc.rows = append(sc.rows, nil)
		}
		sc.csi("", 'E')
	case r == '\r':
		sc.csi("", 'G')
	case r == '\b':
		sc.csi("", 'D')
	case unicode.IsControl(r) && r != '\t': // no column
	case sc.col < len(line):
		line[sc.col] = r
		sc.col++
	default:
		sc.rows[sc.row] = append(line, r)
		sc.col++
	}
}

// csi applies a control sequence, given its parameters and final byte: a cursor move (up, down,
// right, left, to the next or previous line's start, to a column), kept within the rows and the
// row's cells, or an erase in line (0: to its end, 1: to its start, the cursor's cell included,
// 2: all of it), or concealed text's start and end (SGR 8, 28); the others change no text.
func (sc *screen) csi(params string, final byte) {
	first, _, _ := strings.Cut(params, ";")
	n, _ := strconv.Atoi(first)
	step := max(n, 1)
	row, col := sc.row, sc.col
	switch final {
	case 'A':
		row -= step
	case 'B':
		row += step
	case 'C':
		col += step
	case 'D':
		col -= step
	case 'E':
		row, col = row+step, 0
	case 'F':
		row, col = row-step, 0
	case 'G':
		col = step - 1
	case 'K':
		line := sc.rows[row]
		from, to := col, len(line)
		if n > 0 {
			from = 0
		}
		if n == 1 {
			to = min(col+1, to)
		}
		clear(line[from:to])
	case 'm': // SGR: 8 conceals what follows, 0 and 28 end it; a colour's numbers are skipped
		ps := strings.Split(params, ";")
		for i := 0; i < len(ps); i++ {
			switch ps[i] {
			case "", "0", "28":
				sc.conceal = false
			case "8":
				sc.conceal = true
			case "38", "48", "58": // 5;n or 2;r;g;b
				i += 2
				if i < len(ps) && ps[i-1] == "2" {
					i += 2
				}
			}
		}
	}
	sc.row = min(max(row, 0), len(sc.rows)-1)
	sc.col = min(max(col, 0), len(sc.rows[sc.row]))
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
	return fmt.Sprintf("\n[a terminal never showed %d printable characters of the output above "+
		"(the text of escape sequences, such as a title or a link's target, or concealed text); %s]\n",
		hidden, where)
}
