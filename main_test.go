// main_test.go drives telson the way clients do: in-process over io.Pipe
// through run, and as the real binary (the test binary re-executed with
// TELSON_RUN_MAIN=1). Tests wait on messages and processes, never on sleeps;
// timeouts are watchdogs only.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv(reaperEnv) == "1" || os.Getenv("TELSON_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	// Child processes (the reaper, telson as a binary) are this test binary;
	// under -race each would sleep a second at exit without this.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}

const watchdog = 20 * time.Second

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (sb *syncBuffer) Write(p []byte) (int, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.b.Write(p)
}

func (sb *syncBuffer) String() string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.b.String()
}

// testClient is a client talking to one telson, in-process or as a process.
type testClient struct {
	t      *testing.T
	in     io.WriteCloser
	lines  chan []byte // every line telson wrote, in order
	done   chan error  // run's result (in-process) or the process's exit
	stderr *syncBuffer
	cmd    *exec.Cmd
	nextID int

	mu    sync.Mutex // guards notes
	notes []map[string]any
}

// startServer runs telson in-process with args and returns a client for it.
func startServer(t *testing.T, args ...string) *testClient {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &testClient{t: t, in: inW, lines: make(chan []byte, 1024), done: make(chan error, 1), stderr: &syncBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // exits when run returns
		err := run(ctx, inR, outW, c.stderr, args)
		outW.Close()
		c.done <- err
	}()
	go c.readLines(outR)
	t.Cleanup(func() {
		cancel()
		c.in.Close()
		select {
		case <-c.done:
		case <-time.After(watchdog):
			t.Errorf("server did not stop; stderr:\n%s", c.stderr.String())
		}
	})
	return c
}

// startBinary runs telson as a real process (the test binary re-executed).
func startBinary(t *testing.T, env []string, args ...string) *testClient {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "TELSON_RUN_MAIN=1"), env...)
	c := &testClient{t: t, lines: make(chan []byte, 1024), done: make(chan error, 1), stderr: &syncBuffer{}, cmd: cmd}
	cmd.Stderr = c.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.in = in
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // exits when the process's stdout closes
		c.readLines(out)
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		c.in.Close()
		select {
		case <-c.done:
		case <-time.After(watchdog):
			cmd.Process.Kill()
			t.Errorf("telson did not exit; stderr:\n%s", c.stderr.String())
		}
	})
	return c
}

func (c *testClient) readLines(r io.Reader) {
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			c.lines <- line
		}
		if err != nil {
			close(c.lines)
			return
		}
	}
}

// send writes one raw line (a newline is added).
func (c *testClient) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatalf("send %s: %v", line, err)
	}
}

// recv returns the next line telson wrote, decoded.
func (c *testClient) recv() map[string]any {
	c.t.Helper()
	raw := c.recvRaw()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		c.t.Fatalf("recv: %v: %s", err, raw)
	}
	return m
}

func (c *testClient) recvRaw() []byte {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("recv: telson closed stdout; stderr:\n%s", c.stderr.String())
		}
		if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
			c.t.Fatalf("recv: not one line: %q", line)
		}
		return line
	case <-time.After(watchdog):
		c.t.Fatalf("recv: nothing within %s; stderr:\n%s", watchdog, c.stderr.String())
	}
	return nil
}

// request sends a request and returns its response; notifications that
// arrive first are kept in c.notes.
func (c *testClient) request(method string, params any) map[string]any {
	c.t.Helper()
	c.nextID++
	id := c.nextID
	msg := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	b, _ := json.Marshal(msg)
	c.send(string(b))
	return c.waitResponse(float64(id))
}

// waitResponse reads until the response with id arrives.
func (c *testClient) waitResponse(id any) map[string]any {
	c.t.Helper()
	for {
		m := c.recv()
		if _, isReq := m["method"]; isReq {
			c.mu.Lock()
			c.notes = append(c.notes, m)
			c.mu.Unlock()
			continue
		}
		if m["id"] == id {
			return m
		}
		c.t.Fatalf("unexpected message while waiting for %v: %v", id, m)
	}
}

func (c *testClient) initialize(version string) map[string]any {
	c.t.Helper()
	resp := c.request("initialize", map[string]any{"protocolVersion": version, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "test", "version": "1"}})
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return resp
}

// callTool calls a tool and returns its result object; a protocol error fails the test.
func (c *testClient) callTool(name string, args any) map[string]any {
	c.t.Helper()
	resp := c.request("tools/call", map[string]any{"name": name, "arguments": args})
	res, ok := resp["result"].(map[string]any)
	if !ok {
		c.t.Fatalf("tools/call %s: no result: %v", name, resp)
	}
	return res
}

// resultText joins a tool result's text items.
func resultText(res map[string]any) string {
	var parts []string
	items, _ := res["content"].([]any)
	for _, it := range items {
		if m, ok := it.(map[string]any); ok && m["type"] == "text" {
			parts = append(parts, m["text"].(string))
		}
	}
	return strings.Join(parts, "\n")
}

func isError(res map[string]any) bool { return res["isError"] == true }

// errCode returns a response's error code, or 0.
func errCode(resp map[string]any) int {
	e, ok := resp["error"].(map[string]any)
	if !ok {
		return 0
	}
	return int(e["code"].(float64))
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// waitGone waits until pid is gone, failing the test at the watchdog.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for wait := time.Millisecond; processAlive(pid); wait = min(2*wait, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(wait) // polling an external process, bounded by the watchdog
	}
}

// readPidFile waits for a file holding a pid to be written by a command under test.
func readPidFile(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		b, err := os.ReadFile(path)
		if err == nil && bytes.HasSuffix(b, []byte("\n")) {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err == nil {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
		time.Sleep(wait) // polling a file another process writes, bounded by the watchdog
	}
}

var _ = filepath.Join

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestTranscripts replays each testdata/transcripts/*.txt: a line "> msg" is
// sent, a line "< msg" is the message expected next (compared as JSON, with
// duration_ms and cwd made constant). With -update the expected lines are rewritten.
func TestTranscripts(t *testing.T) {
	files, _ := filepath.Glob("testdata/transcripts/*.txt")
	if len(files) == 0 {
		t.Fatal("no transcripts")
	}
	for _, file := range files {
		file := file
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			c := startServer(t, "-tools", "Bash")
			var out []string
			for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
				switch {
				case strings.HasPrefix(line, "> "):
					c.send(line[2:])
					out = append(out, line)
				case strings.HasPrefix(line, "< "):
					got := normalizeMessage(t, c.recvRaw())
					if *update {
						out = append(out, "< "+got)
						continue
					}
					want := normalizeMessage(t, []byte(line[2:]))
					if got != want {
						t.Errorf("after %s\ngot  %s\nwant %s", lastSent(out), got, want)
					}
					out = append(out, line)
				default:
					out = append(out, line)
				}
			}
			if *update {
				os.WriteFile(file, []byte(strings.Join(out, "\n")+"\n"), 0o644)
			}
		})
	}
}

func lastSent(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "> ") {
			return lines[i]
		}
	}
	return "(start)"
}

// normalizeMessage re-encodes a message with sorted keys and volatile values zeroed.
func normalizeMessage(t *testing.T, raw []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("not JSON: %s", raw)
	}
	var zero func(any)
	zero = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				switch k {
				case "duration_ms":
					x[k] = 0
				case "cwd":
					if _, ok := e.(string); ok {
						x[k] = "(cwd)"
					}
				}
				zero(e)
			}
		case []any:
			for _, e := range x {
				zero(e)
			}
		}
	}
	zero(v)
	b, _ := json.Marshal(v)
	return string(b)
}

func TestFramingToleratesBOMCRLFAndBlankLines(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.send("\xef\xbb\xbf{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r")
	c.send("")
	c.send("   \t")
	c.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\r")
	got := map[any]bool{}
	for i := 0; i < 2; i++ {
		m := c.recv()
		got[m["id"]] = m["result"] != nil
	}
	if !got[float64(1)] || !got[float64(2)] {
		t.Errorf("got %v, want results for ids 1 and 2", got)
	}
}

func TestLongLineIsSkippedAndAnswered(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-max-message-bytes", "1000")
	c.send(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 200000) + `"}}`)
	if m := c.recv(); errCode(m) != codeInvalidRequest || m["id"] != nil {
		t.Errorf("long line: got %v, want -32600 with id null", m)
	}
	if m := c.request("ping", nil); m["result"] == nil {
		t.Errorf("ping after long line: %v", m)
	}
}

func TestIDsAreEchoedByteForByte(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	for _, id := range []string{`"a\u00e9b"`, `1e2`, `12345678901234567890`, `-7`, `""`, `"x\"y"`, `0.5`} {
		c.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`)
		got := string(c.recvRaw())
		if !strings.Contains(got, `"id":`+id+`,`) {
			t.Errorf("id %s: got %s", id, got)
		}
	}
}

func TestSlowToolDoesNotDelayPingAndCancelKillsIt(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.initialize("2025-11-25")
	pidFile := filepath.Join(t.TempDir(), "pid")
	c.send(`{"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"Bash","arguments":{"command":"sleep 300 & echo $! > ` + pidFile + `; wait"}}}`)
	pid := readPidFile(t, pidFile)
	if m := c.request("ping", nil); m["result"] == nil {
		t.Fatalf("ping while Bash runs: %v", m)
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"slow","reason":"user"}}`)
	waitGone(t, pid)
	// The cancelled request is never answered: the next message is the ping's reply.
	if m := c.request("ping", nil); m["result"] == nil {
		t.Fatalf("ping after cancel: %v", m)
	}
	c.in.Close()
	for line := range c.lines {
		if strings.Contains(string(line), `"slow"`) {
			t.Errorf("cancelled request was answered: %s", line)
		}
	}
}

func TestEOFLetsRunningRequestsAnswer(t *testing.T) {
	t.Parallel()
	c := startBinary(t, nil)
	c.initialize("2025-06-18")
	c.send(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"sleep 0.3; echo drained"}}}`)
	c.in.Close()
	m := c.waitResponse(float64(9))
	if res := m["result"].(map[string]any); !strings.Contains(resultText(res), "drained") {
		t.Errorf("got %v", m)
	}
	if err := <-c.done; err != nil {
		t.Errorf("exit after EOF: %v; stderr:\n%s", err, c.stderr.String())
	}
	c.done <- nil // for the cleanup
}

// TestNoOrphans starts a grandchild that would outlive its shell, then ends
// telson three ways; the grandchild must die each time.
func TestNoOrphans(t *testing.T) {
	for _, how := range []string{"eof", "sigterm", "sigkill"} {
		how := how
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			c := startBinary(t, nil)
			c.initialize("2025-11-25")
			pidFile := filepath.Join(t.TempDir(), "pid")
			cmd := `sleep 1000 & echo $! > ` + pidFile
			if how != "eof" {
				cmd += "; wait"
			}
			c.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"` + cmd + `"}}}`)
			pid := readPidFile(t, pidFile)
			switch how {
			case "eof":
				c.waitResponse(float64(1))
				c.in.Close()
			case "sigterm":
				c.cmd.Process.Signal(syscall.SIGTERM)
			case "sigkill":
				c.cmd.Process.Kill()
			}
			waitGone(t, pid)
		})
	}
}

func TestBashOutputIsBoundedHeadAndTail(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-output-limit", "1000")
	c.initialize("2025-06-18")
	res := c.callTool("Bash", map[string]any{"command": "seq 1 100000"})
	text := resultText(res)
	sc := res["structuredContent"].(map[string]any)
	if !strings.HasPrefix(text, "1\n2\n3\n") || !strings.Contains(text, "99999\n100000\n") || !strings.Contains(text, "cut from the middle") {
		t.Errorf("head/tail not kept: %q", text)
	}
	if len(text) > 1200 || sc["truncated"] != true || isError(res) {
		t.Errorf("len %d, structured %v", len(text), sc)
	}
}

func TestBashTimeoutStopsTheGroup(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.initialize("2025-06-18")
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The child ignores TERM, so the group needs the KILL after the grace.
	res := c.callTool("Bash", map[string]any{"timeout": 300,
		"command": "echo started; (trap '' TERM; sleep 300) & echo $! > " + pidFile + "; wait"})
	text := resultText(res)
	if !isError(res) || !strings.Contains(text, "started") || !strings.Contains(text, "timed out") {
		t.Errorf("got %q", text)
	}
	if sc := res["structuredContent"].(map[string]any); sc["timed_out"] != true || sc["exit_code"] != float64(-1) {
		t.Errorf("structured %v", sc)
	}
	waitGone(t, readPidFile(t, pidFile))
}

func TestBashWorkingDirectoryPersistsEnvironmentDoesNot(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.initialize("2025-11-25")
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	c.callTool("Bash", map[string]any{"command": "cd " + dir + " && export TELSON_TEST_VAR=1"})
	res := c.callTool("Bash", map[string]any{"command": "pwd; echo ${TELSON_TEST_VAR:-unset}"})
	if got, want := resultText(res), dir+"\nunset\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if sc := res["structuredContent"].(map[string]any); sc["cwd"] != dir {
		t.Errorf("cwd %v, want %s", sc["cwd"], dir)
	}
}

func TestBashExitStatusAndInvalidUTF8(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.initialize("2025-11-25")
	res := c.callTool("Bash", map[string]any{"command": `printf 'a\377b'; exit 3`})
	if text := resultText(res); !isError(res) || text != "a\uFFFDb\n[exit status 3]" {
		t.Errorf("got %q", text)
	}
	res = c.callTool("Bash", map[string]any{"command": `kill -SEGV $$`})
	if text := resultText(res); !isError(res) || !strings.Contains(text, "killed by signal SEGV") {
		t.Errorf("got %q", text)
	}
	res = c.callTool("Bash", map[string]any{"command": "   "})
	if !isError(res) || !strings.Contains(resultText(res), "empty") {
		t.Errorf("blank command: %v", res)
	}
	res = c.callTool("Bash", map[string]any{"command": "true", "timeout_ms": 5})
	if !isError(res) || !strings.Contains(resultText(res), `unknown argument "timeout_ms" (this tool takes command, timeout)`) {
		t.Errorf("unknown argument: %v", res)
	}
	res = c.callTool("Bash", map[string]any{"command": "true", "timeout": 700000})
	if !isError(res) || !strings.Contains(resultText(res), `"timeout" must be at most 600000`) {
		t.Errorf("timeout range: %v", res)
	}
}

func TestBashStreamsProgress(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.initialize("2025-11-25")
	resp := c.request("tools/call", map[string]any{"name": "Bash", "_meta": map[string]any{"progressToken": "tok"},
		"arguments": map[string]any{"command": "for i in 1 2 3 4; do echo line$i; sleep 0.15; done"}})
	if resp["result"] == nil {
		t.Fatalf("%v", resp)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var last float64
	seen := 0
	for _, n := range c.notes {
		if n["method"] != "notifications/progress" {
			continue
		}
		p := n["params"].(map[string]any)
		if p["progressToken"] != "tok" || p["progress"].(float64) <= last || !strings.Contains(p["message"].(string), "line") {
			t.Errorf("bad progress %v", p)
		}
		last = p["progress"].(float64)
		seen++
	}
	if seen == 0 {
		t.Errorf("no progress notifications; notes %v", c.notes)
	}
}

func TestToolTableIsWellFormed(t *testing.T) {
	seen := map[string]bool{}
	srv := newServer(loadConfig(nil), io.Discard)
	defer srv.close()
	for _, d := range toolTable {
		desc := d.description
		if d.describe != nil {
			desc = d.describe(srv)
		}
		if seen[d.name] || d.run == nil || d.title == "" || len(desc) < 80 {
			t.Errorf("tool %q: duplicate, no handler, no title or a thin description", d.name)
		}
		seen[d.name] = true
		for _, r := range d.name {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", r) {
				t.Errorf("tool %q: bad name", d.name)
			}
		}
		sc, err := parseSchema(d.input)
		if err != nil {
			t.Errorf("tool %s: input schema: %v", d.name, err)
			continue
		}
		for _, r := range sc.Required {
			if sc.Properties[r] == nil {
				t.Errorf("tool %s: required %q is not a property", d.name, r)
			}
		}
		var out map[string]any
		if d.output != "" && (json.Unmarshal([]byte(d.output), &out) != nil || out["type"] != "object") {
			t.Errorf("tool %s: output schema is not a JSON object schema", d.name)
		}
	}
}

func TestPanicInHandlerIsAnInternalError(t *testing.T) {
	methods["test/panic"] = methodInfo{handle: func(context.Context, *rpcRequest) (map[string]any, error) { panic("boom") }}
	defer delete(methods, "test/panic")
	c := startServer(t)
	if m := c.request("test/panic", nil); errCode(m) != codeInternalError {
		t.Errorf("got %v", m)
	}
	if m := c.request("ping", nil); m["result"] == nil {
		t.Errorf("ping after panic: %v", m)
	}
	if !strings.Contains(c.stderr.String(), "boom") || !strings.Contains(c.stderr.String(), "goroutine") {
		t.Errorf("no stack on stderr: %s", c.stderr.String())
	}
}

func TestToolsListPagination(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.initialize("2025-11-25")
	m := c.request("tools/list", map[string]any{"cursor": encodeCursor(0)})
	tools := m["result"].(map[string]any)["tools"].([]any)
	if len(tools) != len(toolTable) || tools[0].(map[string]any)["name"] != "Bash" {
		t.Errorf("got %d tools", len(tools))
	}
	if m := c.request("tools/list", map[string]any{"cursor": encodeCursor(len(toolTable) + 1)}); errCode(m) != codeInvalidParams {
		t.Errorf("cursor past the end: %v", m)
	}
}

func TestDisabledToolIsUnknown(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-tools", "none")
	c.initialize("2025-11-25")
	if m := c.request("tools/list", nil); len(m["result"].(map[string]any)["tools"].([]any)) != 0 {
		t.Errorf("tools listed: %v", m)
	}
	if m := c.request("tools/call", map[string]any{"name": "Bash", "arguments": map[string]any{"command": "true"}}); errCode(m) != codeInvalidParams {
		t.Errorf("disabled tool: %v", m)
	}
}

func TestConfigLayers(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	os.MkdirAll(filepath.Join(home, ".telson"), 0o755)
	os.WriteFile(filepath.Join(home, ".telson", "telson-env.txt"), []byte(
		"# comment\nOUTPUT_LIMIT=1000\nSTREAMING=no\nBASH_TIMEOUT_MS=abc\nNOT_A_KEY=1\nthis line is wrong\nTOOL_Bash=off\nexport LOG_LEVEL=\"debug\"\n"), 0o644)
	t.Setenv("TELSON_OUTPUT_LIMIT", "2000")
	cfg := loadConfig(map[string]string{"OUTPUT_LIMIT": "3000"})
	if cfg.int("OUTPUT_LIMIT") != 3000 || cfg.source["OUTPUT_LIMIT"] != "flag -output-limit" {
		t.Errorf("flag should win: %v from %s", cfg.str("OUTPUT_LIMIT"), cfg.source["OUTPUT_LIMIT"])
	}
	if cfg.bool("STREAMING") || cfg.int("BASH_TIMEOUT_MS") != 30000 || cfg.str("LOG_LEVEL") != "debug" || cfg.toolEnabled("Bash") {
		t.Errorf("file values not applied: %v", cfg.values)
	}
	warnings := strings.Join(cfg.warnings, "\n")
	for _, want := range []string{"telson-env.txt:4: BASH_TIMEOUT_MS", "telson-env.txt:5: unknown key NOT_A_KEY", "telson-env.txt:6: not KEY=VALUE"} {
		if !strings.Contains(warnings, want) {
			t.Errorf("warnings lack %q:\n%s", want, warnings)
		}
	}
	cfg = loadConfig(nil)
	if cfg.int("OUTPUT_LIMIT") != 2000 {
		t.Errorf("environment should beat files: %v", cfg.str("OUTPUT_LIMIT"))
	}
}

func TestCommandLine(t *testing.T) {
	t.Parallel()
	runCLI := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := run(context.Background(), strings.NewReader(""), &out, &errb, args)
		return out.String() + errb.String(), err
	}
	if out, err := runCLI("-version"); err != nil || !strings.HasPrefix(out, "telson ") {
		t.Errorf("-version: %q %v", out, err)
	}
	if out, err := runCLI("tools"); err != nil || !strings.Contains(out, "Bash — Run a shell command") || !strings.Contains(out, "command (string, required)") {
		t.Errorf("tools: %q %v", out, err)
	}
	if out, err := runCLI("call", "Bash", `{"command":"echo from-cli"}`); err != nil || out != "from-cli\n\n" && out != "from-cli\n" {
		t.Errorf("call: %q %v", out, err)
	}
	if out, err := runCLI("call", "Bash", `{"command":"exit 4"}`); err != errToolFailed || !strings.Contains(out, "exit status 4") {
		t.Errorf("failing call: %q %v", out, err)
	}
	if out, err := runCLI("-config", "-output-limit", "77"); err != nil || !strings.Contains(out, "OUTPUT_LIMIT=77\t# flag -output-limit") {
		t.Errorf("-config: %q %v", out, err)
	}
	if _, err := runCLI("frobnicate"); err == nil {
		t.Errorf("unknown command accepted")
	}
}

// FuzzServe feeds arbitrary input to a server with no tools: it must never
// panic, must write only whole JSON lines, and must answer every request
// exactly once.
func FuzzServe(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}` + "\n" + `[{"jsonrpc":"2.0","id":2,"method":"ping"}]` + "\n"))
	f.Add([]byte("\xef\xbb\xbf{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"tools/list\",\"params\":{\"cursor\":\"x\"}}\r\n"))
	f.Add([]byte(`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}` + "\n{]\n"))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n" + `{"id":1e400,"jsonrpc":"2.0","method":"ping"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		if err := run(context.Background(), bytes.NewReader(in), &out, io.Discard, []string{"-tools", "none", "-max-message-bytes", "4096"}); err != nil {
			t.Fatal(err)
		}
		answers := map[string]int{}
		for _, line := range strings.SplitAfter(out.String(), "\n") {
			if line == "" {
				continue
			}
			if !strings.HasSuffix(line, "\n") || !json.Valid([]byte(line)) {
				t.Fatalf("bad output line %q", line)
			}
			var m rpcMessage
			json.Unmarshal([]byte(line), &m)
			if m.ID != nil {
				answers[string(m.ID)]++
			}
		}
		if bytes.Contains(in, []byte("cancelled")) || bytes.Contains(in, []byte("[")) {
			return // cancellations and batches change what is answered
		}
		want := map[string]int{}
		for _, line := range bytes.Split(in, []byte("\n")) {
			line = bytes.TrimPrefix(bytes.TrimRight(line, "\r"), []byte("\xef\xbb\xbf"))
			var m rpcMessage
			if len(line) > 4096 || decodeMessage(line, &m) != nil || m.JSONRPC != "2.0" || m.Method == "" || !validID(m.ID) {
				continue
			}
			want[idKey(m.ID)]++
		}
		for id, n := range want {
			if answers[id] != n {
				t.Errorf("id %s: %d requests, %d answers", id, n, answers[id])
			}
		}
	})
}

// benchProc is telson as a real process with raw pipes, for benchmarks.
type benchProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startBenchProc(b *testing.B, args ...string) *benchProc {
	b.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "TELSON_RUN_MAIN=1")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &benchProc{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	b.Cleanup(func() { in.Close(); cmd.Wait() })
	return p
}

func (p *benchProc) roundTrip(b *testing.B, line string) []byte {
	if _, err := io.WriteString(p.in, line); err != nil {
		b.Fatal(err)
	}
	resp, err := p.out.ReadBytes('\n')
	if err != nil {
		b.Fatal(err)
	}
	return resp
}

const benchInit = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}` + "\n"

// BenchmarkPingRoundTrip: one ping at a time over OS pipes to the real binary.
func BenchmarkPingRoundTrip(b *testing.B) {
	p := startBenchProc(b)
	p.roundTrip(b, benchInit)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.roundTrip(b, `{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n")
	}
}

// BenchmarkPipeEchoBaseline: the same round trip to `cat`, the floor for any server.
func BenchmarkPipeEchoBaseline(b *testing.B) {
	cmd := exec.Command("cat")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Start()
	defer func() { in.Close(); cmd.Wait() }()
	r := bufio.NewReader(out)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		io.WriteString(in, `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n")
		r.ReadBytes('\n')
	}
}

// BenchmarkPipelinedPing: b.N pings written without waiting; reports messages/s.
func BenchmarkPipelinedPing(b *testing.B) {
	p := startBenchProc(b)
	p.roundTrip(b, benchInit)
	b.ResetTimer()
	start := time.Now()
	go func() { // exits when every ping is written
		w := bufio.NewWriter(p.in)
		for i := 0; i < b.N; i++ {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", i+1)
		}
		w.Flush()
	}()
	for i := 0; i < b.N; i++ {
		if _, err := p.out.ReadBytes('\n'); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

func BenchmarkToolsList(b *testing.B) {
	p := startBenchProc(b)
	p.roundTrip(b, benchInit)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.roundTrip(b, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`+"\n")
	}
}

func BenchmarkBashTrue(b *testing.B) {
	p := startBenchProc(b)
	p.roundTrip(b, benchInit)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.roundTrip(b, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"true"}}}`+"\n")
	}
}

// BenchmarkDirectBashTrue is the baseline for BenchmarkBashTrue: bash -c true from Go.
func BenchmarkDirectBashTrue(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDirectBashTrueCaptured is the baseline with what any Bash tool
// must do besides the spawn: capture the output, in the process's own group.
func BenchmarkDirectBashTrueCaptured(b *testing.B) {
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("bash", "-c", "true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if _, err := cmd.CombinedOutput(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSpawnToInitialize: process start to the initialize response.
func BenchmarkSpawnToInitialize(b *testing.B) {
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "TELSON_RUN_MAIN=1")
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		cmd.Start()
		io.WriteString(in, benchInit)
		if _, err := bufio.NewReader(out).ReadBytes('\n'); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		in.Close()
		cmd.Wait()
		b.StartTimer()
	}
}

// BenchmarkSpawnBaseline: starting the same binary and reading one line it
// prints at once (-version), the floor for BenchmarkSpawnToInitialize.
func BenchmarkSpawnBaseline(b *testing.B) {
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(os.Args[0], "-version")
		cmd.Env = append(os.Environ(), "TELSON_RUN_MAIN=1")
		if _, err := cmd.Output(); err != nil {
			b.Fatal(err)
		}
	}
}

func procStatusKB(pid int, field string) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			n, _ := strconv.Atoi(strings.Fields(line)[1])
			return float64(n)
		}
	}
	return 0
}

// BenchmarkIdleMemory reports the resident memory of an initialized, idle telson.
func BenchmarkIdleMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		p := startBenchProc(b)
		p.roundTrip(b, benchInit)
		p.roundTrip(b, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`+"\n")
		b.ReportMetric(procStatusKB(p.cmd.Process.Pid, "VmRSS")/1024, "MB-idle-rss")
	}
}

// BenchmarkBashBigOutput: a command printing 50 MB; reports the reply size
// and telson's peak resident memory.
func BenchmarkBashBigOutput(b *testing.B) {
	for i := 0; i < b.N; i++ {
		p := startBenchProc(b)
		p.roundTrip(b, benchInit)
		resp := p.roundTrip(b, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"head -c 50000000 /dev/zero | tr '\\0' a"}}}`+"\n")
		b.ReportMetric(float64(len(resp))/1024, "KiB-reply")
		b.ReportMetric(procStatusKB(p.cmd.Process.Pid, "VmHWM")/1024, "MB-peak-rss")
	}
}

// TestREADMEIsComplete keeps the README true: every tool and every
// configuration key is documented there.
func TestREADMEIsComplete(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, d := range toolTable {
		if !strings.Contains(readme, "| "+d.name+" |") {
			t.Errorf("README: no row for tool %s", d.name)
		}
	}
	for _, k := range configKeys {
		if !strings.Contains(readme, "| "+k.name+" |") {
			t.Errorf("README: no row for config key %s", k.name)
		}
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
