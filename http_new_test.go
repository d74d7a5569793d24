package main

// http_new_test.go tests what the http branch added: the HTTP server's read and idle timeouts,
// its connection cap, long requests and streams outliving the read timeout, `telson call` on a
// terminal, and the command line's help, warnings and tool listing.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// httpDialRaw opens a TCP connection to the host of url, closed at the test's end; reads on it
// give up at the watchdog.
func httpDialRaw(t *testing.T, url string) net.Conn {
	t.Helper()
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetReadDeadline(time.Now().Add(watchdog))
	return conn
}

// httpClosedByServer reads conn to its end and fails unless the server closed it.
func httpClosedByServer(t *testing.T, conn net.Conn, what string) []byte {
	t.Helper()
	b, err := io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: the connection was still open at the watchdog", what)
	}
	return b
}

func TestHTTPSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	url, _, _, _ := httpRun(t, "-http", ":0", "-http-timeout-ms", "300")
	conn := httpDialRaw(t, url)
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")
	go func() { // trickles the body, a byte every 50 ms, until the server has closed the connection
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	reply := httpClosedByServer(t, conn, "slow body")
	if len(reply) > 0 && !bytes.HasPrefix(reply, []byte("HTTP/1.1 400")) {
		t.Errorf("slow body answered %q", reply)
	}
	headers := httpDialRaw(t, url)
	fmt.Fprintf(headers, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n") // headers that never end
	httpClosedByServer(t, headers, "slow headers")
}

func TestHTTPIdleConnectionIsClosed(t *testing.T) {
	t.Parallel()
	url, _, _, _ := httpRun(t, "-http", ":0", "-http-timeout-ms", "300")
	conn := httpDialRaw(t, url)
	fmt.Fprintf(conn, "GET /other HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 404 || resp.Close {
		t.Fatalf("HTTP %d, close %v: want 404 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	if rest, err := io.ReadAll(br); len(rest) > 0 || err != nil {
		t.Errorf("the idle connection was not closed: %q %v", rest, err)
	}
}

// At the cap a new connection is closed at once (the client can retry) rather than left
// waiting; once the server has timed out the slow ones, clients are served again.
func TestHTTPConnectionCap(t *testing.T) {
	t.Parallel()
	url, _, _, _ := httpRun(t, "-http", ":0", "-http-timeout-ms", "3000", "-http-max-connections", "2")
	var slow []net.Conn
	for range 2 {
		conn := httpDialRaw(t, url)
		fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\n")
		slow = append(slow, conn)
	}
	refused := httpDialRaw(t, url)
	fmt.Fprintf(refused, "GET /other HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if b := httpClosedByServer(t, refused, "a connection over the cap"); len(b) > 0 {
		t.Fatalf("a connection over the cap was served: %q", b)
	}
	for _, conn := range slow {
		httpClosedByServer(t, conn, "a slow connection")
	}
	c := &httpTestClient{t: t, hc: &http.Client{}, url: url}
	c.initialize("2025-11-25")
}

// The read timeout is for sending a request: a request running longer, and a GET stream open
// longer, are not cut by it.
func TestHTTPLongRequestsOutliveTheReadTimeout(t *testing.T) {
	t.Parallel()
	url, _, _, _ := httpRun(t, "-http", ":0", "-http-timeout-ms", "200")
	c := &httpTestClient{t: t, hc: &http.Client{}, url: url}
	c.initialize("2025-11-25")
	stream, _ := httpOpenStream(t, c, "/mcp")
	if stream.StatusCode != 200 {
		t.Fatalf("GET stream: HTTP %d", stream.StatusCode)
	}
	long := map[string]any{"name": "Bash", "arguments": map[string]any{"command": "sleep 0.6; echo done"}}
	if got := resultText(c.result("tools/call", long)); got != "done\n" {
		t.Errorf("legacy call longer than the read timeout: %q", got)
	}
	resp, body := httpModernPost(c, "tools/call", long, map[string]string{"Mcp-Session-Id": ""})
	httpStatus(t, "stateless call longer than the read timeout", resp, body, 200, 0)
	if got := resultText(httpDecode(t, body)["result"].(map[string]any)); got != "done\n" {
		t.Errorf("stateless call longer than the read timeout: %q", got)
	}
	resp, body = c.do("GET", "", nil)
	httpStatus(t, "a second stream while the first is open", resp, body, http.StatusConflict, 0)
}

// openPTY opens a pseudo-terminal pair: what is written to tty is read from master.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	var unlock int32
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Skipf("unlock pseudo-terminal: %v", e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Skipf("pseudo-terminal number: %v", e)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

func TestCallStripsControlCharactersOnATerminal(t *testing.T) {
	t.Parallel()
	command := `printf 'a\033]0;pwned\007b\tc\rd\033[2Je\n'`
	args := []string{"call", "Bash", fmt.Sprintf(`{"command":%q}`, command)}
	var piped bytes.Buffer
	if err := run(context.Background(), strings.NewReader(""), &piped, io.Discard, args); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(piped.String(), "a\033]0;pwned\007b\tc\rd\033[2Je\n") {
		t.Errorf("not a terminal: the output must stay as it is: %q", piped.String())
	}
	master, tty := openPTY(t)
	if err := run(context.Background(), strings.NewReader(""), tty, io.Discard, args); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	master.SetReadDeadline(time.Now().Add(watchdog))
	got, _ := io.ReadAll(master) // ends with EIO once the terminal side is closed
	// the terminal turns \n into \r\n; the \r telson wrote is gone
	if want := "a]0;pwnedb\tcd[2Je\r\n"; !strings.HasPrefix(string(got), want) {
		t.Errorf("on a terminal: %q, want it to start with %q", got, want)
	}
}

func TestCommandLineHelpWarningsAndTools(t *testing.T) {
	t.Parallel()
	runCLI := func(args ...string) (stdout, stderr string) {
		var out, errb bytes.Buffer
		if err := run(context.Background(), strings.NewReader(""), &out, &errb, args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out.String(), errb.String()
	}
	_, help := runCLI("-h")
	for _, want := range []string{"~/.telson/telson-env.txt", "./.telson/telson-env.txt", "TELSON_<KEY>",
		"-output-limit value\n", "(default 30000)"} {
		if !strings.Contains(help, want) {
			t.Errorf("-h lacks %q:\n%s", want, help)
		}
	}

	out, warnings := runCLI("-config", "-output-limit", "-5", "-tools", "Bash,Nope", "-chrome-path", "/nonexistent/chromium")
	for _, want := range []string{
		`OUTPUT_LIMIT: "-5" is not a whole number of 0 or more; keeping "30000"`,
		`TOOLS: no tool is named "Nope"; it is left out`,
		`CHROME_PATH: exec: "/nonexistent/chromium"`,
	} {
		if !strings.Contains(warnings, want) {
			t.Errorf("warnings lack %q:\n%s", want, warnings)
		}
	}
	if !strings.Contains(out, "OUTPUT_LIMIT=30000\t# default") {
		t.Errorf("-output-limit -5 changed the value:\n%s", out)
	}
	if _, w := runCLI("-config", "-tools", "none"); strings.Contains(w, "warning") {
		t.Errorf("-tools none warned: %s", w)
	}

	tools, _ := runCLI("tools")
	readDocs := tools[strings.Index(tools, "ReadDocs —"):]
	readDocs = readDocs[:strings.Index(readDocs, "\n\n")]
	params := strings.Split(readDocs, "\n  - ")[1:]
	if len(params) < 2 || !strings.HasPrefix(params[0], "url (string, required)") {
		t.Errorf("ReadDocs: the required url is not first:\n%s", readDocs)
	}
	if !strings.Contains(readDocs, "format (string, one of [markdown text html])") {
		t.Errorf("ReadDocs: format's values are missing:\n%s", readDocs)
	}
	if !strings.Contains(tools, "engines (array, one of [duckduckgo ") {
		t.Errorf("WebSearch: the engines' values are missing")
	}
}
