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
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
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
		"dropped_bytes":{"type":"integer","description":"output lost since the previous read"},
		"log_file":{"type":"string","description":"the task's complete output"}`
	bgRequired = `"task_id","pid","command","status","exit_code","runtime_ms",
		"unread_bytes","dropped_bytes"`
	bgTaskSchema = `{"type":"object","properties":{` + bgProps + `,"hint":{"type":"string"}},
		"required":[` + bgRequired + `]}`
	bgReadSchema = `{"type":"object","properties":{` + bgProps + `,"output":{"type":"string"}},
		"required":[` + bgRequired + `,"output"]}`
	bgIDInput = `"task_id":{"type":"integer","minimum":1}`
)

var backgroundBashTool = toolDef{
	name:  "BackgroundBash",
	title: "Start a background command",
	describe: func(srv *server) string {
		return fmt.Sprintf(`Starts a command with bash -c in the background and returns its task id
at once: for servers, watchers, long builds.

- Runs in Bash's working directory; stdout and stderr merged; the complete
  output (up to 16 MiB) also goes to log_file.
- ReadBgOutput reads new output, KillBgTask stops the task and all it started,
  ListBgTasks lists tasks.
- Up to %d bytes of unread output are kept; up to %d tasks run at once.
  The next tool result says when a task ends.`,
			srv.set.BgBuffer, srv.set.BgMaxTasks)
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
	describe: func(srv *server) string {
		return fmt.Sprintf(`Returns a background task's output since the previous read,
then its status.

- wait_ms (max 60000): when nothing is waiting, wait for output or the end.
- tail: return only the last N lines of the unread output (the newest), passing over the rest.
- At most %d bytes per reply (OUTPUT_LIMIT); the rest waits for the next read.
- Output reads as a terminal shows it (colours and progress redraws removed); log_file
  keeps the raw bytes.`, srv.set.OutputLimit)
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
	description: "Lists this session's background tasks, newest first " +
		"(the last 100 finished are kept); running_only: true leaves out those that ended.",
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
	description: "Stops a background task and every process it started (TERM, then KILL " +
		"after 2 s); answers how it ended and its last lines. " +
		"A task that already ended is not an error.",
	input:  `{"type":"object","properties":{` + bgIDInput + `},"required":["task_id"]}`,
	output: bgReadSchema,
	hints:  toolHints{destructive: true, idempotent: true},
	run:    runKillBgTask,
}

// killTailLines is how many last lines of unread output KillBgTask shows.
const killTailLines = 10

// bgTasks is one session's background tasks.
type bgTasks struct {
	procs *procTracker
	scope string         // the session's marker: its tasks' and Bash runs' start with it
	wg    sync.WaitGroup // counts the tasks' wait goroutines
	// starts counts starts under way; closeAll waits for them, so none escapes it
	starts sync.WaitGroup

	mu       sync.Mutex // guards the fields below
	tasks    []*bgTask  // oldest first
	nextID   int
	starting int  // tasks being started: they count toward BG_MAX_TASKS
	closed   bool // the session ended: nothing starts
}

func newBgTasks(procs *procTracker) *bgTasks {
	return &bgTasks{procs: procs, scope: procs.scope(procs.id)}
}

// bgTask is one background command and its output nobody read yet.
type bgTask struct {
	id      int
	leader  *os.Process // bash, the group leader
	command string
	marker  string
	start   time.Time
	limit   int           // the most unread bytes kept
	log     *keptFile     // the complete output; written by the reading goroutine only
	ended   chan struct{} // closed when bash has exited and the status is final

	mu      sync.Mutex    // guards the fields below
	unread  []byte        // at most limit bytes, in buf while the task runs
	buf     []byte        // the array unread lives in: twice the limit, so memory stays bounded
	dropped int64         // unread bytes lost since the previous read
	changed chan struct{} // closed and replaced at new output
	done    bool
	runtime time.Duration // from the start to the end
	code    int           // the exit status; -1 while running or after a signal
	signal  string
	quiet   bool   // no notice announces the end: KillBgTask's reply says it
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
	DroppedBytes int64   `json:"dropped_bytes"`
	LogFile      string  `json:"log_file,omitempty"`
	Hint         string  `json:"hint,omitempty"`
	Output       *string `json:"output,omitempty"`
}

// runBackgroundBash starts a task. The start itself runs without the lock: it is counted in
// starting (toward BG_MAX_TASKS) and in starts (which closeAll waits for).
func runBackgroundBash(ctx context.Context, c *toolCall) toolResult {
	var a bashArgs
	json.Unmarshal(c.args, &a) // checked against the input schema: it fits
	if strings.TrimSpace(a.Command) == "" {
		return errorResult("command is empty")
	}
	b := c.s.bg
	most := c.s.srv.set.BgMaxTasks
	b.mu.Lock()
	running := b.pruneLocked() + b.starting
	closed := b.closed
	if !closed && running < most {
		b.starting++
		b.starts.Add(1)
		b.nextID++
	}
	id := b.nextID
	b.mu.Unlock()
	switch {
	case closed:
		return errorResult("start: the session is ending")
	case running >= most:
		return errorResult("%d tasks are already running, the most allowed (BG_MAX_TASKS=%d); "+
			"stop one with KillBgTask first", running, most)
	}
	defer b.starts.Done()
	t := &bgTask{id: id, command: a.Command, marker: b.procs.scope(b.scope), start: time.Now(),
		limit: c.s.srv.set.BgBuffer, ended: make(chan struct{}), code: -1,
		changed: make(chan struct{})}
	cmd := bashCommand(a.Command)
	out, err := c.s.startShell(cmd, t.marker)
	if err == nil {
		t.leader = cmd.Process
		t.log = b.procs.keepFile(fmt.Sprintf("task-%d", id))
		b.wg.Add(1)
		go t.run(c.s, cmd, out) // exits once bash has exited and its output is read
	}
	b.mu.Lock()
	b.starting--
	if err == nil {
		b.tasks = append(b.tasks, t)
	}
	b.mu.Unlock()
	if err != nil {
		return errorResult("%v", err)
	}
	info, _ := t.state(c.s)
	info.Hint = fmt.Sprintf(`Read its output with ReadBgOutput {"task_id": %[1]d, `+
		`"wait_ms": 5000}; stop it with KillBgTask {"task_id": %[1]d}.`, id)
	text := fmt.Sprintf("Started background task %d (pid %d) in %s; its complete output "+
		"goes to %s.\n%s", id, info.Pid, cmd.Dir, info.LogFile, info.Hint)
	return structuredResult(text, info)
}

// pruneLocked keeps the newest 100 finished tasks and returns how many run. b.mu must be held.
func (b *bgTasks) pruneLocked() int {
	running := 0
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
	return running
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
	b.wg.Wait() // the leaders are dead: each run ends within leftWait
}

// run reads the task's output, out, until bash has exited, records how it ended and
// announces it.
func (t *bgTask) run(s *session, cmd *exec.Cmd, out *os.File) {
	defer s.bg.wg.Done()
	readDone := make(chan struct{})
	// The reader exits at EOF: once every process holding the pipe has ended. A kill ends them
	// all but one that both left its group and cleared its environment (out of scope); at the
	// session's end that one only delays its reader, never closeAll.
	go func() {
		defer close(readDone)
		io.Copy(t, out)
		out.Close()
		t.log.f.Close()
	}()
	cmd.Wait()
	select { // bash's output is in the pipe; a process it left behind may hold the pipe open
	case <-readDone:
	case <-time.After(leftWait):
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = true
	t.runtime = time.Since(t.start)
	t.code, t.signal = exitStatus(cmd)
	t.unread = bytes.Clone(t.unread) // a finished task holds its unread bytes only
	t.buf = nil
	close(t.ended) // output may still come from a process bash left behind
	_, status := t.infoLocked()
	t.notice = fmt.Sprintf("background task %d %s", t.id, status)
	if !t.quiet {
		s.notices.push(t.notice) // under t.mu: a reply's state() then sees it
	}
}

// Write adds output, dropping the oldest unread bytes beyond the limit, then logs it, after
// the lock: what the log shows can be read. The unread bytes stay in one array: when its end
// is reached they move back to its start, a copy of at most limit bytes once per limit bytes
// written.
func (t *bgTask) Write(p []byte) (int, error) {
	t.mu.Lock()
	kept := p
	if over := len(t.unread) + len(p) - t.limit; over > 0 {
		dropUnread := min(over, len(t.unread))
		t.unread = t.unread[dropUnread:]
		kept = p[over-dropUnread:]
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

// take removes unread output and returns it, and the bytes dropped before it. With lines 0 it
// takes up to limit bytes; else all, of which it returns the last lines, at most limit bytes.
// It never cuts a character in two: one the pipe delivered in part stays for the next read.
func (t *bgTask) take(lines, limit int) (string, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.unread)
	if lines == 0 {
		n = min(limit, n)
	}
	for i := n - 1; i >= max(0, n-3) && (n < len(t.unread) || !t.done); i-- {
		if utf8.RuneStart(t.unread[i]) {
			if !utf8.FullRune(t.unread[i:n]) {
				n = i
			}
			break
		}
	}
	out := string(t.unread[:n])
	dropped := t.dropped
	t.unread = t.unread[n:]
	t.dropped = 0
	if lines == 0 {
		return out, dropped
	}
	body := strings.TrimSuffix(out, "\n")
	i := len(body)
	for n := 0; n < lines && i >= 0; n++ {
		i = strings.LastIndexByte(body[:i], '\n')
	}
	out = out[i+1:]
	if len(out) > limit {
		out = strings.ToValidUTF8(out[len(out)-limit:], "")
	}
	return out, dropped
}

// state describes the task, and says its status in words, for a reply: a
// notice of the task's end still waiting would say it twice, so it is removed.
func (t *bgTask) state(s *session) (bgInfo, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		s.notices.remove(t.notice)
	}
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
		UnreadBytes: len(t.unread), DroppedBytes: t.dropped, LogFile: t.log.path}
	d = d.Truncate(time.Millisecond)
	if d >= time.Second {
		d = d.Round(time.Second)
	}
	status := "running for "
	switch {
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
	out, dropped := t.take(lines, limit)
	out, hidden := terminalText(out)
	out += terminalNote(hidden, t.log.path)
	info, status := t.state(s)
	info.Output = &out
	info.DroppedBytes = dropped
	text := note
	if dropped > 0 {
		text += fmt.Sprintf("[%d bytes dropped: the task printed more than its %d-byte buffer "+
			"holds since the previous read; "+
			"its complete output is in %s]\n", dropped, t.limit, info.LogFile)
	}
	text += strings.TrimSuffix(cmp.Or(out, "(no new output)"), "\n") + "\n"
	if info.UnreadBytes > 0 {
		text += fmt.Sprintf("[%d more bytes waiting: call ReadBgOutput again]\n", info.UnreadBytes)
	}
	text += fmt.Sprintf("[task %d %s]", t.id, status)
	return structuredResult(text, info)
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
	if idle { // wait for new output (which a concurrent read may take first) or the end
		select {
		case <-changed:
		case <-t.ended:
		case <-time.After(time.Duration(a.WaitMS) * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return t.report(c.s, "", a.Tail, c.s.srv.set.OutputLimit)
}

// runKillBgTask kills the task's marker: its group and what escaped it. Plan
// mode does not refuse it: stopping a process changes no file.
func runKillBgTask(ctx context.Context, c *toolCall) toolResult {
	t, _, fail := bgFind(c)
	if t == nil {
		return fail
	}
	t.mu.Lock()
	note := fmt.Sprintf("Stopped task %d.\n", t.id)
	if t.done {
		note = fmt.Sprintf("Task %d had already ended.\n", t.id)
	}
	t.quiet = true
	t.mu.Unlock()
	stopRun(t.marker, t.leader)
	<-t.ended // stopRun killed bash last: the status is final within leftWait
	return t.report(c.s, note, killTailLines, 2000)
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
		text += fmt.Sprintf("task %d: %s, %d bytes unread, pid %d, log %s: %s\n",
			info.TaskID, status, info.UnreadBytes, info.Pid, info.LogFile, info.Command)
	}
	if len(infos) == 0 {
		text = "No background tasks. Start one with BackgroundBash."
	}
	return structuredResult(strings.TrimSuffix(text, "\n"), map[string]any{"tasks": infos})
}
