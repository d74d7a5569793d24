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
var _ = syscall.Kill
