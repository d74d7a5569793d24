// tools_bg.go holds the background task tools: BackgroundBash starts a
// command that keeps running, ReadBgOutput returns what it printed since the
// previous read (or its newest lines), ListBgTasks lists the session's tasks,
// KillBgTask stops one.
//
// Rules:
//   - tasks belong to a session and die with it; each carries a marker of
//     the session's (see procTracker), so a kill finds what it left behind;
//   - a task keeps at most BG_BUFFER_BYTES of unread output: beyond that the
//     oldest unread bytes are dropped and counted; its complete output goes
//     to a bounded log file;
//   - a reply or notice that leaves output out says how many lines and bytes,
//     and names the log; a read ends at a line's end, and … marks a line
//     whose start was left out;
//   - a reader waits on a channel closed at every change, never by polling;
//   - no lock is held across a process start or a file write: a start under way counts
//     toward BG_MAX_TASKS, and closeAll waits for it;
//   - a task's end is said once: by a notice, or by the reply that reports it.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Output schemas: a task, and a task with the output a read took.
const (
	bgProps = `"task_id":{"type":"integer"},"pid":{"type":"integer"},
		"command":{"type":"string"},
		"status":{"type":"string","enum":["running","exited","killed"],
			"description":"killed: ended by a signal"},
		"exit_code":{"type":"integer","description":"-1 while running or after a signal"},
		"signal":{"type":"string"},
		"runtime_ms":{"type":"integer"},"unread_bytes":{"type":"integer"},
		"unread_lines":{"type":"integer"},
		"dropped_bytes":{"type":"integer","description":"output lost since the previous read"},
		"log_file":{"type":"string","description":"the task's complete output"}`
	bgRequired = `"task_id","pid","command","status","exit_code","runtime_ms",
		"unread_bytes","unread_lines","dropped_bytes"`
	bgTaskSchema = `{"type":"object","properties":{` + bgProps + `,"hint":{"type":"string"}},
		"required":[` + bgRequired + `]}`
	bgReadSchema = `{"type":"object","properties":{` + bgProps + `,"output":{"type":"string"},
		"hint":{"type":"string"},
		"left_out_bytes":{"type":"integer",
			"description":"output left out before this reply's: dropped, or passed over by tail"},
		"left_out_lines":{"type":"integer"}},
		"required":[` + bgRequired + `,"output"]}`
	bgIDInput = `"task_id":{"type":"integer","minimum":1}`
)

var backgroundBashTool = toolDef{
	name:  "BackgroundBash",
	title: "Start a background command",
	describe: func(s *session) string {
		return fmt.Sprintf(s.srv.served(
			`Starts a command with bash -c in the background and returns its task id
at once: for servers, watchers, long builds.

- Runs in Bash's working directory; stdout and stderr merged; the complete
  output (up to 16 MiB) also goes to log_file.
- ReadBgOutput reads new output, KillBgTask stops the task and all it started,
  ListBgTasks lists tasks.
- Up to %d bytes of unread output are kept; up to %d tasks run at once.
  The next tool result says when a task ends, and how much of its output is unread.
- In plan mode every file is read-only, /tmp too: write scratch files to $TMPDIR.`),
			s.srv.set.BgBuffer, s.srv.set.BgMaxTasks)
	},
	input: `{"type":"object","properties":{"command":{"type":"string","minLength":1}},
		"required":["command"]}`,
	output: bgTaskSchema,
	hints:  toolHints{destructive: true, openWorld: true},
	run:    runBackgroundBash,
}

var readBgOutputTool = toolDef{
	name:  "ReadBgOutput",
	title: "Read a background task's output",
	describe: func(s *session) string {
		return fmt.Sprintf(s.srv.served(
			`Returns a background task's output since the previous read,
then its status; a Bash command handed to the background is read the same way.

- wait_ms (max 60000): when nothing is waiting, wait for output or the end (less where the
  client gives up on a call sooner: the reply says so).
- tail: return only the last N lines of the unread output (the newest), passing over the rest.
- At most %d bytes per reply (OUTPUT_LIMIT), cut at a line's end; the rest waits for the next read.
- A reply that leaves output out says how many lines and bytes, and names the complete log.
- Output reads as a terminal shows it (colours and progress redraws removed); log_file
  keeps the raw bytes.`), s.srv.set.OutputLimit)
	},
	input: `{"type":"object","properties":{` + bgIDInput + `,
		"wait_ms":{"type":"integer","minimum":0,"maximum":60000},
		"tail":{"type":"integer","minimum":1}},
		"required":["task_id"]}`,
	output: bgReadSchema,
	hints:  toolHints{readOnly: true},
	run:    runReadBgOutput,
}

var listBgTasksTool = toolDef{
	name:  "ListBgTasks",
	title: "List background tasks",
	description: `Lists this session's background tasks, newest first
(the last 100 finished are kept); running_only: true leaves out those that ended.`,
	input: `{"type":"object","properties":{"running_only":{"type":"boolean",
		"description":"Only the tasks still running (default false)."}}}`,
	output: `{"type":"object","properties":{"tasks":{"type":"array","items":` + bgTaskSchema + `}},
		"required":["tasks"]}`,
	hints: toolHints{readOnly: true, idempotent: true},
	run:   runListBgTasks,
}

var killBgTaskTool = toolDef{
	name:  "KillBgTask",
	title: "Stop a background task",
	description: `Stops a background task and every process it started (TERM, then KILL
after 2 s); answers how it ended and its last lines. A task that already ended is not an error.`,
	input:  `{"type":"object","properties":{` + bgIDInput + `},"required":["task_id"]}`,
	output: bgReadSchema,
	hints:  toolHints{destructive: true, idempotent: true},
	run:    runKillBgTask,
}

// killTailLines is how many last lines of unread output KillBgTask shows, and tailBytes the
// most bytes of a command's newest output it, a progress message or a cancel notice shows.
const (
	killTailLines = 10
	tailBytes     = 2000
)

// bgTasks is one session's background tasks.
type bgTasks struct {
	scope string         // the session's marker: its tasks' and Bash runs' start with it
	wg    sync.WaitGroup // counts the tasks' wait goroutines
	// starts counts starts under way; closeAll waits for them, so none escapes it
	starts sync.WaitGroup

	mu       sync.Mutex    // guards the fields below
	tasks    []*bgTask     // oldest first
	left     []*os.Process // leaders of commands whose process groups outlived them
	nextID   int
	starting int  // tasks reserved, not yet listed: they count toward BG_MAX_TASKS
	closed   bool // the session ended: nothing starts
}

func newBgTasks(procs *procTracker) *bgTasks {
	return &bgTasks{scope: procs.scope(procs.id)}
}

// bgTask is a command and its output nobody read yet: a background task, or a Bash call's
// command, until it ends or is handed to the background (then it becomes one).
type bgTask struct {
	id       int         // 0 until it is a background task
	leader   *os.Process // bash, the group leader
	command  string
	marker   string
	start    time.Time
	limit    int           // the most unread bytes kept: BG_BUFFER_BYTES once listed
	headMax  int           // the first bytes kept for a Bash reply; 0 for a background task
	log      *keptFile     // the complete output; written by the copying goroutine
	ended    chan struct{} // closed when bash has exited and the status is final
	timer    *time.Timer   // a Bash call's timeout, which stops it; nil for a background task
	timedOut atomic.Bool   // the timeout stopped it

	mu      sync.Mutex    // guards the fields below
	head    []byte        // the first headMax bytes
	total   int64         // bytes written
	lines   int           // newlines written
	unread  []byte        // at most limit bytes, in buf while the task runs
	buf     []byte        // the array unread lives in: twice the limit, so memory stays bounded
	dropped int64         // unread bytes lost since the previous read
	dropNL  int           // the newlines among them
	partial bool          // unread begins with the end of a line whose start was dropped
	sent    int64         // the output up to here went out as progress
	changed chan struct{} // closed and replaced at new output
	done    bool
	runtime time.Duration // from the start to the end
	code    int           // the exit status; -1 while running or after a signal
	signal  string
	quiet   bool   // no notice announces the end: a Bash reply or KillBgTask's says it
	notice  string // what announces the end, once it came; "" before
}

// bgInfo is a task in structured content.
type bgInfo struct {
	TaskID       int     `json:"task_id"`
	Pid          int     `json:"pid"`
	Command      string  `json:"command"`
	Status       string  `json:"status"`
	ExitCode     int     `json:"exit_code"`
	Signal       string  `json:"signal,omitempty"`
	RuntimeMS    int64   `json:"runtime_ms"`
	UnreadBytes  int     `json:"unread_bytes"`
	UnreadLines  int     `json:"unread_lines"`
	DroppedBytes int64   `json:"dropped_bytes"`
	LeftOutBytes int     `json:"left_out_bytes,omitempty"`
	LeftOutLines int     `json:"left_out_lines,omitempty"`
	LogFile      string  `json:"log_file,omitempty"`
	Hint         string  `json:"hint,omitempty"`
	Output       *string `json:"output,omitempty"`
}

// runBackgroundBash starts a task. The start itself runs without the lock: it is reserved
// (toward BG_MAX_TASKS) and counted in starts (which closeAll waits for).
func runBackgroundBash(ctx context.Context, c *toolCall) toolResult {
	var a bashArgs
	json.Unmarshal(c.args, &a) // checked against the input schema: it fits
	if strings.TrimSpace(a.Command) == "" {
		return errorResult("command is empty")
	}
	s := c.s
	most := s.srv.set.BgMaxTasks
	if running := s.bg.reserve(most); running > 0 {
		return errorResult("%d tasks are already running, the most allowed (BG_MAX_TASKS=%d); "+
			"stop one with KillBgTask first", running, most)
	}
	t, ch, err := s.startTask(a.Command, false, 0, 0)
	if err != nil {
		s.bg.mu.Lock()
		s.bg.starting--
		s.bg.mu.Unlock()
		return errorResult("%v", err)
	}
	t.log.name()
	s.adopt(t)
	info, status := t.state(s) // it may have ended already
	info.Hint = fmt.Sprintf(s.srv.served(`Read its output with ReadBgOutput {"task_id": %[1]d, `+
		`"wait_ms": 5000}; stop it with KillBgTask {"task_id": %[1]d}.`), t.id)
	text := fmt.Sprintf("Started background task %d (pid %d) in %s, %s; its complete output "+
		"goes to %s.\n%s", t.id, info.Pid, ch.cmd.Dir, status, info.LogFile, info.Hint)
	return structuredResult(text, info)
}

// startTask starts command, the agent's, with bash -c in the shell's working directory under
// a new task, which is not listed until adopt; its output is copied to it. With trackDir,
// Bash's directory trap goes first and the command's final directory comes back (child.dir).
// headMax keeps the first output bytes, for a Bash reply; a timeout stops it. The start is
// counted in starts, which closeAll waits for, unless the session is ending: then nothing
// starts. The tools' decision: while plan mode is on (planActive) the command runs in the
// read-only sandbox, or is refused where that cannot be made.
func (s *session) startTask(command string, trackDir bool, headMax int,
	timeout time.Duration) (*bgTask, *child, error) {
	b := s.bg
	b.mu.Lock()
	closed := b.closed
	if !closed {
		b.starts.Add(1)
	}
	b.mu.Unlock()
	if closed {
		return nil, nil, errors.New("start: the session is ending")
	}
	defer b.starts.Done()
	// A Bash call's reply shows at most the last headMax/2 bytes, a cancel's notice tailBytes.
	most := s.srv.set.BgBuffer
	t := &bgTask{command: command, marker: s.srv.procs.scope(b.scope), start: time.Now(),
		limit: min(most, cmp.Or(headMax, most)+tailBytes), headMax: headMax,
		ended: make(chan struct{}), code: -1, changed: make(chan struct{}), quiet: true}
	if trackDir {
		command = dirTrap + command
	}
	spec := procSpec{argv: []string{s.srv.set.env.bash, "-c", command, "bash"}, dir: s.shell.dir(),
		marker: t.marker, sandbox: s.planActive(), output: true, cwd: trackDir}
	ch, err := s.srv.procs.start(spec)
	if err != nil && spec.sandbox {
		err = fmt.Errorf("refused: in plan mode commands run in a read-only sandbox, "+
			"which this system cannot make (%w); finish planning with PlanMode first", err)
	}
	if err != nil {
		return nil, nil, err
	}
	t.leader = ch.cmd.Process
	what := "task"
	if timeout > 0 { // a Bash call's command
		what = "bash"
		t.timer = time.AfterFunc(timeout, func() {
			t.timedOut.Store(true)
			stopRun(t.marker, t.leader)
		})
	}
	t.log = s.srv.procs.keepFile(what)
	b.wg.Add(1)
	go t.run(s, ch) // exits once bash has exited and leftWait has passed
	return t, ch, nil
}

// reserve counts a task to come toward BG_MAX_TASKS, unless most run or come already: then it
// returns how many, else 0. adopt, or a failed start, ends the count. Of the finished tasks,
// the newest 100 stay listed.
func (b *bgTasks) reserve(most int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	running := b.starting
	finished := 0
	for i := len(b.tasks) - 1; i >= 0; i-- {
		select {
		case <-b.tasks[i].ended:
			finished++
			if finished > 100 {
				b.tasks = slices.Delete(b.tasks, i, i+1)
			}
		default:
			running++
		}
	}
	if running >= most {
		return running
	}
	b.starting++
	return 0
}

// adopt lists t, started by startTask and reserved, as a background task with a new id: its
// end is announced, now if it came before.
func (s *session) adopt(t *bgTask) {
	b := s.bg
	b.mu.Lock()
	defer b.mu.Unlock()
	b.starting--
	b.nextID++
	t.mu.Lock()
	t.id = b.nextID // set before t is listed: the list's readers read it without t.mu
	t.quiet = false
	if t.done {
		t.announceLocked(s)
	}
	t.mu.Unlock()
	b.tasks = append(b.tasks, t)
}

// list is the session's tasks, newest first.
func (b *bgTasks) list() []*bgTask {
	b.mu.Lock()
	tasks := slices.Clone(b.tasks)
	b.mu.Unlock()
	slices.Reverse(tasks)
	return tasks
}

// closeAll ends the session's tasks and everything its commands left, once the starts under
// way are done; nothing starts after.
func (b *bgTasks) closeAll() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.starts.Wait()
	var leaders []*os.Process
	for _, t := range b.list() {
		leaders = append(leaders, t.leader)
	}
	stopRun(b.scope, leaders...)
	b.wg.Wait()          // the leaders are dead: each run ends within leftWait
	if len(b.left) > 0 { // no run adds to it now
		stopRun(b.scope, b.left...) // a group no marker finds (env -i) ends too
	}
}

// run copies the task's output to it until bash has exited (and leftWait more), records how it
// ended and announces it. The copy goes on while a process bash left behind holds the output:
// until it ends, which a kill brings about.
func (t *bgTask) run(s *session, ch *child) {
	defer s.bg.wg.Done()
	ch.wait(t)
	if ch.left { // closeAll ends its group, where a process may have no marker (env -i)
		s.bg.mu.Lock()
		s.bg.left = append(s.bg.left, t.leader)
		s.bg.mu.Unlock()
	}
	if t.timer != nil {
		t.timer.Stop()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = true
	t.runtime = time.Since(t.start)
	t.code, t.signal = ch.status()
	t.unread = bytes.Clone(t.unread) // a finished task holds its unread bytes only
	t.buf = nil
	close(t.ended) // output may still come from a process bash left behind
	t.announceLocked(s)
}

// announceLocked words t's end and queues it, unless a reply says it; t.mu must be held (a
// reply's state() then sees it).
func (t *bgTask) announceLocked(s *session) {
	i, status := t.infoLocked()
	t.notice = fmt.Sprintf(s.srv.served("background task %d %s; %d lines (%d bytes) of its "+
		`output unread (ReadBgOutput {"task_id": %d}); %s`), t.id, status, i.UnreadLines,
		i.UnreadBytes, t.id, logHint(i.LogFile))
	if !t.quiet {
		s.notices.push(t.notice)
	}
}

// Close ends the task's log: its output has ended.
func (t *bgTask) Close() error {
	t.log.close()
	return nil
}

// Write adds output, dropping the oldest unread bytes beyond the limit, then logs it, after
// the lock: what the log shows can be read. The unread bytes stay in one array: when its end
// is reached they move back to its start, a copy of at most limit bytes once per limit bytes
// written.
func (t *bgTask) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.head = append(t.head, p[:min(t.headMax-len(t.head), len(p))]...)
	t.total += int64(len(p))
	t.lines += lineCount(p)
	kept := p
	if over := len(t.unread) + len(p) - t.limit; over > 0 {
		gone := min(over, len(t.unread))
		// a copy only when p alone is more than the buffer holds
		dropped := append(t.unread[:gone:gone], p[:over-gone]...)
		t.dropNL += lineCount(dropped)
		t.partial = dropped[over-1] != '\n'
		t.unread = t.unread[gone:]
		kept = p[over-gone:]
		t.dropped += int64(over)
	}
	if len(t.unread)+len(kept) > cap(t.unread) {
		if t.buf == nil {
			t.buf = make([]byte, 0, 2*t.limit)
		}
		t.unread = append(t.buf[:0], t.unread...)
	}
	t.unread = append(t.unread, kept...)
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
	t.log.keep(p)
	return len(p), nil
}

// bgTake is what a read took: output, and what it left out before it.
type bgTake struct {
	out       string
	leftBytes int // dropped, or passed over by tail
	leftLines int
	dropped   int64 // of leftBytes, dropped when the buffer was full
	partial   bool  // out begins with the end of a line whose start was left out
}

// take removes unread output and returns it. With lines 0 it takes up to limit bytes, cut at a
// line's end unless one line is longer; else all, of which it returns the last lines, at most
// limit bytes. It never cuts a character in two: one the pipe delivered in part stays for the
// next read.
func (t *bgTask) take(lines, limit int) bgTake {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.unread)
	if lines == 0 && n > limit { // to the last line's end, or limit when one line is longer
		n = cmp.Or(bytes.LastIndexByte(t.unread[:limit], '\n')+1, limit)
	}
	for i := n - 1; i >= max(0, n-3) && (n < len(t.unread) || !t.done); i-- {
		if utf8.RuneStart(t.unread[i]) {
			if !utf8.FullRune(t.unread[i:n]) {
				n = i
			}
			break
		}
	}
	out := t.unread[:n]
	r := bgTake{leftBytes: int(t.dropped), leftLines: t.dropNL, dropped: t.dropped,
		partial: t.partial && n > 0}
	t.unread = t.unread[n:]
	t.dropped = 0
	t.dropNL = 0
	t.partial = t.partial && n == 0
	if lines > 0 {
		i := len(bytes.TrimSuffix(out, []byte{'\n'}))
		for n := 0; n < lines && i >= 0; n++ {
			i = bytes.LastIndexByte(out[:i], '\n')
		}
		shown := lastLines(out[i+1:], limit)
		passed := out[:len(out)-len(shown)]
		r.leftBytes += len(passed)
		r.leftLines += lineCount(passed)
		if len(passed) > 0 {
			r.partial = passed[len(passed)-1] != '\n'
		}
		out = shown
	}
	r.out = string(out)
	return r
}

// lineCount is how many lines end in b.
func lineCount(b []byte) int { return bytes.Count(b, []byte{'\n'}) }

// lastLines is the end of b, at most n bytes, from a line's start unless one line is longer
// (then from a character's start).
func lastLines(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	b = b[len(b)-n:]
	if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
		return b[i+1:]
	}
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
		b = b[1:]
	}
	return b
}

// changes is the channel closed at the next output.
func (t *bgTask) changes() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// newestLines is the complete lines printed since it was last called, at most their last
// tailBytes, as a terminal shows them: what a progress notification says.
func (t *bgTask) newestLines() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	fresh := lastBytes(t.unread, int(t.total-t.sent))
	end := bytes.LastIndexByte(fresh, '\n') + 1
	t.sent = t.total - int64(len(fresh)-end)
	text, _ := terminalText(string(lastLines(fresh[:end], tailBytes)))
	return strings.TrimSuffix(text, "\n")
}

// showLocked puts in o what a Bash reply shows of the output so far: all of it when it fits in
// limit, else its first and last lines, cut at line ends, saying what was left out and where
// it all is; and returns how many printable characters the terminal rendering hid. t.mu must
// be held.
func (t *bgTask) showLocked(o *bashOutcome, limit int) (hidden int) {
	if t.total <= int64(limit) {
		o.Output, hidden = terminalText(string(t.head))
		return hidden
	}
	head := t.head[:min(len(t.head), limit/2)]
	head = head[:cmp.Or(bytes.LastIndexByte(head, '\n')+1, len(head))] // to its last line's end
	tail := lastLines(t.unread, limit/2)
	o.Truncated = true
	o.OmittedBytes = t.total - int64(len(head)+len(tail))
	o.OmittedLines = t.lines - lineCount(head) - lineCount(tail)
	headText, hiddenHead := terminalText(string(head))
	tailText, hiddenTail := terminalText(string(tail))
	o.Output = fmt.Sprintf("%s\n[... %d lines (%d bytes) left out; the complete output is in "+
		"%s ...]\n\n%s", headText, o.OmittedLines, o.OmittedBytes, t.log.path, tailText)
	return hiddenHead + hiddenTail
}

// cancelNotice tells the agent of its Bash call the client cancelled, once the command has
// ended: the command, how long it ran, its last lines, the file with all of it.
func (t *bgTask) cancelNotice(s *session) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	tail, _ := terminalText(string(lastBytes(t.unread, tailBytes)))
	lines := strings.Split(strings.TrimSuffix(tail, "\n"), "\n")
	return fmt.Sprintf(s.srv.served("[cancelled] The client cancelled the Bash call of %q after "+
		"%s, and the command was stopped. Its last lines:\n%s\n[its complete output is in %s]"),
		cutRunes(t.command, 200), t.runtime.Round(time.Millisecond),
		strings.Join(lines[max(0, len(lines)-5):], "\n"), t.log.path)
}

// state describes the task, and says its status in words, for a reply: a
// notice of the task's end still waiting would say it twice, so it is removed.
func (t *bgTask) state(s *session) (bgInfo, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.notices.remove(t.notice) // "" while it runs: no notice is empty
	return t.infoLocked()
}

// infoLocked describes the task; t.mu must be held. The status is "running for 12s", "exited with
// status 0 after 1m4s" or "killed by signal TERM after 3s".
func (t *bgTask) infoLocked() (bgInfo, string) {
	d := time.Since(t.start)
	if t.done {
		d = t.runtime
	}
	i := bgInfo{TaskID: t.id, Pid: t.leader.Pid, Command: t.command, Status: "running",
		ExitCode: t.code, Signal: t.signal, RuntimeMS: d.Milliseconds(),
		UnreadBytes: len(t.unread), UnreadLines: lineCount(t.unread), DroppedBytes: t.dropped,
		LogFile: t.log.path}
	d = d.Truncate(time.Millisecond)
	if d >= time.Second {
		d = d.Round(time.Second)
	}
	status := "running for "
	switch {
	case t.done && t.timedOut.Load():
		i.Status = "killed"
		status = "stopped at its timeout, after "
	case t.signal != "":
		i.Status = "killed"
		status = "killed by signal " + t.signal + " after "
	case t.done:
		i.Status = "exited"
		status = fmt.Sprintf("exited with status %d after ", t.code)
	}
	return i, status + d.String()
}

// report is the reply of ReadBgOutput and KillBgTask: note, the output taken
// (see take), the task's status.
func (t *bgTask) report(s *session, note string, lines, limit int) toolResult {
	r := t.take(lines, limit)
	out, hidden := terminalText(r.out)
	if r.partial {
		out = "…" + out
	}
	out += terminalNote(hidden, t.log.path)
	info, status := t.state(s)
	info.Output = &out
	info.Hint = strings.TrimSuffix(note, "\n")
	info.DroppedBytes = r.dropped
	info.LeftOutBytes = r.leftBytes
	info.LeftOutLines = r.leftLines
	text := note
	if r.leftBytes > 0 {
		text += fmt.Sprintf("[%d lines (%d bytes) left out above: ", r.leftLines, r.leftBytes)
		if r.dropped > 0 {
			text += fmt.Sprintf("%d bytes dropped, as the task printed more than its %d-byte "+
				"buffer holds since the previous read; ", r.dropped, t.limit)
		}
		if r.partial {
			text += "… marks the end of a line whose start was left out; "
		}
		text += logHint(info.LogFile) + "]\n"
	}
	text += strings.TrimSuffix(cmp.Or(out, "(no new output)"), "\n") + "\n"
	if info.UnreadBytes > 0 {
		next := s.srv.served("call ReadBgOutput again to read on")
		if info.UnreadBytes > limit {
			next = fmt.Sprintf(s.srv.served(`more than one reply holds: ReadBgOutput `+
				`{"task_id": %d, "tail": 50} shows the newest lines, or %s`), t.id, next)
		}
		text += fmt.Sprintf("[%d more lines (%d bytes) waiting: %s; %s]\n", info.UnreadLines,
			info.UnreadBytes, next, logHint(info.LogFile))
	}
	text += fmt.Sprintf("[task %d %s]", t.id, status)
	return structuredResult(text, info)
}

// logHint names the complete log and a search for the errors in it.
func logHint(file string) string {
	return fmt.Sprintf("the complete log is %[1]s (`grep -n -i -E 'error|fail' %[1]s` finds "+
		"its errors)", file)
}

type bgArgs struct {
	TaskID int `json:"task_id"`
	WaitMS int `json:"wait_ms"`
	Tail   int `json:"tail"`
}

// bgFind finds the task a call names, or says why not.
func bgFind(c *toolCall) (*bgTask, bgArgs, toolResult) {
	var a bgArgs
	json.Unmarshal(c.args, &a) // checked against the input schema: it fits
	for _, t := range c.s.bg.list() {
		if t.id == a.TaskID {
			return t, a, toolResult{}
		}
	}
	return nil, a, errorResult("no background task %d in this session; "+
		"ListBgTasks shows the tasks there are", a.TaskID)
}

func runReadBgOutput(ctx context.Context, c *toolCall) toolResult {
	t, a, fail := bgFind(c)
	if t == nil {
		return fail
	}
	t.mu.Lock()
	idle := len(t.unread) == 0 && !t.done
	changed := t.changed
	t.mu.Unlock()
	note := ""
	if idle { // wait for new output (which a concurrent read may take first) or the end
		wait := time.Duration(a.WaitMS) * time.Millisecond
		if limit := c.req.blockLimit(); wait > limit { // the client would give up first
			note = fmt.Sprintf("[waited %s, not the %s asked: a call ends before the client "+
				"gives up on it; call again to wait longer]\n", limit, wait)
			wait = limit
		}
		select {
		case <-changed:
		case <-t.ended:
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	return t.report(c.s, note, a.Tail, c.s.srv.set.OutputLimit)
}

// runKillBgTask kills the task's marker: its group and what escaped it. Plan
// mode does not refuse it: stopping a process changes no file.
func runKillBgTask(ctx context.Context, c *toolCall) toolResult {
	t, _, fail := bgFind(c)
	if t == nil {
		return fail
	}
	t.mu.Lock()
	note := "Stopped task %d.\n"
	if t.done {
		note = "Task %d had already ended.\n"
	}
	t.quiet = true
	t.mu.Unlock()
	stopRun(t.marker, t.leader)
	<-t.ended // stopRun killed bash last: the status is final within leftWait
	return t.report(c.s, fmt.Sprintf(note, t.id), killTailLines, tailBytes)
}

func runListBgTasks(ctx context.Context, c *toolCall) toolResult {
	var a struct {
		RunningOnly bool `json:"running_only"`
	}
	json.Unmarshal(c.args, &a) // checked against the input schema: it fits
	infos := []bgInfo{}
	text := ""
	for _, t := range c.s.bg.list() {
		info, status := t.state(c.s)
		if a.RunningOnly && info.Status != "running" {
			continue
		}
		info.Command = cutRunes(strings.Join(strings.Fields(info.Command), " "), 80)
		infos = append(infos, info)
		text += fmt.Sprintf("task %d: %s, %d lines (%d bytes) unread, pid %d, log %s: %s\n",
			info.TaskID, status, info.UnreadLines, info.UnreadBytes, info.Pid, info.LogFile,
			info.Command)
	}
	if len(infos) == 0 {
		text = c.s.srv.served("No background tasks. Start one with BackgroundBash.")
	}
	return structuredResult(strings.TrimSuffix(text, "\n"), map[string]any{"tasks": infos})
}
