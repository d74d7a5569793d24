// http_test.go tests the HTTP transports the way HTTP clients use them:
// Streamable HTTP in both eras against an httptest server, the 2024-11-05
// HTTP+SSE transport, every 4xx rule, session limits and expiry, and a
// graceful shutdown of the real `run -http`. Benchmarks compare HTTP with stdio.
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
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// httpStart serves a fresh telson over httptest with configuration flags.
func httpStart(t testing.TB, flags map[string]string, setup ...func(h *httpHandler)) (*httptest.Server, *httpHandler) {
	t.Helper()
	srv := newServer(loadConfig(flags), io.Discard)
	h := newHTTPHandler(srv, "127.0.0.1")
	for _, f := range setup {
		f(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		h.closeAll()
		ts.Close()
		srv.close()
	})
	return ts, h
}

// httpTestClient talks to one /mcp endpoint, as one session once initialized.
type httpTestClient struct {
	t       testing.TB
	hc      *http.Client
	url     string
	sid     string // Mcp-Session-Id to send
	version string // MCP-Protocol-Version to send
	token   string
	nextID  int
}

func httpClientFor(t testing.TB, ts *httptest.Server) *httpTestClient {
	return &httpTestClient{t: t, hc: ts.Client(), url: ts.URL + "/mcp"}
}

// do sends one HTTP request; hdr adds or (with "") removes headers.
func (c *httpTestClient) do(method, body string, hdr map[string]string) (*http.Response, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	for k, v := range map[string]string{"Mcp-Session-Id": c.sid, "MCP-Protocol-Version": c.version} {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range hdr {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, c.url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: read: %v", method, c.url, err)
	}
	return resp, b
}

// httpMessages decodes a reply body: one JSON message, or the data of every SSE event.
func httpMessages(t testing.TB, resp *http.Response, body []byte) []map[string]any {
	t.Helper()
	var datas []string
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		br := bufio.NewReader(bytes.NewReader(body))
		for {
			ev, err := httpReadEvent(br)
			if err != nil {
				break
			}
			if ev.name != "message" {
				t.Fatalf("SSE event %q, want message", ev.name)
			}
			datas = append(datas, ev.data)
		}
	} else {
		datas = []string{string(body)}
	}
	var out []map[string]any
	for _, d := range datas {
		var m map[string]any
		if err := json.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("reply %q: %v", d, err)
		}
		out = append(out, m)
	}
	return out
}

// httpEvent is one server-sent event.
type httpEvent struct{ name, data string }

// httpReadEvent reads the next event, skipping comments and blank lines.
func httpReadEvent(br *bufio.Reader) (httpEvent, error) {
	var ev httpEvent
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if ev.name != "" || ev.data != "" {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			ev.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			if ev.data != "" {
				ev.data += "\n"
			}
			ev.data += line[len("data: "):]
		}
	}
}

// rpc sends a request and returns every message of the reply, the response last.
func (c *httpTestClient) rpc(method string, params any, hdr map[string]string) (*http.Response, []map[string]any) {
	c.t.Helper()
	c.nextID++
	msg := map[string]any{"jsonrpc": "2.0", "id": c.nextID, "method": method}
	if params != nil {
		msg["params"] = params
	}
	b, _ := json.Marshal(msg)
	resp, body := c.do("POST", string(b), hdr)
	if resp.StatusCode != http.StatusOK {
		return resp, []map[string]any{httpDecode(c.t, body)}
	}
	msgs := httpMessages(c.t, resp, body)
	if len(msgs) == 0 || msgs[len(msgs)-1]["id"] != float64(c.nextID) {
		c.t.Fatalf("%s: reply does not end with response %d: %s", method, c.nextID, body)
	}
	return resp, msgs
}

// result sends a request that must succeed and returns its result.
func (c *httpTestClient) result(method string, params any) map[string]any {
	c.t.Helper()
	resp, msgs := c.rpc(method, params, nil)
	res, ok := msgs[len(msgs)-1]["result"].(map[string]any)
	if resp.StatusCode != http.StatusOK || !ok {
		c.t.Fatalf("%s: HTTP %d %v", method, resp.StatusCode, msgs)
	}
	return res
}

func httpDecode(t testing.TB, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return m
}

// initialize opens a session at version.
func (c *httpTestClient) initialize(version string) {
	c.t.Helper()
	c.sid, c.version = "", ""
	resp, msgs := c.rpc("initialize", map[string]any{"protocolVersion": version, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "test", "version": "1"}}, nil)
	if resp.StatusCode != 200 || msgs[0]["result"] == nil {
		c.t.Fatalf("initialize: HTTP %d %v", resp.StatusCode, msgs)
	}
	c.sid, c.version = resp.Header.Get("Mcp-Session-Id"), version
	resp, body := c.do("POST", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	if resp.StatusCode != http.StatusAccepted || len(body) != 0 {
		c.t.Fatalf("notifications/initialized: HTTP %d %q, want 202 and no body", resp.StatusCode, body)
	}
}

// httpStatus asserts an HTTP status and, when code is not 0, the JSON-RPC error code of the body.
func httpStatus(t *testing.T, what string, resp *http.Response, body []byte, status, code int) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("%s: HTTP %d, want %d: %s", what, resp.StatusCode, status, body)
		return
	}
	if code != 0 {
		if got := errCode(httpDecode(t, body)); got != code {
			t.Errorf("%s: error code %d, want %d: %s", what, got, code, body)
		}
	}
}

func TestHTTPSessionLifecycle(t *testing.T) {
	t.Parallel()
	ts, _ := httpStart(t, nil)
	c := httpClientFor(t, ts)
	c.initialize("2025-06-18")
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(c.sid) {
		t.Fatalf("Mcp-Session-Id %q is not 16 random bytes in hex", c.sid)
	}
	res := c.result("tools/list", nil)
	if tools := res["tools"].([]any); len(tools) == 0 || tools[0].(map[string]any)["name"] != "Bash" {
		t.Errorf("tools/list: %v", res)
	}
	if c.result("ping", nil) == nil {
		t.Error("ping: no result")
	}
	other := httpClientFor(t, ts)
	other.initialize("2025-11-25")
	if other.sid == c.sid {
		t.Fatal("two sessions got the same id")
	}

	resp, body := c.do("POST", `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`, map[string]string{"Mcp-Session-Id": ""})
	httpStatus(t, "no session id", resp, body, 400, codeInvalidRequest)
	resp, body = c.do("POST", `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`, map[string]string{"Mcp-Session-Id": "0123456789abcdef0123456789abcdef"})
	httpStatus(t, "unknown session id", resp, body, 404, codeInvalidRequest)
	resp, body = c.do("GET", "", map[string]string{"Mcp-Session-Id": ""})
	httpStatus(t, "GET without session id", resp, body, 400, codeInvalidRequest)

	resp, body = c.do("DELETE", "", nil)
	httpStatus(t, "DELETE", resp, body, 200, 0)
	resp, body = c.do("POST", `{"jsonrpc":"2.0","id":10,"method":"tools/list"}`, nil)
	httpStatus(t, "after DELETE", resp, body, 404, codeInvalidRequest)
	resp, body = c.do("DELETE", "", nil)
	httpStatus(t, "second DELETE", resp, body, 404, 0)
	if other.result("ping", nil) == nil {
		t.Error("the other session ended too")
	}
}

func TestHTTPProtocolVersionHeader(t *testing.T) {
	t.Parallel()
	ts, _ := httpStart(t, nil)
	c := httpClientFor(t, ts)
	c.initialize("2025-06-18")
	// Claude Code sends a supported version other than the negotiated one: tolerated
	resp, msgs := c.rpc("tools/list", nil, map[string]string{"MCP-Protocol-Version": "2025-03-26"})
	if resp.StatusCode != 200 || msgs[0]["result"] == nil {
		t.Errorf("other supported version: HTTP %d %v", resp.StatusCode, msgs)
	}
	resp, _ = c.rpc("tools/list", nil, map[string]string{"MCP-Protocol-Version": ""})
	if resp.StatusCode != 200 {
		t.Errorf("no version header: HTTP %d", resp.StatusCode)
	}
	resp, body := c.do("POST", `{"jsonrpc":"2.0","id":5,"method":"tools/list"}`, map[string]string{"MCP-Protocol-Version": "1999-01-01"})
	httpStatus(t, "unsupported version header", resp, body, 400, codeUnsupportedVersion)
}

func TestHTTPBashCall(t *testing.T) {
	t.Parallel()
	ts, _ := httpStart(t, nil)
	c := httpClientFor(t, ts)
	c.initialize("2025-11-25")
	resp, msgs := c.rpc("tools/call", map[string]any{"name": "Bash", "arguments": map[string]any{"command": "cd / && echo over http"}}, nil)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json for a call with nothing before its response", ct)
	}
	res := msgs[0]["result"].(map[string]any)
	if resultText(res) != "over http\n" || isError(res) || res["structuredContent"] == nil {
		t.Errorf("Bash over HTTP: %v", res)
	}
	// the session keeps its shell state between POSTs
	res = c.result("tools/call", map[string]any{"name": "Bash", "arguments": map[string]any{"command": "pwd"}})
	if resultText(res) != "/\n" {
		t.Errorf("cwd not kept across POSTs: %q", resultText(res))
	}
}

func TestHTTPProgressIsSSE(t *testing.T) {
	t.Parallel()
	ts, _ := httpStart(t, nil)
	c := httpClientFor(t, ts)
	c.initialize("2025-06-18")
	params := map[string]any{"name": "Bash", "_meta": map[string]any{"progressToken": "p1"},
		"arguments": map[string]any{"command": "for i in 1 2 3 4; do echo line$i; sleep 0.15; done"}}
	resp, msgs := c.rpc("tools/call", params, nil)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream when progress comes first", ct)
	}
	if len(msgs) < 2 {
		t.Fatalf("want progress events before the response, got %v", msgs)
	}
	for _, m := range msgs[:len(msgs)-1] {
		if m["method"] != "notifications/progress" || m["params"].(map[string]any)["progressToken"] != "p1" {
			t.Errorf("event before the response: %v", m)
		}
	}
	if res := msgs[len(msgs)-1]["result"].(map[string]any); !strings.Contains(resultText(res), "line4") {
		t.Errorf("response: %v", res)
	}

	// a client that takes only JSON gets plain JSON; the progress goes nowhere (no GET stream)
	resp, msgs = c.rpc("tools/call", params, map[string]string{"Accept": "application/json"})
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" || len(msgs) != 1 {
		t.Errorf("JSON-only client: %q %v", ct, msgs)
	}
}

// httpOpenStream opens GET /mcp and returns its events on a channel (closed at the stream's end).
func httpOpenStream(t *testing.T, c *httpTestClient, path string) (*http.Response, chan httpEvent) {
	t.Helper()
	req, _ := http.NewRequest("GET", strings.TrimSuffix(c.url, "/mcp")+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	if c.sid != "" && path == "/mcp" {
		req.Header.Set("Mcp-Session-Id", c.sid)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	events := make(chan httpEvent, 100)
	go func() { // exits when the stream ends
		defer close(events)
		br := bufio.NewReader(resp.Body)
		for {
			ev, err := httpReadEvent(br)
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	return resp, events
}

func httpNextEvent(t *testing.T, events chan httpEvent) (httpEvent, bool) {
	t.Helper()
	select {
	case ev, ok := <-events:
		return ev, ok
	case <-time.After(watchdog):
		t.Fatal("no event within the watchdog")
	}
	return httpEvent{}, false
}

func TestHTTPGetStream(t *testing.T) {
	t.Parallel()
	ts, h := httpStart(t, nil)
	c := httpClientFor(t, ts)
	c.initialize("2025-11-25")
	resp, events := httpOpenStream(t, c, "/mcp")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET: HTTP %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r2, b2 := c.do("GET", "", nil)
	httpStatus(t, "second GET stream", r2, b2, http.StatusConflict, 0)

	s := h.session(c.sid).s
	s.announce("background task 7 finished")
	ev, _ := httpNextEvent(t, events)
	var m map[string]any
	json.Unmarshal([]byte(ev.data), &m)
	if ev.name != "message" || m["method"] != "notifications/message" || m["params"].(map[string]any)["data"] != "background task 7 finished" {
		t.Fatalf("unsolicited message on the GET stream: %+v", ev)
	}

	// a server-to-client request goes out on the stream; the client POSTs its reply
	got := make(chan string, 1)
	go func() { // exits when the request is answered or times out
		ctx, cancel := context.WithTimeout(context.Background(), watchdog)
		defer cancel()
		res, err := s.request(ctx, "roots/list", nil)
		got <- fmt.Sprintf("%s %v", res, err)
	}()
	ev, _ = httpNextEvent(t, events)
	json.Unmarshal([]byte(ev.data), &m)
	if m["method"] != "roots/list" {
		t.Fatalf("want roots/list on the stream, got %s", ev.data)
	}
	id, _ := json.Marshal(m["id"])
	r3, b3 := c.do("POST", fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"roots":[]}}`, id), nil)
	httpStatus(t, "client response", r3, b3, http.StatusAccepted, 0)
	if g := <-got; g != `{"roots":[]} <nil>` {
		t.Errorf("server request result: %s", g)
	}

	c.do("DELETE", "", nil)
	if _, ok := httpNextEvent(t, events); ok {
		t.Error("the stream outlived its session")
	}
}

// httpModernPost sends a stateless 2026-07-28 request with matching headers, then hdr's changes.
func httpModernPost(c *httpTestClient, method string, params map[string]any, hdr map[string]string) (*http.Response, []byte) {
	c.t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	if _, ok := params["_meta"]; !ok {
		params["_meta"] = map[string]any{metaProtocolVersion: versionModern, metaClientCaps: map[string]any{}}
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	all := map[string]string{"Mcp-Method": method, "MCP-Protocol-Version": versionModern}
	if n, ok := params["name"].(string); ok {
		all["Mcp-Name"] = n
	}
	for k, v := range hdr {
		all[k] = v
	}
	return c.do("POST", string(b), all)
}

func TestHTTPModernEra(t *testing.T) {
	t.Parallel()
	ts, _ := httpStart(t, nil)
	c := httpClientFor(t, ts)

	resp, body := httpModernPost(c, "tools/list", nil, nil)
	httpStatus(t, "tools/list", resp, body, 200, 0)
	res := httpDecode(t, body)["result"].(map[string]any)
	if res["resultType"] != "complete" || res["ttlMs"] == nil || resp.Header.Get("Mcp-Session-Id") != "" {
		t.Errorf("modern tools/list: %s (session %q)", body, resp.Header.Get("Mcp-Session-Id"))
	}
	resp, body = httpModernPost(c, "tools/call", map[string]any{"name": "Bash", "arguments": map[string]any{"command": "echo stateless"}}, nil)
	httpStatus(t, "tools/call", resp, body, 200, 0)
	if got := resultText(httpDecode(t, body)["result"].(map[string]any)); got != "stateless\n" {
		t.Errorf("modern Bash: %q", got)
	}
	resp, body = c.do("POST", `{"jsonrpc":"2.0","id":1,"method":"server/discover"}`, map[string]string{"Mcp-Method": "server/discover"})
	httpStatus(t, "server/discover probe", resp, body, 200, 0)

	cases := []struct {
		name         string
		method       string
		params       map[string]any
		hdr          map[string]string
		status, code int
	}{
		{"Mcp-Method mismatch", "tools/list", nil, map[string]string{"Mcp-Method": "tools/call"}, 400, codeHeaderMismatch},
		{"Mcp-Method missing", "tools/list", nil, map[string]string{"Mcp-Method": ""}, 400, codeHeaderMismatch},
		{"Mcp-Name mismatch", "tools/call", map[string]any{"name": "Bash", "arguments": map[string]any{"command": "true"}}, map[string]string{"Mcp-Name": "Other"}, 400, codeHeaderMismatch},
		{"version header differs from _meta", "tools/list", nil, map[string]string{"MCP-Protocol-Version": "2025-11-25"}, 400, codeHeaderMismatch},
		{"unsupported version header", "tools/list", nil, map[string]string{"MCP-Protocol-Version": "2099-01-01"}, 400, codeUnsupportedVersion},
		{"version header missing", "tools/list", nil, map[string]string{"MCP-Protocol-Version": ""}, 400, codeHeaderMismatch},
		{"unsupported version", "tools/list", map[string]any{"_meta": map[string]any{metaProtocolVersion: "2099-01-01", metaClientCaps: map[string]any{}}},
			map[string]string{"MCP-Protocol-Version": "2099-01-01"}, 400, codeUnsupportedVersion},
		{"missing clientCapabilities", "tools/list", map[string]any{"_meta": map[string]any{metaProtocolVersion: versionModern}}, nil, 400, codeInvalidParams},
		{"unknown method", "resources/frobnicate", nil, nil, 404, codeMethodNotFound},
	}
	for _, tc := range cases {
		resp, body := httpModernPost(c, tc.method, tc.params, tc.hdr)
		httpStatus(t, tc.name, resp, body, tc.status, tc.code)
	}
	resp, body = c.do("POST", `[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`, map[string]string{"MCP-Protocol-Version": versionModern})
	httpStatus(t, "batch", resp, body, 400, codeInvalidRequest)
	for _, m := range []string{"GET", "DELETE"} {
		resp, body = c.do(m, "", map[string]string{"MCP-Protocol-Version": versionModern})
		httpStatus(t, m+" in the modern era", resp, body, 405, 0)
	}
	resp, body = c.do("POST", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		map[string]string{"MCP-Protocol-Version": versionModern, "Mcp-Method": "notifications/cancelled"})
	httpStatus(t, "modern notification", resp, body, 202, 0)
}

func TestHTTPSecurityChecks(t *testing.T) {
	t.Parallel()
	ts, _ := httpStart(t, map[string]string{"HTTP_ORIGINS": "https://app.example.com", "HTTP_HOSTS": "mybox.lan", "HTTP_MAX_BODY_BYTES": "2000"})
	c := httpClientFor(t, ts)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		{"Host evil.example.com", map[string]string{"Host": "evil.example.com"}, 403},
		{"Host evil with loopback port", map[string]string{"Host": "evil.example.com:" + strings.Split(ts.URL, ":")[2]}, 403},
		{"Origin evil", map[string]string{"Origin": "http://evil.example.com"}, 403},
		{"Origin null", map[string]string{"Origin": "null"}, 403},
		{"Origin localhost", map[string]string{"Origin": "http://localhost:5173"}, 200},
		{"Origin [::1]", map[string]string{"Origin": "https://[::1]:8443"}, 200},
		{"Origin configured", map[string]string{"Origin": "https://app.example.com"}, 200},
		{"Host localhost", map[string]string{"Host": "localhost:1234"}, 200},
		{"Host [::1]", map[string]string{"Host": "[::1]:80"}, 200},
		{"Host configured", map[string]string{"Host": "mybox.lan:65510"}, 200},
	} {
		resp, body := c.do("POST", init, tc.hdr)
		httpStatus(t, tc.name, resp, body, tc.status, 0)
	}
	resp, body := c.do("POST", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"`+strings.Repeat("x", 3000)+`"}}`, nil)
	httpStatus(t, "body over HTTP_MAX_BODY_BYTES", resp, body, 413, codeInvalidRequest)
	resp, body = c.do("PUT", init, nil)
	httpStatus(t, "PUT /mcp", resp, body, 405, 0)
	c.url = ts.URL + "/other"
	resp, body = c.do("POST", init, nil)
	httpStatus(t, "unknown path", resp, body, 404, 0)
	c.url = ts.URL + "/mcp"
	resp, body = c.do("POST", "{not json", nil)
	httpStatus(t, "bad JSON", resp, body, 400, codeParseError)

	tokTS, _ := httpStart(t, map[string]string{"HTTP_TOKEN": "s3cret"})
	tc := httpClientFor(t, tokTS)
	resp, body = tc.do("POST", init, nil)
	httpStatus(t, "no token", resp, body, 401, 0)
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	tc.token = "wrong"
	resp, body = tc.do("POST", init, nil)
	httpStatus(t, "wrong token", resp, body, 401, 0)
	tc.token = "s3cret"
	tc.initialize("2025-11-25")
	if tc.result("ping", nil) == nil {
		t.Error("ping with the token failed")
	}
}

func TestHTTPSessionLimitsAndExpiry(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	ts, _ := httpStart(t, map[string]string{"HTTP_MAX_SESSIONS": "2", "HTTP_SESSION_IDLE_MS": "60000"},
		func(h *httpHandler) { h.now = func() time.Time { return time.Unix(0, clock.Load()) } })
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}`
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`

	a, b, c := httpClientFor(t, ts), httpClientFor(t, ts), httpClientFor(t, ts)
	a.initialize("2025-11-25")
	b.initialize("2025-11-25")
	resp, body := c.do("POST", initialize, nil)
	httpStatus(t, "a session over HTTP_MAX_SESSIONS", resp, body, 503, codeInternalError)
	a.do("DELETE", "", nil)
	c.initialize("2025-11-25")

	// idle expiry: a session without requests or stream for HTTP_SESSION_IDLE_MS ends;
	// one with an open stream is not idle
	httpOpenStream(t, c, "/mcp")
	clock.Add(int64(61 * time.Second))
	resp, body = b.do("POST", ping, nil)
	httpStatus(t, "idle session", resp, body, 404, codeInvalidRequest)
	c.result("ping", nil)
	a.initialize("2025-11-25") // b's expiry made room
}

func TestHTTPSessionEndKillsItsCommands(t *testing.T) {
	t.Parallel()
	ts, _ := httpStart(t, nil)
	c := httpClientFor(t, ts)
	c.initialize("2025-11-25")
	pidFile := filepath.Join(t.TempDir(), "pid")
	other := *c
	done := make(chan map[string]any, 1)
	go func() { // exits when the call answers
		_, msgs := c.rpc("tools/call", map[string]any{"name": "Bash", "arguments": map[string]any{"command": "sleep 300 & echo $! > " + pidFile + "; wait"}}, nil)
		done <- msgs[len(msgs)-1]
	}()
	pid := readPidFile(t, pidFile)
	resp, _ := other.do("DELETE", "", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("DELETE: HTTP %d", resp.StatusCode)
	}
	waitGone(t, pid)
	select {
	case m := <-done:
		if res, _ := m["result"].(map[string]any); res == nil || !isError(res) {
			t.Errorf("the cancelled call answered %v", m)
		}
	case <-time.After(watchdog):
		t.Fatal("the call never answered")
	}
}

func TestHTTPBatchPerVersion(t *testing.T) {
	t.Parallel()
	ts, _ := httpStart(t, nil)
	c := httpClientFor(t, ts)
	c.initialize("2025-03-26")
	resp, body := c.do("POST", `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/x"}]`, nil)
	var arr []map[string]any
	if resp.StatusCode != 200 || json.Unmarshal(body, &arr) != nil || len(arr) != 2 {
		t.Errorf("batch in 2025-03-26: HTTP %d %s", resp.StatusCode, body)
	}
	resp, body = c.do("POST", `[{"jsonrpc":"2.0","method":"notifications/x"}]`, nil)
	httpStatus(t, "notification-only batch", resp, body, 202, 0)
	c.initialize("2025-06-18")
	resp, body = c.do("POST", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, nil)
	httpStatus(t, "batch in 2025-06-18", resp, body, 400, codeInvalidRequest)
}

func TestHTTPOldSSETransport(t *testing.T) {
	t.Parallel()
	ts, _ := httpStart(t, nil)
	c := httpClientFor(t, ts)
	stream, events := httpOpenStream(t, c, "/sse")
	if stream.StatusCode != 200 || stream.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /sse: HTTP %d", stream.StatusCode)
	}
	ev, _ := httpNextEvent(t, events)
	if ev.name != "endpoint" || !regexp.MustCompile(`^/messages\?sessionId=[0-9a-f]{32}$`).MatchString(ev.data) {
		t.Fatalf("first event: %+v", ev)
	}
	c.url = ts.URL + ev.data
	post := func(msg string) {
		t.Helper()
		resp, body := c.do("POST", msg, nil)
		httpStatus(t, "POST /messages", resp, body, 202, 0)
	}
	next := func() map[string]any {
		t.Helper()
		ev, ok := httpNextEvent(t, events)
		if !ok || ev.name != "message" {
			t.Fatalf("stream: %+v %v", ev, ok)
		}
		return httpDecode(t, []byte(ev.data))
	}
	post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}`)
	if m := next(); m["result"].(map[string]any)["protocolVersion"] != "2024-11-05" {
		t.Fatalf("initialize: %v", m)
	}
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"echo old transport"}}}`)
	if m := next(); m["id"] != float64(2) || resultText(m["result"].(map[string]any)) != "old transport\n" {
		t.Fatalf("Bash: %v", m)
	}
	bad := *c
	bad.url = ts.URL + "/messages?sessionId=nope"
	resp, body := bad.do("POST", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil)
	httpStatus(t, "unknown sessionId", resp, body, 404, 0)

	stream.Body.Close()
	// closing the stream ends the session; the server notices asynchronously
	deadline := time.Now().Add(watchdog)
	for {
		resp, _ := c.do("POST", `{"jsonrpc":"2.0","id":3,"method":"ping"}`, nil)
		if resp.StatusCode == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session outlived its /sse stream")
		}
		time.Sleep(10 * time.Millisecond) // polling the server's view, bounded by the watchdog
	}
}

// httpRun runs telson's run with -http in-process and returns its URL, cancel and result.
func httpRun(t *testing.T, args ...string) (url string, stderr *syncBuffer, cancel context.CancelFunc, result chan error) {
	t.Helper()
	stderr = &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	result = make(chan error, 1)
	go func() { result <- run(ctx, strings.NewReader(""), io.Discard, stderr, args) }() // exits when run returns
	t.Cleanup(cancel)
	re := regexp.MustCompile(`serving MCP on (http://\S+)`)
	deadline := time.Now().Add(watchdog)
	for {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			return m[1], stderr, cancel, result
		}
		if time.Now().After(deadline) {
			t.Fatalf("telson -http did not start: %s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond) // polling the log line, bounded by the watchdog
	}
}

func TestHTTPGracefulShutdown(t *testing.T) {
	t.Parallel()
	url, stderr, cancel, result := httpRun(t, "-http", ":0")
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("-http :0 listens on %s, want loopback", url)
	}
	c := &httpTestClient{t: t, hc: &http.Client{}, url: url}
	c.initialize("2025-11-25")
	dir := t.TempDir()
	finished, killed := make(chan map[string]any, 1), make(chan struct{})
	go func() { // exits when the call answers
		_, msgs := c.rpc("tools/call", map[string]any{"name": "Bash", "arguments": map[string]any{"command": "echo $$ > " + dir + "/a; sleep 0.5; echo finished"}}, nil)
		finished <- msgs[len(msgs)-1]
	}()
	go func() { // exits when the call's connection ends
		defer close(killed)
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": map[string]any{"name": "Bash", "arguments": map[string]any{"command": "sleep 300 & echo $! > " + dir + "/b; wait"}}})
		req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
		req.Header.Set("Mcp-Session-Id", c.sid)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	readPidFile(t, dir+"/a")
	long := readPidFile(t, dir+"/b")
	cancel()
	select {
	case m := <-finished:
		if res, _ := m["result"].(map[string]any); res == nil || !strings.Contains(resultText(res), "finished") {
			t.Errorf("in-flight call during shutdown: %v", m)
		}
	case <-time.After(watchdog):
		t.Fatal("the in-flight call never answered")
	}
	select {
	case err := <-result:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(watchdog):
		t.Fatalf("run did not return; stderr:\n%s", stderr.String())
	}
	waitGone(t, long)
	<-killed
	if _, err := http.Post(url, "application/json", strings.NewReader("{}")); err == nil {
		t.Error("still accepting connections after shutdown")
	}
}

func TestHTTPBeyondLoopbackNeedsToken(t *testing.T) {
	t.Parallel()
	url, stderr, cancel, result := httpRun(t, "-http", "0.0.0.0:0")
	defer func() { cancel(); <-result }()
	m := regexp.MustCompile(`Authorization: Bearer ([0-9a-f]{48})`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no generated token on stderr: %s", stderr.String())
	}
	url = "http://127.0.0.1:" + regexp.MustCompile(`:(\d+)/mcp$`).FindStringSubmatch(url)[1] + "/mcp"
	c := &httpTestClient{t: t, hc: &http.Client{}, url: url}
	resp, body := c.do("POST", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil)
	httpStatus(t, "no token beyond loopback", resp, body, 401, 0)
	c.token = m[1]
	c.initialize("2025-11-25")
	resp, body = c.do("POST", `{"jsonrpc":"2.0","id":2,"method":"ping"}`, map[string]string{"Host": "192.0.2.7:65510"})
	httpStatus(t, "IP-literal Host when listening on every interface", resp, body, 200, 0)
	resp, body = c.do("POST", `{"jsonrpc":"2.0","id":3,"method":"ping"}`, map[string]string{"Host": "evil.example.com"})
	httpStatus(t, "DNS name Host when listening on every interface", resp, body, 403, 0)
}

// BenchmarkHTTPToolsList: tools/list over keep-alive from 8 concurrent clients of one session.
func BenchmarkHTTPToolsList(b *testing.B) {
	ts, _ := httpStart(b, nil)
	c := httpClientFor(b, ts)
	c.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	c.initialize("2025-11-25")
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	var n atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() { // exits when b.N requests are done
			defer wg.Done()
			for n.Add(1) <= int64(b.N) {
				req, _ := http.NewRequest("POST", c.url, bytes.NewReader(body))
				req.Header.Set("Mcp-Session-Id", c.sid)
				req.Header.Set("Accept", "application/json, text/event-stream")
				resp, err := c.hc.Do(req)
				if err != nil {
					failed.Store(err.Error())
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Store(resp.Status)
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	if f := failed.Load(); f != nil {
		b.Fatal(f)
	}
}

// BenchmarkHTTPBashTrue: one Bash `true` call over HTTP (compare with BenchmarkStdioBashTrue).
func BenchmarkHTTPBashTrue(b *testing.B) {
	ts, _ := httpStart(b, nil)
	c := httpClientFor(b, ts)
	c.initialize("2025-11-25")
	params := map[string]any{"name": "Bash", "arguments": map[string]any{"command": "true"}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.result("tools/call", params)
	}
}

// BenchmarkStdioBashTrue: one Bash `true` call over stdio, the baseline for BenchmarkHTTPBashTrue.
func BenchmarkStdioBashTrue(b *testing.B) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // exits when run returns
		run(ctx, inR, outW, io.Discard, nil)
		outW.Close()
		close(done)
	}()
	br := bufio.NewReader(outR)
	call := func(id int, msg string) {
		fmt.Fprintf(inW, msg+"\n", id)
		want := fmt.Sprintf(`"id":%d,`, id)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				b.Fatal(err)
			}
			if strings.Contains(line, want) {
				return
			}
		}
	}
	call(0, `{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}`)
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		call(i, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"Bash","arguments":{"command":"true"}}}`)
	}
	b.StopTimer()
	cancel()
	inW.Close()
	<-done
}

// httpAskTool is a test-only tool (added to one test server, never to toolTable)
// that logs, asks the client with a server-to-client request and returns the answer.
var httpAskTool = toolDef{name: "HTTPAsk", title: "t", description: "t", input: `{"type":"object","properties":{}}`,
	run: func(ctx context.Context, c *toolCall) toolResult {
		c.req.log("info", "asking")
		res, err := c.s.request(ctx, "elicitation/create", map[string]any{"message": "ok?"})
		if err != nil {
			return errorResult("%v", err)
		}
		return textResult(string(res))
	}}

func TestHTTPServerRequestOnPOSTStream(t *testing.T) {
	t.Parallel()
	ts, _ := httpStart(t, nil, func(h *httpHandler) {
		sc, _ := parseSchema(httpAskTool.input)
		h.srv.tools = append(h.srv.tools, &toolEntry{def: &httpAskTool, schema: sc})
	})
	c := httpClientFor(t, ts)
	c.initialize("2025-06-18")
	req, _ := http.NewRequest("POST", c.url, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"HTTPAsk"}}`))
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.sid)
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("Content-Type %q, want an event stream", resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	next := func() map[string]any {
		t.Helper()
		ev, err := httpReadEvent(br)
		if err != nil || ev.name != "message" {
			t.Fatalf("event %+v: %v", ev, err)
		}
		return httpDecode(t, []byte(ev.data))
	}
	if m := next(); m["method"] != "notifications/message" || m["params"].(map[string]any)["data"] != "asking" {
		t.Fatalf("want the request's log first, got %v", m)
	}
	ask := next()
	if ask["method"] != "elicitation/create" {
		t.Fatalf("want the server request on the POST's stream, got %v", ask)
	}
	id, _ := json.Marshal(ask["id"])
	r2, b2 := c.do("POST", fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"action":"accept"}}`, id), nil)
	httpStatus(t, "the client's answer", r2, b2, 202, 0)
	if m := next(); m["id"] != float64(7) || resultText(m["result"].(map[string]any)) != `{"action":"accept"}` {
		t.Fatalf("response: %v", m)
	}
	if _, err := httpReadEvent(br); err != io.EOF {
		t.Errorf("the stream did not end after the response: %v", err)
	}
}
