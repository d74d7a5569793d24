// tools_bg.go holds the background task tools: BackgroundBash starts a
// command that keeps running, ReadBgOutput hands back what it printed since
// the previous read, ListBgTasks lists the session's tasks and KillBgTask
// stops one.
//
// Rules:
//   - tasks belong to a session and die with it; each runs in its own process
//     group started through procTracker, so nothing outlives the server;
//   - a task keeps at most BG_BUFFER_BYTES of unread output: when more waits,
//     the oldest unread bytes are dropped and counted, so memory stays bounded;
//   - a reader waits on a channel closed at every change, never by polling;
//   - a task's end is announced once, unless a KillBgTask reply already says it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// bgTaskProps are the properties of a task in the tools' output schemas.
const bgTaskProps = `"task_id":{"type":"integer"},"pid":{"type":"integer","description":"bash's pid, also the process group id"},
	"command":{"type":"string"},
	"status":{"type":"string","enum":["running","exited","killed"],"description":"killed: ended by a signal"},
	"exit_code":{"type":"integer","description":"the exit status; -1 while running or when ended by a signal"},
	"signal":{"type":"string","description":"the signal that ended the task (TERM, KILL...)"},
	"runtime_ms":{"type":"integer"},
	"unread_bytes":{"type":"integer","description":"output waiting for the next ReadBgOutput"},
	"dropped_bytes":{"type":"integer","description":"output lost since the previous read because the buffer was full"}`

const bgTaskRequired = `"task_id","pid","command","status","exit_code","runtime_ms","unread_bytes","dropped_bytes"`

const bgOutputSchema = `{"type":"object","properties":{` + bgTaskProps + `,"output":{"type":"string"}},"required":[` + bgTaskRequired + `,"output"]}`

const bgTaskIDInput = `"task_id":{"type":"integer","minimum":1,"description":"The id BackgroundBash returned."}`

var backgroundBashTool = toolDef{
	name:  "BackgroundBash",
	title: "Start a background command",
	description: `Starts a command with bash -c in the background and returns at once with a task id. Use it for dev servers, watchers, long builds or tests while you keep working.

- Runs in Bash's current working directory, stdin is /dev/null, stdout and stderr are merged in order.
- Read what it printed with ReadBgOutput (only output new since the previous read; wait_ms waits for more), stop it with KillBgTask, see all tasks with ListBgTasks.
- Each task keeps up to 1 MiB of unread output (BG_BUFFER_BYTES); beyond that the oldest unread output is dropped and the next read says how much.
- At most 32 tasks run at once (BG_MAX_TASKS). When a task ends, the next tool result starts with a notice. Tasks die when this server stops.

Example: {"command": "npm run dev"}`,
	input: `{"type":"object","properties":{
		"command":{"type":"string","minLength":1,"description":"The command line to run with bash -c."}},
		"required":["command"],"additionalProperties":false}`,
	output: `{"type":"object","properties":{` + bgTaskProps + `},"required":[` + bgTaskRequired + `]}`,
	hints:  toolHints{destructive: true, openWorld: true},
	run:    runBackgroundBash,
}

var readBgOutputTool = toolDef{
	name:  "ReadBgOutput",
	title: "Read a background task's output",
	description: `Returns the output a background task printed since the previous ReadBgOutput of that task, then a status line: running for how long, or how it ended (exit status or signal) and after how long.

- wait_ms (0 to 60000) waits until there is new output or the task ends, at most that long, so you need not poll in a loop.
- At most 30,000 characters per reply (OUTPUT_LIMIT); the rest stays for the next call and the reply says how much is waiting.
- If the task printed more than its buffer holds between two reads, the reply says how many bytes were dropped.

Example: {"task_id": 1, "wait_ms": 5000}`,
	input: `{"type":"object","properties":{` + bgTaskIDInput + `,
		"wait_ms":{"type":"integer","minimum":0,"maximum":60000,"description":"Milliseconds to wait for new output or the end of the task when none is waiting (default 0)."}},
		"required":["task_id"],"additionalProperties":false}`,
	output: bgOutputSchema,
	hints:  toolHints{readOnly: true},
	run:    runReadBgOutput,
}

var listBgTasksTool = toolDef{
	name:  "ListBgTasks",
	title: "List background tasks",
	description: `Lists this session's background tasks, newest first: id, status (running, exited, killed), exit status, runtime, unread output and the command (shortened). The last 100 finished tasks are kept.

Example: {}`,
	input:  `{"type":"object","properties":{},"additionalProperties":false}`,
	output: `{"type":"object","properties":{"tasks":{"type":"array","items":{"type":"object","properties":{` + bgTaskProps + `},"required":[` + bgTaskRequired + `]}}},"required":["tasks"]}`,
	hints:  toolHints{readOnly: true, idempotent: true},
	run:    runListBgTasks,
}

var killBgTaskTool = toolDef{
	name:  "KillBgTask",
	title: "Stop a background task",
	description: `Stops a background task and every process it started: TERM to its whole process group, KILL after 2 seconds. Answers with how the task ended and its unread output. Stopping a task that already ended is not an error: the reply says how it ended (and stops any processes it left behind).

Example: {"task_id": 1}`,
	input:  `{"type":"object","properties":{` + bgTaskIDInput + `},"required":["task_id"],"additionalProperties":false}`,
	output: bgOutputSchema,
	hints:  toolHints{destructive: true, idempotent: true},
	run:    runKillBgTask,
}

// bgKeepFinished is how many finished tasks a session keeps for reading.
const bgKeepFinished = 100

// bgTasks is one session's background tasks.
type bgTasks struct {
	procs *procTracker
	wg    sync.WaitGroup // counts the tasks' wait goroutines

	mu     sync.Mutex // guards the fields below
	tasks  []*bgTask  // oldest first
	nextID int
	closed bool // the session ended: no task starts
}

func newBgTasks(procs *procTracker) *bgTasks { return &bgTasks{procs: procs} }

// bgTask is one background command and the output of it nobody read yet.
type bgTask struct {
	id      int
	pid     int // bash's pid, which is also its process group id
	command string
	start   time.Time
	out     *os.File      // the read end of the output pipe
	ended   chan struct{} // closed once bash has exited and the status is final

	mu       sync.Mutex // guards the fields below
	limit    int        // the most unread bytes kept
	buf      []byte     // buf[off:] is the unread output; len(buf) stays within 2×limit
	off      int
	dropped  int64         // unread bytes lost since the previous read
	changed  chan struct{} // closed and replaced when output arrives or the task ends
	done     bool
	end      time.Time
	code     int
	signal   string
	stopping bool // KillBgTask or the session's end stops it: no notice
}

// bgInfo is a task as the tools' structured content describes it.
type bgInfo struct {
	TaskID       int    `json:"task_id"`
	Pid          int    `json:"pid"`
	Command      string `json:"command"`
	Status       string `json:"status"`
	ExitCode     int    `json:"exit_code"`
	Signal       string `json:"signal,omitempty"`
	RuntimeMS    int64  `json:"runtime_ms"`
	UnreadBytes  int    `json:"unread_bytes"`
	DroppedBytes int64  `json:"dropped_bytes"`
}

type bgReport struct {
	bgInfo
	Output string `json:"output"`
}

func runBackgroundBash(ctx context.Context, c *toolCall) toolResult {
	var a struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal(c.args, &a); err != nil {
		return errorResult("BackgroundBash: invalid arguments: %v", err)
	}
	if strings.TrimSpace(a.Command) == "" {
		return errorResult("BackgroundBash: command is empty")
	}
	dir := c.s.shell.dir()
	t, err := c.s.bg.start(c.s, a.Command, dir)
	if err != nil {
		return errorResult("BackgroundBash: %v", err)
	}
	t.mu.Lock()
	info := t.infoLocked()
	t.mu.Unlock()
	res := textResult(fmt.Sprintf("Started background task %d (pid %d) in %s.\nRead its output with ReadBgOutput {\"task_id\": %d, \"wait_ms\": 5000}; stop it with KillBgTask {\"task_id\": %d}.",
		t.id, t.pid, dir, t.id, t.id))
	res.structured = info
	return res
}

// start starts command in dir as a new task of session s.
func (b *bgTasks) start(s *session, command, dir string) (*bgTask, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.New("start: the session is ending")
	}
	running := 0
	for _, t := range b.tasks {
		if !t.isDone() {
			running++
		}
	}
	if most := s.srv.cfg.int("BG_MAX_TASKS"); running >= most {
		return nil, fmt.Errorf("%d tasks are already running, the most allowed (BG_MAX_TASKS=%d); stop one with KillBgTask first", running, most)
	}
	cmd := exec.Command("bash", "-c", command)
	cmd.Dir = dir
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	err = b.procs.start(cmd)
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("start: %w", err)
	}
	b.nextID++
	t := &bgTask{id: b.nextID, pid: cmd.Process.Pid, command: command, start: time.Now(), out: pr, ended: make(chan struct{}),
		limit: max(s.srv.cfg.int("BG_BUFFER_BYTES"), 256), code: -1, changed: make(chan struct{})}
	b.tasks = append(b.tasks, t)
	b.pruneLocked()
	readDone := make(chan struct{})
	go t.readOutput(b.procs, readDone) // exits at EOF, or when closeAll sets a read deadline
	b.wg.Add(1)
	go func() { // exits once bash has exited and its output is read
		defer b.wg.Done()
		t.wait(s, b.procs, cmd, readDone)
	}()
	return t, nil
}

// pruneLocked forgets the oldest finished tasks beyond bgKeepFinished. b.mu must be held.
func (b *bgTasks) pruneLocked() {
	finished := 0
	for _, t := range b.tasks {
		if t.isDone() {
			finished++
		}
	}
	kept := b.tasks[:0]
	for _, t := range b.tasks {
		if finished > bgKeepFinished && t.isDone() {
			finished--
			continue
		}
		kept = append(kept, t)
	}
	b.tasks = kept
}

func (b *bgTasks) find(id int) *bgTask {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.tasks {
		if t.id == id {
			return t
		}
	}
	return nil
}

// closeAll ends the session's tasks: every group still alive is stopped and
// every task has ended when it returns. No notice is sent; no task starts after.
func (b *bgTasks) closeAll() {
	b.mu.Lock()
	b.closed = true
	tasks := b.tasks
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range tasks {
		t.mu.Lock()
		t.stopping = true
		t.mu.Unlock()
		wg.Add(1)
		go func(t *bgTask) { // exits when the group is gone
			defer wg.Done()
			b.procs.killGroup(t.pid, 500*time.Millisecond)
			b.procs.forgetIfGone(t.pid)
		}(t)
	}
	wg.Wait()
	for _, t := range tasks {
		t.out.SetReadDeadline(time.Now()) // a process that left the group may hold the pipe
	}
	b.wg.Wait()
}

func (t *bgTask) isDone() bool {
	select {
	case <-t.ended:
		return true
	default:
		return false
	}
}

func (t *bgTask) readOutput(procs *procTracker, readDone chan struct{}) {
	defer close(readDone)
	defer t.out.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := t.out.Read(buf)
		if n > 0 {
			t.append(buf[:n])
		}
		if err != nil {
			procs.forgetIfGone(t.pid)
			return
		}
	}
}

// append adds output, dropping the oldest unread bytes beyond the limit.
func (t *bgTask) append(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	unread := len(t.buf) - t.off
	over := unread + len(p) - t.limit
	if over > 0 {
		t.dropped += int64(over)
		if over >= unread {
			t.buf, t.off, p = t.buf[:0], 0, p[over-unread:]
		} else {
			t.off += over
		}
	}
	if len(t.buf)+len(p) > 2*t.limit { // move the unread bytes to the front: amortised, at most once per limit bytes
		t.buf, t.off = t.buf[:copy(t.buf, t.buf[t.off:])], 0
	}
	t.buf = append(t.buf, p...)
	for i := 0; over > 0 && i < 3 && t.off < len(t.buf) && !utf8.RuneStart(t.buf[t.off]); i++ {
		t.off++ // a character cut in two by the drop goes too
		t.dropped++
	}
	t.changedLocked()
}

func (t *bgTask) changedLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// wait waits for bash to exit, records how it ended and announces it.
func (t *bgTask) wait(s *session, procs *procTracker, cmd *exec.Cmd, readDone chan struct{}) {
	err := cmd.Wait()
	select { // what bash wrote is in the pipe; a process it left behind may hold the pipe open
	case <-readDone:
	case <-time.After(100 * time.Millisecond):
	}
	code, sig := exitStatus(cmd, err)
	t.mu.Lock()
	t.done, t.end, t.code, t.signal = true, time.Now(), code, sig
	t.buf, t.off = append([]byte(nil), t.buf[t.off:]...), 0 // a finished task holds only its unread bytes
	notice := fmt.Sprintf("background task %d %s", t.id, t.statusLocked())
	quiet := t.stopping
	close(t.ended)
	t.changedLocked()
	t.mu.Unlock()
	procs.forgetIfGone(t.pid)
	if !quiet {
		s.announce(notice)
	}
}

// waitOutput waits up to d until output is waiting or the task has ended.
func (t *bgTask) waitOutput(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		t.mu.Lock()
		idle, changed := len(t.buf) == t.off && !t.done, t.changed
		t.mu.Unlock()
		if !idle {
			return
		}
		select { // wakes at each change: new output (maybe taken by a concurrent read) or the end
		case <-changed:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// takeLocked removes and returns up to limit characters of unread output,
// keeping back a final character cut in two while the task runs.
func (t *bgTask) takeLocked(limit int) (out string, dropped int64) {
	u := t.buf[t.off:]
	n := 0
	for chars := 0; n < len(u) && chars < limit; chars++ {
		_, size := utf8.DecodeRune(u[n:])
		n += size
	}
	if !t.done && n == len(u) {
		for k := 1; k <= 3 && k <= n; k++ {
			if utf8.RuneStart(u[n-k]) {
				if !utf8.FullRune(u[n-k : n]) {
					n -= k
				}
				break
			}
		}
	}
	out = validUTF8(string(u[:n]))
	t.off += n
	if t.off == len(t.buf) {
		t.buf, t.off = nil, 0
	}
	dropped, t.dropped = t.dropped, 0
	return out, dropped
}

func (t *bgTask) infoLocked() bgInfo {
	i := bgInfo{TaskID: t.id, Pid: t.pid, Command: t.command, Status: "running", ExitCode: t.code, Signal: t.signal,
		RuntimeMS: time.Since(t.start).Milliseconds(), UnreadBytes: len(t.buf) - t.off, DroppedBytes: t.dropped}
	if t.done {
		i.Status, i.RuntimeMS = "exited", t.end.Sub(t.start).Milliseconds()
		if t.signal != "" {
			i.Status = "killed"
		}
	}
	return i
}

// statusLocked says how the task is: "running for 12s", "exited with status 0
// after 1m4s" or "killed by signal TERM after 3s".
func (t *bgTask) statusLocked() string {
	switch {
	case !t.done:
		return "running for " + bgDuration(time.Since(t.start))
	case t.signal != "":
		return fmt.Sprintf("killed by signal %s after %s", t.signal, bgDuration(t.end.Sub(t.start)))
	}
	return fmt.Sprintf("exited with status %d after %s", t.code, bgDuration(t.end.Sub(t.start)))
}

func bgDuration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// report takes the unread output (up to limit characters) and describes the
// task: the reply of ReadBgOutput and KillBgTask, headed by note.
func (t *bgTask) report(limit int, note string) toolResult {
	t.mu.Lock()
	out, dropped := t.takeLocked(limit)
	info, status, size := t.infoLocked(), t.statusLocked(), t.limit
	t.mu.Unlock()
	info.DroppedBytes = dropped
	var b strings.Builder
	if note != "" {
		b.WriteString(note + "\n")
	}
	if dropped > 0 {
		fmt.Fprintf(&b, "[%d bytes dropped: the task printed more than its %d-byte buffer holds since the previous read]\n", dropped, size)
	}
	b.WriteString(out)
	if out == "" {
		b.WriteString("(no new output)")
	}
	if !strings.HasSuffix(out, "\n") {
		b.WriteString("\n")
	}
	if info.UnreadBytes > 0 {
		fmt.Fprintf(&b, "[%d more bytes waiting: call ReadBgOutput again]\n", info.UnreadBytes)
	}
	fmt.Fprintf(&b, "[task %d %s]", t.id, status)
	res := textResult(b.String())
	res.structured = bgReport{info, out}
	return res
}

func bgUnknown(tool string, id int) toolResult {
	return errorResult("%s: no background task %d in this session; ListBgTasks shows the tasks there are", tool, id)
}

type bgTaskArgs struct {
	TaskID int `json:"task_id"`
	WaitMS int `json:"wait_ms"`
}

func runReadBgOutput(ctx context.Context, c *toolCall) toolResult {
	var a bgTaskArgs
	if err := json.Unmarshal(c.args, &a); err != nil {
		return errorResult("ReadBgOutput: invalid arguments: %v", err)
	}
	t := c.s.bg.find(a.TaskID)
	if t == nil {
		return bgUnknown("ReadBgOutput", a.TaskID)
	}
	if a.WaitMS > 0 {
		t.waitOutput(ctx, time.Duration(a.WaitMS)*time.Millisecond)
	}
	return t.report(c.s.srv.cfg.int("OUTPUT_LIMIT"), "")
}

func runKillBgTask(ctx context.Context, c *toolCall) toolResult {
	var a bgTaskArgs
	if err := json.Unmarshal(c.args, &a); err != nil {
		return errorResult("KillBgTask: invalid arguments: %v", err)
	}
	t := c.s.bg.find(a.TaskID)
	if t == nil {
		return bgUnknown("KillBgTask", a.TaskID)
	}
	t.mu.Lock()
	wasDone := t.done
	t.stopping = t.stopping || !wasDone
	t.mu.Unlock()
	note := fmt.Sprintf("Stopped task %d.", t.id)
	if wasDone {
		note = fmt.Sprintf("Task %d had already ended.", t.id)
	}
	procs := c.s.srv.procs
	if syscall.Kill(-t.pid, 0) == nil { // the group has processes, bash's or ones it left behind
		procs.killGroup(t.pid, killGrace)
		procs.forgetIfGone(t.pid)
		if wasDone {
			note = fmt.Sprintf("Task %d had already ended; the processes it left running were stopped.", t.id)
		}
	}
	select {
	case <-t.ended:
	case <-ctx.Done():
		return errorResult("KillBgTask: cancelled: %v", ctx.Err())
	}
	return t.report(c.s.srv.cfg.int("OUTPUT_LIMIT"), note)
}

func runListBgTasks(ctx context.Context, c *toolCall) toolResult {
	c.s.bg.mu.Lock()
	tasks := append([]*bgTask(nil), c.s.bg.tasks...)
	c.s.bg.mu.Unlock()
	infos := make([]bgInfo, 0, len(tasks))
	var b strings.Builder
	for i := len(tasks) - 1; i >= 0; i-- {
		t := tasks[i]
		t.mu.Lock()
		info, status := t.infoLocked(), t.statusLocked()
		t.mu.Unlock()
		info.Command = bgShort(t.command)
		infos = append(infos, info)
		fmt.Fprintf(&b, "task %d: %s, %d bytes unread", t.id, status, info.UnreadBytes)
		if info.DroppedBytes > 0 {
			fmt.Fprintf(&b, " (%d dropped)", info.DroppedBytes)
		}
		fmt.Fprintf(&b, ", pid %d: %s\n", t.pid, info.Command)
	}
	if len(tasks) == 0 {
		b.WriteString("No background tasks. Start one with BackgroundBash.")
	}
	res := textResult(strings.TrimSuffix(b.String(), "\n"))
	res.structured = map[string]any{"tasks": infos}
	return res
}

// bgShort is a command on one line, at most 80 characters.
func bgShort(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 80 {
		return string(r[:79]) + "…"
	}
	return s
}
