package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestArgumentsNormalized: unknown arguments are ignored, lossless conversions
// reach the handler converted, and what does not convert still fails naming the field.
func TestArgumentsNormalized(t *testing.T) {
	t.Parallel()
	schema, err := parseSchema(`{"type":"object","required":["n"],"properties":{
		"n":{"type":"integer","minimum":1,"maximum":9000},"f":{"type":"number"},"s":{"type":"string"},
		"b":{"type":"boolean"},"list":{"type":"array","items":{"type":"object","properties":{"id":{"type":"string"}}}},
		"mode":{"type":"string","enum":["a","b"]}}}`)
	if err != nil {
		t.Fatal(err)
	}
	ok := map[string]string{
		`{"n":"5000"}`:                                  `{"n":5000}`,
		`{"n":5,"f":"2.5","s":7,"b":"false"}`:           `{"b":false,"f":2.5,"n":5,"s":"7"}`,
		`{"n":1,"wait_for_previous":true,"x":{"y":1}}`:  `{"n":1}`,
		`{"n":1,"list":[{"id":3,"extra":1}],"s":"-12"}`: `{"list":[{"id":"3"}],"n":1,"s":"-12"}`,
		`{"n":1,"s":-40}`:                               `{"n":1,"s":"-40"}`,
	}
	for in, want := range ok {
		got, problem := schema.check([]byte(in))
		if problem != "" || string(got) != want {
			t.Errorf("%s: got %s %q, want %s", in, got, problem, want)
		}
	}
	bad := map[string]string{
		`{}`:                           `"n" is required`,
		`{"n":"five"}`:                 `"n" must be an integer, got a string`,
		`{"n":"5.5"}`:                  `"n" must be an integer, got 5.5`,
		`{"n":"9001"}`:                 `"n" must be at most 9000`,
		`{"n":1,"s":1.5}`:              `"s" must be a string, got a number (1.5)`,
		`{"n":1,"s":1e3}`:              `"s" must be a string`,
		`{"n":1,"b":"yes"}`:            `"b" must be a boolean, got a string`,
		`{"n":1,"f":"0x10"}`:           `"f" must be a number, got a string`,
		`{"n":1,"mode":"c"}`:           `"mode" must be one of a, b`,
		`{"n":1,"list":[{"id":true}]}`: `"id" must be a string, got a boolean`,
	}
	for in, want := range bad {
		if _, problem := schema.check([]byte(in)); !strings.Contains(problem, want) {
			t.Errorf("%s: got %q, want %q", in, problem, want)
		}
	}
}

// TestToolCallExtraArguments: a real call with arguments telson does not know,
// and a timeout written as a string, succeeds.
func TestToolCallExtraArguments(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.initialize("2025-11-25")
	res := c.callTool("Bash", map[string]any{"command": "echo ok", "timeout": "5000",
		"description": "say ok", "wait_for_previous": true})
	if isError(res) || resultText(res) != "ok\n" {
		t.Errorf("got %v", res)
	}
	res = c.callTool("Bash", map[string]any{"command": "echo ok", "timeout": "soon"})
	if !isError(res) || !strings.Contains(resultText(res), `"timeout" must be an integer`) {
		t.Errorf("got %v", res)
	}
}

// modernMessage is a 2026-07-28 request line with the _meta every request carries.
func modernMessage(id any, method string, params map[string]any) string {
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = map[string]any{metaProtocolVersion: versionModern, metaClientCaps: map[string]any{}}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return string(b)
}

// subscriptionOf is the subscription id a notification carries, or nil.
func subscriptionOf(m map[string]any) any {
	p, _ := m["params"].(map[string]any)
	meta, _ := p["_meta"].(map[string]any)
	return meta[metaSubscriptionID]
}

// A 2026-07-28 client over stdio: subscriptions/listen is acknowledged with what
// it will deliver, then carries the list changes it asked for, until cancelled
// (by an id equal in value) or until stdin ends, which answers it.
func TestListenStdio(t *testing.T) {
	t.Parallel()
	extra := t.TempDir()
	c := startServer(t, "-state-dir", t.TempDir(), "-additional-skills", extra)
	c.send(modernMessage(5, methodListen, map[string]any{"notifications": map[string]any{"toolsListChanged": true, "promptsListChanged": true}}))
	ack := c.recv()
	granted := ack["params"].(map[string]any)["notifications"].(map[string]any)
	if ack["method"] != "notifications/subscriptions/acknowledged" || subscriptionOf(ack) != 5.0 || len(granted) != 2 {
		t.Fatalf("first message: %v", ack)
	}
	c.send(modernMessage("p", methodListen, map[string]any{"notifications": map[string]any{"promptsListChanged": true, "resourcesListChanged": true}}))
	ack = c.recv()
	if granted = ack["params"].(map[string]any)["notifications"].(map[string]any); len(granted) != 1 || granted["promptsListChanged"] != true {
		t.Fatalf("ack of a prompts-only listen: %v", ack)
	}

	// seen collects list changes by subscription until it has what want names and id's response.
	seen := map[string]bool{}
	readUntil := func(id any, want ...string) {
		t.Helper()
		for gotReply := false; !gotReply || !hasAll(seen, want); {
			m := c.recv()
			if m["id"] == id {
				gotReply = true
			} else if m["method"] != nil {
				seen[fmt.Sprint(m["method"], " ", subscriptionOf(m))] = true
			} else {
				t.Fatalf("unexpected %v", m)
			}
		}
	}
	wfSkill(t, extra, "fresh", "---\ndescription: d\n---\nx\n")
	c.send(modernMessage(2, "prompts/list", nil))
	readUntil(2.0, "notifications/tools/list_changed 5", "notifications/prompts/list_changed 5", "notifications/prompts/list_changed p")
	if seen["notifications/tools/list_changed p"] {
		t.Fatal("tools/list_changed reached a listen that did not ask for it")
	}

	c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5.0}}`)
	clear(seen)
	wfSkill(t, extra, "fresher", "---\ndescription: d\n---\nx\n")
	c.send(modernMessage(3, "prompts/list", nil))
	readUntil(3.0, "notifications/prompts/list_changed p")
	if seen["notifications/prompts/list_changed 5"] || seen["notifications/tools/list_changed 5"] {
		t.Fatal("a cancelled listen still delivers")
	}

	c.in.Close()
	var replies []map[string]any
	for line := range c.lines {
		var m map[string]any
		json.Unmarshal(line, &m)
		if m["method"] == nil {
			replies = append(replies, m)
		}
	}
	if len(replies) != 1 || replies[0]["id"] != "p" || subscriptionOf(map[string]any{"params": replies[0]["result"]}) != "p" {
		t.Fatalf("at EOF want only the open listen answered, got %v", replies)
	}
}

func hasAll(set map[string]bool, keys []string) bool {
	for _, k := range keys {
		if !set[k] {
			return false
		}
	}
	return true
}

// Over HTTP the listen's POST reply is an event stream that stays open; closing it cancels.
func TestListenHTTP(t *testing.T) {
	t.Parallel()
	extra := t.TempDir()
	srv := newServer(loadConfig(map[string]string{"ADDITIONAL_SKILLS": extra}), io.Discard)
	h := newHTTPHandler(srv, "127.0.0.1")
	ts := httptest.NewServer(h)
	defer srv.close()
	defer h.closeAll()
	defer ts.Close()
	c := httpClientFor(t, ts)
	body := modernMessage("h1", methodListen, map[string]any{"notifications": map[string]any{"toolsListChanged": true, "promptsListChanged": true}})
	req, _ := http.NewRequest("POST", c.url, strings.NewReader(body))
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("MCP-Protocol-Version", versionModern)
	req.Header.Set("Mcp-Method", methodListen)
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	next := func() map[string]any {
		t.Helper()
		ev, err := httpReadEvent(br)
		if err != nil {
			t.Fatalf("listen stream: %v", err)
		}
		return httpDecode(t, []byte(ev.data))
	}
	if ack := next(); ack["method"] != "notifications/subscriptions/acknowledged" || subscriptionOf(ack) != "h1" {
		t.Fatalf("first event: %v", ack)
	}
	wfSkill(t, extra, "fresh", "---\ndescription: d\n---\nx\n")
	r, b := httpModernPost(c, "prompts/list", nil, nil)
	httpStatus(t, "prompts/list", r, b, 200, 0)
	if res := httpDecode(t, b)["result"].(map[string]any); res["ttlMs"] == nil || res["cacheScope"] != "public" {
		t.Errorf("a modern list result needs ttlMs and cacheScope: %s", b)
	}
	seen := map[string]bool{}
	for !seen["notifications/tools/list_changed"] || !seen["notifications/prompts/list_changed"] {
		m := next()
		if subscriptionOf(m) != "h1" {
			t.Fatalf("event without the subscription id: %v", m)
		}
		seen[m["method"].(string)] = true
	}
	resp.Body.Close()
	deadline := time.Now().Add(watchdog)
	for {
		srv.listens.mu.Lock()
		n := len(srv.listens.open)
		srv.listens.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("closing the stream did not end the listen")
		}
		runtime.Gosched()
	}
}

// Limits: a batch over maxBatch is refused whole; a client that pipelines 20,000
// requests and reads nothing makes the session stop reading at maxInflight, with
// memory bounded, and every request is still answered once the client reads.
func TestRequestLimits(t *testing.T) {
	srv := newServer(loadConfig(nil), io.Discard)
	defer srv.close()
	outR, outW := io.Pipe()
	inR, inW := io.Pipe()
	s := newSession(srv, outW)
	served := make(chan error, 1)
	go func() { served <- s.serve(context.Background(), inR) }() // exits at EOF

	var batch bytes.Buffer
	batch.WriteString(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}` + "\n[")
	for i := range 20000 {
		if i > 0 {
			batch.WriteByte(',')
		}
		fmt.Fprintf(&batch, `{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, i+1)
	}
	batch.WriteString("]\n")
	go inW.Write(batch.Bytes()) // exits when read
	out := bufio.NewReader(outR)
	if line, _ := out.ReadString('\n'); !strings.Contains(line, `"id":0,"result"`) {
		t.Fatalf("initialize: %.300s", line)
	}
	if line, _ := out.ReadString('\n'); !strings.Contains(line, `"code":-32600`) || !strings.Contains(line, "at most 100") {
		t.Fatalf("batch of 20,000: %.300s", line)
	}

	const n = 20000
	var written atomic.Int64
	go func() { // exits when every request is written or the input closes
		for i := range n {
			if _, err := fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`+"\n", i+1); err != nil {
				return
			}
			written.Add(1)
		}
	}()
	deadline := time.Now().Add(watchdog)
	for len(s.slots) < maxInflight {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests running, want %d", len(s.slots), maxInflight)
		}
		runtime.Gosched()
	}
	var mem runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&mem)
	if written.Load() == n {
		t.Error("the session read every request while its client read nothing")
	}
	if mem.HeapInuse > 300<<20 {
		t.Errorf("heap %d MB with a client that reads nothing", mem.HeapInuse>>20)
	}
	t.Logf("stalled after %d requests written, heap %d MB", written.Load(), mem.HeapInuse>>20)
	for i := range n {
		line, err := out.ReadString('\n')
		if err != nil || !strings.Contains(line, `"tools":[`) {
			t.Fatalf("reply %d: %v %.200s", i, err, line)
		}
	}
	inW.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
