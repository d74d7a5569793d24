// readdocs_test.go tests ReadDocs: the websocket client against a fake
// server, the DevTools client, the HTML to markdown converter on golden
// files, the tool with real Chromium, and the plain-HTTP fallback.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readdocsFake is a websocket server for one client connection.
type readdocsFake struct {
	url  string
	conn chan net.Conn // the accepted connection, after the handshake
	br   *bufio.Reader
}

// readdocsFakeServer accepts one websocket; respond writes the handshake answer
// (nil: a correct 101). It checks the client sent no Origin and no extensions.
func readdocsFakeServer(t *testing.T, respond func(w io.Writer, accept string)) *readdocsFake {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f := &readdocsFake{url: "ws://" + ln.Addr().String() + "/devtools/browser/x", conn: make(chan net.Conn, 1)}
	go func() { // exits after one connection is accepted and answered, or when the listener closes
		c, err := ln.Accept()
		if err != nil {
			return
		}
		t.Cleanup(func() { c.Close() })
		f.br = bufio.NewReader(c)
		req, err := http.ReadRequest(f.br)
		if err != nil {
			t.Errorf("fake: %v", err)
			return
		}
		if req.Header.Get("Origin") != "" || req.Header.Get("Sec-WebSocket-Extensions") != "" || req.Header.Get("Sec-WebSocket-Version") != "13" {
			t.Errorf("fake: unexpected handshake headers %v", req.Header)
		}
		sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + wsGUID))
		accept := base64.StdEncoding.EncodeToString(sum[:])
		if respond == nil {
			fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", accept)
		} else {
			respond(c, accept)
		}
		f.conn <- c
	}()
	return f
}

func (f *readdocsFake) server(t *testing.T) net.Conn {
	t.Helper()
	return <-f.conn
}

// readdocsFrame is an unmasked server frame.
func readdocsFrame(fin bool, op byte, payload []byte) []byte {
	return append(wsAppendHeader(nil, wsFrameHeader{fin: fin, op: op, length: uint64(len(payload))}), payload...)
}

// readFrame reads a client frame, checks it is masked and returns it unmasked.
func (f *readdocsFake) readFrame(t *testing.T) (wsFrameHeader, []byte) {
	t.Helper()
	h, err := wsReadHeader(f.br)
	if err != nil {
		t.Fatalf("fake read: %v", err)
	}
	if !h.masked {
		t.Fatalf("client frame not masked: %+v", h)
	}
	p := make([]byte, h.length)
	if _, err := io.ReadFull(f.br, p); err != nil {
		t.Fatal(err)
	}
	for i := range p {
		p[i] ^= h.mask[i&3]
	}
	return h, p
}

func readdocsDial(t *testing.T, f *readdocsFake, maxMsg int64) *wsConn {
	t.Helper()
	ws, err := wsDial(context.Background(), f.url, bytes.NewReader(bytes.Repeat([]byte{7, 1, 2, 3}, 1000)), maxMsg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.conn.Close() })
	return ws
}

func TestWSHandshakeErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		respond func(w io.Writer, accept string)
		want    string
	}{
		{"forbidden", func(w io.Writer, _ string) {
			io.WriteString(w, "HTTP/1.1 403 Forbidden\r\nContent-Length: 13\r\n\r\nbad origin!!!")
		}, "403 Forbidden: bad origin"},
		{"wrong accept", func(w io.Writer, _ string) {
			io.WriteString(w, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: AAAA\r\n\r\n")
		}, "wrong Sec-WebSocket-Accept"},
		{"no upgrade", func(w io.Writer, a string) {
			fmt.Fprintf(w, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", a)
		}, "no Upgrade"},
		{"compression", func(w io.Writer, a string) {
			fmt.Fprintf(w, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n", a)
		}, "extensions"},
		{"not http", func(w io.Writer, _ string) { io.WriteString(w, "garbage\r\n\r\n") }, "malformed HTTP"},
	}
	for _, tc := range cases {
		f := readdocsFakeServer(t, tc.respond)
		_, err := wsDial(context.Background(), f.url, bytes.NewReader(make([]byte, 64)), 1<<20)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if _, err := wsDial(context.Background(), "http://127.0.0.1:1/", bytes.NewReader(make([]byte, 64)), 1); err == nil {
		t.Error("dial of an http URL succeeded")
	}
}

func TestWSMaskedWrites(t *testing.T) {
	t.Parallel()
	f := readdocsFakeServer(t, nil)
	ws := readdocsDial(t, f, 1<<20)
	f.server(t)
	msg := bytes.Repeat([]byte("hello websocket "), 5000) // 80,000 bytes: a 64-bit length
	for _, m := range [][]byte{[]byte("hi"), msg[:200], msg} {
		if err := ws.writeFrame(1, m); err != nil {
			t.Fatal(err)
		}
		h, got := f.readFrame(t)
		if !h.fin || h.op != 1 || !bytes.Equal(got, m) || h.mask == [4]byte{} {
			t.Errorf("frame %+v: payload %d bytes, equal %v", h, len(got), bytes.Equal(got, m))
		}
	}
}

func TestWSReadLengthsFragmentsPing(t *testing.T) {
	t.Parallel()
	f := readdocsFakeServer(t, nil)
	ws := readdocsDial(t, f, 1<<20)
	srv := f.server(t)
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 200000} {
		p := bytes.Repeat([]byte{'x'}, n)
		go srv.Write(readdocsFrame(true, 1, p)) // exits once the client has read the frame
		got, err := ws.readMessage()
		if err != nil || !bytes.Equal(got, p) {
			t.Fatalf("length %d: got %d bytes, %v", n, len(got), err)
		}
	}
	// A message in three fragments with a ping between them.
	srv.Write(readdocsFrame(false, 1, []byte("ab")))
	srv.Write(readdocsFrame(true, 9, []byte("ping!")))
	srv.Write(readdocsFrame(false, 0, bytes.Repeat([]byte("c"), 300)))
	srv.Write(readdocsFrame(true, 0, []byte("d")))
	got, err := ws.readMessage()
	if want := "ab" + strings.Repeat("c", 300) + "d"; err != nil || string(got) != want {
		t.Fatalf("fragmented: got %q, %v", got, err)
	}
	if h, p := f.readFrame(t); h.op != 10 || string(p) != "ping!" {
		t.Errorf("pong: got op %d %q", h.op, p)
	}
	// The server closes: the client answers with the same code and stops.
	srv.Write(readdocsFrame(true, 8, append([]byte{0x03, 0xe9}, "bye"...)))
	if _, err := ws.readMessage(); !errors.Is(err, errWSClosed) || !strings.Contains(err.Error(), "1001 bye") {
		t.Errorf("close: got %v", err)
	}
	if h, p := f.readFrame(t); h.op != 8 || binary.BigEndian.Uint16(p) != 1001 {
		t.Errorf("close echo: op %d %v", h.op, p)
	}
	if err := ws.writeFrame(1, []byte("late")); !errors.Is(err, errWSClosed) {
		t.Errorf("write after close: %v", err)
	}
}

func TestWSClientClose(t *testing.T) {
	t.Parallel()
	f := readdocsFakeServer(t, nil)
	ws := readdocsDial(t, f, 1<<20)
	srv := f.server(t)
	ws.close()
	if h, p := f.readFrame(t); h.op != 8 || binary.BigEndian.Uint16(p) != 1000 {
		t.Fatalf("close frame: op %d %v", h.op, p)
	}
	srv.Write(readdocsFrame(true, 8, []byte{0x03, 0xe8}))
	if _, err := ws.readMessage(); !errors.Is(err, errWSClosed) {
		t.Errorf("after the close handshake: %v", err)
	}
}

func TestWSProtocolErrors(t *testing.T) {
	t.Parallel()
	masked := wsAppendHeader(nil, wsFrameHeader{fin: true, op: 1, masked: true, length: 1})
	cases := []struct {
		name   string
		frames [][]byte
		want   string
		code   uint16
	}{
		{"oversize", [][]byte{readdocsFrame(false, 1, make([]byte, 600)), readdocsFrame(true, 0, make([]byte, 600))}, "longer than 1000", 1009},
		{"oversize header", [][]byte{wsAppendHeader(nil, wsFrameHeader{fin: true, op: 2, length: 1 << 40})}, "longer than 1000", 1009},
		{"wrapping length", [][]byte{readdocsFrame(false, 1, make([]byte, 10)), wsAppendHeader(nil, wsFrameHeader{op: 0, length: 1<<64 - 5})}, "longer than 1000", 1009},
		{"rsv", [][]byte{{0xc1, 0x00}}, "reserved bits", 1002},
		{"masked", [][]byte{append(masked, 1, 2, 3, 4, 'x')}, "masked frame", 1002},
		{"stray continuation", [][]byte{readdocsFrame(true, 0, []byte("x"))}, "continuation", 1002},
		{"long ping", [][]byte{readdocsFrame(true, 9, make([]byte, 126))}, "control frame", 1002},
		{"opcode", [][]byte{readdocsFrame(true, 5, nil)}, "unknown opcode", 1002},
	}
	for _, tc := range cases {
		f := readdocsFakeServer(t, nil)
		ws := readdocsDial(t, f, 1000)
		srv := f.server(t)
		for _, fr := range tc.frames {
			srv.Write(fr)
		}
		if _, err := ws.readMessage(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
		if h, p := f.readFrame(t); h.op != 8 || len(p) < 2 || binary.BigEndian.Uint16(p) != tc.code {
			t.Errorf("%s: close frame op %d %v, want code %d", tc.name, h.op, p, tc.code)
		}
	}
}

func FuzzWSFrameHeader(f *testing.F) {
	f.Add(true, byte(0), byte(1), false, uint32(0), uint64(5))
	f.Add(false, byte(3), byte(9), true, uint32(0xdeadbeef), uint64(126))
	f.Add(true, byte(0), byte(2), true, uint32(1), uint64(1<<40))
	f.Fuzz(func(t *testing.T, fin bool, rsv, op byte, masked bool, mask uint32, length uint64) {
		h := wsFrameHeader{fin: fin, rsv: rsv & 7, op: op & 0x0f, masked: masked, length: length >> 1}
		if masked {
			binary.BigEndian.PutUint32(h.mask[:], mask)
		}
		b := wsAppendHeader(nil, h)
		r := bytes.NewReader(b)
		got, err := wsReadHeader(r)
		if err != nil || got != h || r.Len() != 0 {
			t.Fatalf("round trip of %+v: got %+v, %v, %d bytes left", h, got, err, r.Len())
		}
		wsReadHeader(bytes.NewReader(b[:len(b)-1])) // a cut header must not panic
	})
}

func TestCDPClient(t *testing.T) {
	t.Parallel()
	f := readdocsFakeServer(t, nil)
	ws := readdocsDial(t, f, 1<<20)
	srv := f.server(t)
	c := newCDPClient(ws)
	events := make(chan string, 4)
	c.subscribe("S1", func(method string, params json.RawMessage) { events <- method + " " + string(params) })
	type reply struct {
		V   int `json:"v"`
		err error
	}
	done := make(chan reply, 2)
	for i := 0; i < 2; i++ {
		go func() { // exits when the call returns
			var r reply
			r.err = c.call(context.Background(), "S1", "Test.echo", map[string]any{"x": 1}, &r)
			done <- r
		}()
	}
	_, p1 := f.readFrame(t)
	_, p2 := f.readFrame(t)
	if !bytes.Contains(p1, []byte(`"sessionId":"S1","method":"Test.echo","params":{"x":1}`)) {
		t.Errorf("command: %s", p1)
	}
	id := func(p []byte) int { var n int; fmt.Sscanf(string(p), `{"id":%d`, &n); return n }
	srv.Write(readdocsFrame(true, 1, []byte(`{"method":"Page.loadEventFired","sessionId":"S1","params":{"t":1}}`)))
	srv.Write(readdocsFrame(true, 1, []byte(fmt.Sprintf(`{"id":%d,"result":{"v":42}}`, id(p1)))))
	if r := <-done; r.err != nil || r.V != 42 {
		t.Errorf("reply: %+v", r)
	}
	if e := <-events; e != `Page.loadEventFired {"t":1}` {
		t.Errorf("event: %s", e)
	}
	_ = p2
	srv.Close() // the other call is still waiting: it must fail now
	if r := <-done; r.err == nil || !strings.Contains(r.err.Error(), "connection lost") {
		t.Errorf("pending call after the connection dropped: %+v", r)
	}
	if err := c.call(context.Background(), "", "Test.later", nil, nil); err == nil {
		t.Error("call on a dead connection succeeded")
	}
}

// TestHTMLToMarkdownGolden converts testdata/readdocs/*.html and compares
// with the .md next to each (go test -run Golden -update rewrites them).
func TestHTMLToMarkdownGolden(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("testdata/readdocs/*.html")
	if len(files) == 0 {
		t.Fatal("no golden inputs")
	}
	for _, in := range files {
		src, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		title, md := htmlToMarkdown(string(src), "https://example.com/docs/guide/page.html")
		got := "title: " + title + "\n\n" + md + "\n"
		golden := strings.TrimSuffix(in, ".html") + ".md"
		if *update {
			os.WriteFile(golden, []byte(got), 0o644)
			continue
		}
		want, _ := os.ReadFile(golden)
		if got != string(want) {
			t.Errorf("%s: got\n%s\nwant\n%s", in, got, want)
		}
	}
}

// readdocsNeedBrowser skips the test when no browser is installed, unless
// TELSON_REQUIRE_BROWSER is set.
func readdocsNeedBrowser(t *testing.T) {
	t.Helper()
	if findChrome(loadConfig(map[string]string{})) == "" {
		if os.Getenv("TELSON_REQUIRE_BROWSER") != "" {
			t.Fatal("no Chromium found and TELSON_REQUIRE_BROWSER is set")
		}
		t.Skip("no Chromium found")
	}
}

// readdocsSite serves the test pages; /hang never finishes loading until the test ends.
func readdocsSite(t *testing.T) *httptest.Server {
	t.Helper()
	stop := make(chan struct{})
	mux := http.NewServeMux()
	page := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, body)
		}
	}
	mux.HandleFunc("/js", page(`<html><head><title>JS page</title></head><body><main><h1>Static part</h1></main>
<script>document.querySelector('main').insertAdjacentHTML('beforeend', '<p>Added by <b>script</b>.</p>')</script></body></html>`))
	mux.HandleFunc("/spa", page(`<html><head><title>Loading…</title></head><body><div id="app">Loading…</div>
<script>addEventListener('load', () => setTimeout(() => fetch('/api/article').then(r => r.json()).then(a => {
  document.title = a.title;
  document.getElementById('app').innerHTML = '<article><h1>' + a.title + '</h1>' + a.paras.map(p => '<p>' + p + '</p>').join('') + '</article>';
}), 150))</script></body></html>`))
	mux.HandleFunc("/api/article", func(w http.ResponseWriter, r *http.Request) {
		select { // answers slowly, as a real API does
		case <-stop:
		case <-r.Context().Done():
		case <-time.After(200 * time.Millisecond):
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"title":"Fetched article","paras":["First fetched paragraph.","Last fetched paragraph."]}`)
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(404)
		io.WriteString(w, `<html><head><title>Not found</title></head><body><h1>No such page</h1></body></html>`)
	})
	mux.HandleFunc("/hang", page(`<html><head><title>Slow</title></head><body><p>Text before the image.</p><img src="/never"></body></html>`))
	mux.HandleFunc("/never", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/alert", page(`<html><head><title>Alert</title></head><body><script>alert('hello')</script><p>After the alert.</p></body></html>`))
	mux.HandleFunc("/refresh", page(`<html><head><meta http-equiv="refresh" content="0; url=/js"></head><body>Moving…</body></html>`))
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/js", http.StatusFound) })
	mux.HandleFunc("/latin1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=ISO-8859-1")
		w.Write([]byte("<html><head><title>Caf\xe9</title></head><body><p>Cr\xe8me br\xfbl\xe9e \x80 5</p></body></html>"))
	})
	mux.HandleFunc("/cp1252", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte(`<html><head><meta charset="windows-1252"><title>Quotes</title></head><body><p>` + "\x93quoted\x94 \x96 dash</p></body></html>"))
	})
	mux.HandleFunc("/long", page("<html><head><title>Long</title></head><body><p>"+strings.Repeat("word ", 5000)+"end</p></body></html>"))
	mux.HandleFunc("/silent", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/download", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Disposition", `attachment; filename="a.txt"`)
		io.WriteString(w, "file contents")
	})
	mux.HandleFunc("/file.bin", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(make([]byte, 100))
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(func() { close(stop); ts.Close() })
	return ts
}

// readdocsCall calls ReadDocs and returns its text and structured content.
func readdocsCall(t *testing.T, c *testClient, args map[string]any) (string, map[string]any, bool) {
	t.Helper()
	res := c.callTool("ReadDocs", args)
	sc, _ := res["structuredContent"].(map[string]any)
	if !isError(res) && sc == nil {
		t.Errorf("ReadDocs %v: no structuredContent", args)
	}
	return resultText(res), sc, isError(res)
}

func TestReadDocsChromium(t *testing.T) {
	readdocsNeedBrowser(t)
	t.Parallel()
	site := readdocsSite(t)
	c := startServer(t, "-readdocs-timeout-ms", "4000")
	c.initialize("2025-06-18")
	check := func(name string, args map[string]any, wantErr bool, want ...string) map[string]any {
		t.Helper()
		text, sc, isErr := readdocsCall(t, c, args)
		if isErr != wantErr {
			t.Errorf("%s: isError %v, want %v: %s", name, isErr, wantErr, text)
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: reply lacks %q:\n%s", name, w, text)
			}
		}
		return sc
	}
	sc := check("js", map[string]any{"url": site.URL + "/js"}, false, "JS page\n"+site.URL+"/js\n", "# Static part", "Added by **script**.")
	if sc["via"] != "chromium" || sc["status"] != float64(200) || sc["title"] != "JS page" {
		t.Errorf("js: structured %v", sc)
	}
	check("spa", map[string]any{"url": site.URL + "/spa", "wait_ms": 0}, false, "Fetched article\n", "# Fetched article", "First fetched paragraph.", "Last fetched paragraph.")
	check("text", map[string]any{"url": site.URL + "/js", "format": "text"}, false, "Static part\n\nAdded by script.")
	check("html", map[string]any{"url": site.URL + "/js", "format": "html"}, false, "<b>script</b>")
	sc = check("404", map[string]any{"url": site.URL + "/missing"}, false, "HTTP status 404", "# No such page")
	if sc["status"] != float64(404) {
		t.Errorf("404: status %v", sc["status"])
	}
	check("redirect", map[string]any{"url": site.URL + "/redirect"}, false, site.URL+"/js\n")
	check("refresh", map[string]any{"url": site.URL + "/refresh"}, false, site.URL+"/js\n", "Added by **script**.")
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	check("refused", map[string]any{"url": "http://" + closed + "/"}, true, "net::ERR_CONNECTION_REFUSED")
	check("scheme", map[string]any{"url": "file:///etc/passwd"}, true, "only http and https")
	check("alert", map[string]any{"url": site.URL + "/alert"}, false, "After the alert.")
	check("download", map[string]any{"url": site.URL + "/download"}, true, "is a download, not a page")
	check("silent", map[string]any{"url": site.URL + "/silent"}, true, "sent no response within")
	tlsSite := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsSite.Config.ErrorLog = log.New(io.Discard, "", 0) // the browser's refusal is expected
	tlsSite.StartTLS()                                   // with a certificate nobody trusts
	defer tlsSite.Close()
	check("tls", map[string]any{"url": tlsSite.URL + "/"}, true, "net::ERR_CERT_AUTHORITY_INVALID")
	check("never loads", map[string]any{"url": site.URL + "/hang"}, false, "Text before the image.", "had not finished loading")
	sc = check("paging", map[string]any{"url": site.URL + "/long", "max_length": 1000, "start_index": 23000}, false,
		"Content truncated. Call the ReadDocs tool with a start_index of 24000 to get more content.")
	if sc["truncated"] != true || sc["next_start_index"] != float64(24000) || sc["total_length"] != float64(25003) || len(sc["content"].(string)) != 1000 {
		t.Errorf("paging: structured %v", sc)
	}
	starts := strings.Count(c.stderr.String(), "started Chromium pid")
	if starts != 1 {
		t.Errorf("browser started %d times for all calls, want once:\n%s", starts, c.stderr.String())
	}
	// A browser that died is replaced on the next call.
	var pid int
	fmt.Sscanf(c.stderr.String()[strings.Index(c.stderr.String(), "started Chromium pid "):], "started Chromium pid %d", &pid)
	syscall.Kill(-pid, syscall.SIGKILL)
	waitGone(t, pid)
	check("after a crash", map[string]any{"url": site.URL + "/js"}, false, "Added by **script**.")
	if starts := strings.Count(c.stderr.String(), "started Chromium pid"); starts != 2 {
		t.Errorf("browser started %d times, want a second start after the crash:\n%s", starts, c.stderr.String())
	}
}

// readdocsGroupAlive lists the live (not zombie) processes in process group pgid.
func readdocsGroupAlive(pgid int) []string {
	var alive []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // state, ppid, pgrp, ...
		if len(f) > 2 && f[2] == fmt.Sprint(pgid) && f[0] != "Z" {
			alive = append(alive, d.Name())
		}
	}
	return alive
}

func TestReadDocsBrowserDiesWithTelson(t *testing.T) {
	readdocsNeedBrowser(t)
	t.Parallel()
	site := readdocsSite(t)
	for _, kill := range []bool{false, true} {
		c := startBinary(t, nil)
		c.initialize("2025-11-25")
		if text, _, isErr := readdocsCall(t, c, map[string]any{"url": site.URL + "/js"}); isErr {
			t.Fatalf("ReadDocs: %s", text)
		}
		var pid int
		if i := strings.Index(c.stderr.String(), "started Chromium pid "); i >= 0 {
			fmt.Sscanf(c.stderr.String()[i:], "started Chromium pid %d", &pid)
		}
		if pid == 0 || len(readdocsGroupAlive(pid)) == 0 {
			t.Fatalf("no browser group found; stderr:\n%s", c.stderr.String())
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		_, profile, _ := strings.Cut(string(cmdline), "--user-data-dir=")
		profile, _, _ = strings.Cut(profile, "\x00")
		if _, err := os.Stat(profile); profile == "" || err != nil {
			t.Fatalf("no profile directory in the browser's command line %q: %v", cmdline, err)
		}
		if kill {
			c.cmd.Process.Kill()
		} else {
			c.in.Close()
		}
		<-c.done
		if _, err := os.Stat(profile); !kill && !os.IsNotExist(err) {
			t.Errorf("profile directory %s left behind: %v", profile, err)
		}
		os.RemoveAll(profile) // a killed telson cannot remove it
		c.done <- nil         // for the cleanup
		deadline := time.Now().Add(watchdog)
		for wait := time.Millisecond; len(readdocsGroupAlive(pid)) > 0; wait = min(2*wait, 100*time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("kill=%v: browser processes %v outlived telson", kill, readdocsGroupAlive(pid))
			}
			time.Sleep(wait) // polling processes of another program, bounded by the watchdog
		}
	}
}

func TestReadDocsWithoutBrowser(t *testing.T) {
	t.Parallel()
	site := readdocsSite(t)
	// The browser hidden: a configured path that does not exist, and no PATH.
	c := startBinary(t, []string{"PATH=" + t.TempDir(), "TELSON_CHROME_PATH=/nonexistent/chromium"})
	c.initialize("2025-06-18")
	check := func(name string, args map[string]any, wantErr bool, want ...string) map[string]any {
		t.Helper()
		text, sc, isErr := readdocsCall(t, c, args)
		if isErr != wantErr {
			t.Errorf("%s: isError %v, want %v: %s", name, isErr, wantErr, text)
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: reply lacks %q:\n%s", name, w, text)
			}
		}
		return sc
	}
	sc := check("js", map[string]any{"url": site.URL + "/redirect"}, false, "JS page\n"+site.URL+"/js\n",
		"Read without a browser (no Chromium found", "# Static part")
	if sc["via"] != "http" || strings.Contains(sc["content"].(string), "Added by") {
		t.Errorf("js without a browser: %v", sc)
	}
	check("latin1", map[string]any{"url": site.URL + "/latin1"}, false, "Café\n", "Crème brûlée € 5")
	check("cp1252", map[string]any{"url": site.URL + "/cp1252"}, false, "“quoted” – dash")
	check("text", map[string]any{"url": site.URL + "/latin1", "format": "text"}, false, "\n\nCrème brûlée € 5")
	check("html", map[string]any{"url": site.URL + "/latin1", "format": "html"}, false, "<p>Crème brûlée € 5</p>")
	check("404", map[string]any{"url": site.URL + "/missing"}, false, "HTTP status 404", "# No such page")
	check("binary", map[string]any{"url": site.URL + "/file.bin"}, true, "application/octet-stream")
	check("download", map[string]any{"url": site.URL + "/download"}, true, "is a download")
	if text, _, _ := readdocsCall(t, c, map[string]any{"url": site.URL + "/long", "start_index": 24990}); !strings.HasSuffix(text, "\n\nword word end") {
		t.Errorf("last part: %q", text)
	}
	check("past the end", map[string]any{"url": site.URL + "/long", "start_index": 25005}, false, "<error>No more content available.</error>")
	check("scheme", map[string]any{"url": "ftp://example.com/"}, true, "only http and https")
}

// BenchmarkReadDocsWarm reads a local page with the browser reused; it
// reports the median, the first call (with browser start), the median for the
// same page with a script (which waits for a quiet network) and a plain
// net/http GET of the page as the baseline.
// go test -run XXX -bench ReadDocsWarm -benchtime 20x
func BenchmarkReadDocsWarm(b *testing.B) {
	if findChrome(loadConfig(map[string]string{})) == "" {
		b.Skip("no Chromium found")
	}
	page := "<html><head><title>Bench</title></head><body><main><h1>Doc</h1>" + strings.Repeat("<p>Some <a href='/x'>documentation</a> text.</p>", 200) + "</main></body></html>"
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, page)
		if r.URL.Path == "/scripted" {
			io.WriteString(w, "<script>document.title = 'Scripted'</script>")
		}
	}))
	defer site.Close()
	srv := newServer(loadConfig(map[string]string{}), io.Discard)
	defer srv.close()
	ctx := context.Background()
	median := func(url string, n int) float64 {
		var d []time.Duration
		for i := 0; i < n; i++ {
			t0 := time.Now()
			if _, err := srv.readPage(ctx, readDocsArgs{URL: url, Format: "markdown"}); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(t0))
		}
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	first := median(site.URL+"/doc", 1)
	var plain []time.Duration
	for i := 0; i < max(b.N, 5); i++ {
		t0 := time.Now()
		resp, err := http.Get(site.URL + "/doc")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		plain = append(plain, time.Since(t0))
	}
	slices.Sort(plain)
	b.ResetTimer()
	warm := median(site.URL+"/doc", b.N)
	b.StopTimer()
	b.ReportMetric(first, "first-call-ms")
	b.ReportMetric(warm, "median-ms")
	b.ReportMetric(median(site.URL+"/scripted", 5), "scripted-median-ms")
	get := float64(plain[len(plain)/2].Microseconds()) / 1000
	b.ReportMetric(get, "http-get-median-ms")
	b.ReportMetric(warm/get, "x-http-get")
}

// BenchmarkHTMLToMarkdown converts a 1 MB documentation page (MB/s); parsing
// alone is the baseline in the same run.
func BenchmarkHTMLToMarkdown(b *testing.B) {
	section := `<section><h2 id="s">Section <a href="#s">¶</a></h2><p>Some <b>bold</b> and <a href="../rel/page.html">a link</a>, with <code>code()</code>.</p>
<ul><li>item one</li><li>item <em>two</em><ul><li>nested</li></ul></li></ul>
<pre><code class="language-go">func f() int {
	return 1 &lt; 2
}</code></pre><table><tr><th>A</th><th>B</th></tr><tr><td>1</td><td>2</td></tr></table><blockquote><p>Quote.</p></blockquote></section>`
	var sb strings.Builder
	sb.WriteString("<html><head><title>Big</title></head><body><nav><a href='/'>home</a></nav><main>")
	for sb.Len() < 1<<20 {
		sb.WriteString(section)
	}
	sb.WriteString("</main></body></html>")
	src := sb.String()
	t0 := time.Now()
	for i := 0; i < 5; i++ {
		parseHTML(src)
	}
	parse := time.Since(t0) / 5
	b.SetBytes(int64(len(src)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		htmlToMarkdown(src, "https://example.com/docs/")
	}
	b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(parse), "x-parse-only")
}

// FuzzHTMLToMarkdown feeds the converter arbitrary markup: it must not panic.
func FuzzHTMLToMarkdown(f *testing.F) {
	for _, in := range []string{"<p>a<b>b</p>", "<ul><li>x<ol start=x><li>y", "<pre><code class=lang-", "<table><tr><td colspan=99999>", "<a href='%zz'>x</a><img src=':'>", "<base href='::'><a href=x>y</a>"} {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, src string) {
		htmlToMarkdown(src, "https://example.com/a/")
		htmlToMarkdown(src, "")
	})
}
