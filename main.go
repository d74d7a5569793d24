// Command telson is a Model Context Protocol server that gives an AI client
// practical agent tools: a shell, background processes, a browser-backed page
// reader, a many-engine web search and workflow tools.
//
// Usage:
//
//	telson                      serve MCP on stdin/stdout (what clients spawn)
//	telson -http 127.0.0.1:65510  serve Streamable HTTP instead
//	telson tools                list the tools and their parameters
//	telson call NAME 'JSON'     run one tool once and print its text
//	telson -config              print the effective configuration
//	telson -version             print the version
//
// main.go holds flags, configuration, the tool table, start and shutdown.
// Rules: main only calls run; run owns everything it starts and stops it all
// before it returns; configuration problems are warnings on stderr, never fatal.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
)

// toolTable is every tool telson has, in tools/list order: tools/list, tools/call, `telson tools`
// and `telson call` use it.
var toolTable = []*toolDef{
	&bashTool,
	&backgroundBashTool,
	&readBgOutputTool,
	&listBgTasksTool,
	&killBgTaskTool,
	&readImageTool,
	&readDocsTool,
	&webSearchTool,
	&taskManagerTool,
	&planModeTool,
	&askUserQuestionTool,
	&invokeSkillTool,
	&setCallbackTool,
}

func main() {
	if os.Getenv(reaperEnv) == "1" {
		os.Exit(runReaper(os.Stdin))
	}
	if os.Getenv(sandboxEnv) == "1" {
		os.Exit(runSandbox(os.Args[1:]))
	}
	becomeSubreaper()              // Linux: telson's orphaned descendants come to it
	signal.Ignore(syscall.SIGPIPE) // a vanished client shows up as a write error, handled
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM,
		syscall.SIGHUP)
	defer stop()
	if err := run(ctx, os.Stdin, os.Stdout, os.Stderr, os.Args[1:]); err != nil {
		if !errors.Is(err, errToolFailed) {
			fmt.Fprintln(os.Stderr, "telson:", err)
		}
		os.Exit(1)
	}
}

const usage = `usage: telson [flags] [tools | call NAME 'JSON']

Serves MCP on stdin/stdout, or Streamable HTTP with -http. Every flag but -config, -set and
-version sets the configuration key of its name: -output-limit sets OUTPUT_LIMIT. Where a key
is set in several places the last wins: its default, ~/.telson/telson-env.txt, then
./.telson/telson-env.txt (KEY=VALUE lines), the environment variable TELSON_<KEY> (such as
TELSON_OUTPUT_LIMIT), then the flag. -config shows every value and where it came from.

flags:
`

// errToolFailed makes `telson call` exit 1 when the tool's result is an error.
var errToolFailed = errors.New("tool returned an error")

// run is telson: it parses args, loads configuration and serves until stdin ends, ctx ends or a
// command is done.
func run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, args []string) error {
	fs := flag.NewFlagSet("telson", flag.ContinueOnError)
	fs.SetOutput(stderr)
	showVersion := fs.Bool("version", false, "print the version and exit")
	showConfig := fs.Bool("config", false, "print the configuration and where each value came from")
	flags := map[string]string{} // key → value from -set and the per-key flags
	fs.Func("set", "set any configuration key, `KEY=VALUE` (repeatable)", func(kv string) error {
		key, value, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("-set %q: want KEY=VALUE", kv)
		}
		flags[key] = value
		return nil
	})
	for _, k := range configKeys {
		fs.Func(flagName(k.name), k.help, func(v string) error {
			flags[k.name] = v
			return nil
		})
		fs.Lookup(flagName(k.name)).DefValue = k.def // -h shows it
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	cfg := loadConfig(flags)
	for _, w := range cfg.warnings {
		fmt.Fprintln(stderr, "telson: warning:", w)
	}
	srv := newServer(cfg, stderr)
	defer srv.close()

	switch cmd := fs.Arg(0); {
	case *showVersion:
		fmt.Fprintln(stdout, "telson", srv.version)
	case *showConfig:
		cfg.print(stdout)
	case cmd == "tools":
		printTools(stdout, srv)
	case cmd == "call":
		return callOnce(ctx, srv, stdout, fs.Args()[1:])
	case cmd != "":
		return fmt.Errorf("unknown command %q (want tools or call)", cmd)
	case cfg.str("HTTP") != "":
		return serveHTTP(ctx, srv, cfg.str("HTTP"), stderr)
	default:
		return serveStdio(ctx, srv, stdin, stdout)
	}
	return nil
}

// serveStdio serves one session; at stdin EOF running requests finish, when ctx ends they are
// cancelled.
func serveStdio(ctx context.Context, srv *server, stdin io.Reader, stdout io.Writer) error {
	s := newSession(srv, stdout)
	defer s.close() // runs after s.wait below: what the session started ends with it
	readErr := make(chan error, 1)
	go func() { // exits at EOF or a read error; blocked on stdin otherwise
		readErr <- s.serve(ctx, stdin)
	}()
	select {
	case err := <-readErr:
		if err != nil {
			srv.log.errorf("%v", err)
		}
		s.wg.Wait()
		return nil
	case <-ctx.Done():
	}
	s.cancelAll(false)
	done := make(chan struct{})
	go func() { // exits when the cancelled requests have answered
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		srv.log.warnf("requests still running at shutdown")
	}
	return nil
}

// serveHTTP serves MCP at addr until ctx ends, then gives requests httpShutdownGrace and ends
// every session. A client has HTTP_TIMEOUT_MS to send a request (net/http lifts the deadline
// once it is read), and a kept-alive connection closes after as long idle; there is no write
// timeout, which would cut open event streams.
func serveHTTP(ctx context.Context, srv *server, addr string, stderr io.Writer) error {
	if !strings.Contains(addr, ":") || strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1:" + strings.TrimPrefix(addr, ":") // a bare port or :port
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	host, _, _ := net.SplitHostPort(addr) // net.Listen took it
	h := newHTTPHandler(srv, host)
	defer h.closeAll() // after the shutdown below
	if h.gate.token == "" && !isLoopbackHost(host) {
		h.gate.token, _ = randomHex(24) // crypto/rand does not fail on the systems telson runs on
		fmt.Fprintf(stderr, "telson: %s is reachable beyond this machine; clients must send the "+
			"header \"Authorization: Bearer %s\" (set HTTP_TOKEN to choose it)\n",
			addr, h.gate.token)
	}
	limited := &connLimiter{Listener: ln,
		slots: make(chan struct{}, srv.cfg.int("HTTP_MAX_CONNECTIONS"))}
	timeout := time.Duration(srv.cfg.int("HTTP_TIMEOUT_MS")) * time.Millisecond
	hs := &http.Server{Handler: h, ReadTimeout: timeout, IdleTimeout: timeout}
	hs.RegisterOnShutdown(func() { close(h.shutdown) })
	fmt.Fprintf(stderr, "telson: serving MCP on http://%s/mcp\n", ln.Addr())
	served := make(chan error, 1)
	go func() { // exits when the server is shut down or closed
		served <- hs.Serve(limited)
	}()
	expiry := time.NewTicker(min(max(h.sessions.idle/4, time.Second), time.Minute))
	defer expiry.Stop()
	for ctx.Err() == nil {
		select {
		case err := <-served:
			return fmt.Errorf("http: %w", err)
		case <-expiry.C:
			h.sessions.expire()
		case <-ctx.Done():
		}
	}
	grace, cancel := context.WithTimeout(context.Background(), httpShutdownGrace)
	defer cancel()
	if err := hs.Shutdown(grace); err != nil {
		srv.log.warnf("http: requests still running after %s are stopped", httpShutdownGrace)
		hs.Close()
	}
	return nil
}

func newServer(cfg *config, stderr io.Writer) *server {
	log := &logger{w: stderr, level: logLevelIndex(cfg.str("LOG_LEVEL"))}
	wd, _ := os.Getwd()
	version := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "(devel)" {
		version = cmp.Or(strings.TrimPrefix(bi.Main.Version, "v"), version)
	}
	srv := &server{
		cfg:     cfg,
		log:     log,
		version: version,
		procs:   newProcTracker(log),
		skills:  &skillCatalog{dir: wd},
		browser: &browserHolder{tabs: make(chan struct{}, 2)},
		search:  newSearchState(version),
	}
	for _, d := range toolTable {
		if !cfg.toolEnabled(d.name) {
			continue
		}
		t, err := newToolEntry(d)
		if err != nil {
			// the table is code, and a test checks every schema
			panic(fmt.Sprintf("tool %s: %v", d.name, err))
		}
		srv.tools = append(srv.tools, t)
	}
	return srv
}

// close stops everything the server started: every child process group dies.
func (srv *server) close() {
	srv.browser.close()
	srv.procs.closeAll()
	srv.search.client.CloseIdleConnections()
}

// callOnce runs one tool through the same dispatch a client uses and prints its text; on a
// terminal without control characters.
func callOnce(ctx context.Context, srv *server, stdout io.Writer, args []string) error {
	if len(args) == 1 {
		args = append(args, "{}") // what no arguments mean
	}
	if len(args) != 2 {
		return errors.New("usage: telson call NAME 'JSON'")
	}
	raw, err := json.Marshal(map[string]any{"name": args[0], "arguments": json.RawMessage(args[1])})
	if err != nil {
		return fmt.Errorf("call: arguments are not valid JSON: %s", args[1])
	}
	s := newSession(srv, io.Discard)
	defer s.close()
	defer s.wg.Wait()
	// params are an object without _meta: newRequest cannot fail
	req, _ := s.newRequest(&rpcMessage{ID: json.RawMessage("1"), Method: "tools/call", Params: raw})
	reply, err := handleToolsCall(ctx, req)
	if err != nil {
		return fmt.Errorf("call: %w", err)
	}
	res := reply.(map[string]any)
	for _, c := range res["content"].([]contentItem) {
		text := c.Text
		if c.Type != "text" {
			text = fmt.Sprintf("[%s content, %s, %d bytes base64]", c.Type, c.MimeType, len(c.Data))
		}
		if isTerminal(stdout) {
			text = stripControls(text)
		}
		fmt.Fprintln(stdout, text)
	}
	if res["isError"] == true {
		return errToolFailed
	}
	return nil
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, _ := w.(*os.File)
	info, err := f.Stat() // a nil *os.File answers os.ErrInvalid
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// stripControls drops control characters but \n and \t: printed on a terminal, a page's escape
// sequences would drive it (retitle it, move the cursor, hide text).
func stripControls(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return -1
		}
		return r
	}, s)
}

// printTools lists the tools and their parameters for a person: required parameters first,
// each with its type and the values it takes when they are a fixed list.
func printTools(w io.Writer, srv *server) {
	for _, t := range srv.tools {
		first, _, _ := strings.Cut(t.def.desc(srv), "\n")
		fmt.Fprintf(w, "%s — %s\n  %s\n", t.def.name, t.def.title, first)
		for _, required := range []bool{true, false} {
			for _, name := range sortedKeys(t.schema.Properties) {
				p := t.schema.Properties[name]
				if slices.Contains(t.schema.Required, name) != required {
					continue
				}
				kind := p.Type
				if required {
					kind += ", required"
				}
				enum := p.Enum
				if p.Items != nil {
					enum = p.Items.Enum // an array's items are the choices
				}
				if len(enum) > 0 {
					kind += fmt.Sprint(", one of ", enum)
				}
				fmt.Fprintf(w, "  - %s (%s): %s\n", name, kind, p.Description)
			}
		}
		fmt.Fprintln(w)
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// configKey is one configuration key: its default, its kind (str, int or bool) and what it does.
type configKey struct{ name, def, kind, help string }

// configKeys are the keys telson knows, besides those starting with one of configPrefixes.
var configKeys = []configKey{
	{"TOOLS", "all", "str", "tools to serve: all, none, or a comma list of names"},
	{"STREAMING", "on", "bool",
		"send a running Bash command's new output lines as progress notifications"},
	{"BASH_TIMEOUT_MS", "30000", "int",
		"Bash's default timeout in milliseconds (a call may ask for up to 600000)"},
	{"OUTPUT_LIMIT", "30000", "int", "characters of command output a reply keeps (head and tail)"},
	{"LOG_LEVEL", "info", "str",
		"least severe level logged and sent to the client: debug, info, warning, error"},
	{"STATE_DIR", "~/.telson", "str", "where state files live"},
	{"MAX_MESSAGE_BYTES", "67108864", "int",
		"longest input message; a longer line is skipped and answered with an error"},
	{"SEARCH_ENGINES", "", "str",
		"engines WebSearch asks, a comma list (default: the keyless ones and every keyed one set)"},
	{"SEARCH_TIMEOUT_MS", "6000", "int", "milliseconds each WebSearch engine gets to answer"},
	{"SEARCH_BACKOFF_MS", "300000", "int",
		"milliseconds a rate-limited, blocked or captcha-showing engine rests"},
	{"BRAVE_API_KEY", "", "str", "Brave Search API key: turns on the braveapi engine"},
	{"TAVILY_API_KEY", "", "str", "Tavily API key: turns on the tavily engine"},
	{"SERPER_API_KEY", "", "str", "Serper API key: turns on the serper engine"},
	{"EXA_API_KEY", "", "str", "Exa API key: turns on the exa engine"},
	{"GOOGLE_API_KEY", "", "str",
		"Google Programmable Search key (with GOOGLE_CSE_ID): turns on the google engine"},
	{"GOOGLE_CSE_ID", "", "str", "Google Programmable Search engine id (cx)"},
	{"SEARXNG_URL", "", "str",
		"base URL of a SearXNG instance with JSON output: turns on the searxng engine"},
	{"IMAGE_MAX_EDGE", "2000", "int",
		"ReadImage scales down images whose long edge is longer than this many pixels"},
	{"IMAGE_MAX_BYTES", "5000000", "int",
		"ReadImage scales down images larger than this many bytes (at most 6000000)"},
	{"ASK_TIMEOUT_MS", "600000", "int",
		"how long AskUserQuestion waits for the user's answer, in milliseconds"},
	{"PLAN_MODE_STRICT", "on", "bool",
		"while PlanMode is active, Bash and BackgroundBash run read-only (or refuse without a sandbox)"},
	{"ADDITIONAL_SKILLS", "", "str",
		"more skill folders for InvokeSkill and prompts, comma or colon separated, searched last"},
	{"HTTP", "", "str",
		"serve MCP over HTTP at this address (/mcp); a bare port or :port means 127.0.0.1"},
	{"HTTP_TOKEN", "", "str",
		"bearer token HTTP clients must send; made up and printed when listening beyond loopback"},
	{"HTTP_ORIGINS", "", "str",
		"comma list of browser Origins allowed besides loopback ones (* for any)"},
	{"HTTP_HOSTS", "", "str",
		"comma list of Host names allowed besides loopback ones and the listening address"},
	{"HTTP_MAX_BODY_BYTES", "4194304", "int",
		"largest HTTP request body; a larger one is answered 413"},
	{"HTTP_MAX_SESSIONS", "64", "int",
		"most HTTP sessions at once; beyond it a new session is refused with 503"},
	{"HTTP_SESSION_IDLE_MS", "1800000", "int",
		"milliseconds without a request after which an HTTP session ends"},
	{"HTTP_TIMEOUT_MS", "10000", "int",
		"milliseconds to send an HTTP request, and that a kept-alive connection may idle"},
	{"HTTP_MAX_CONNECTIONS", "128", "int",
		"most HTTP connections at once; beyond it a new one is closed at once"},
	{"CHROME_PATH", "", "str",
		"the Chromium or Chrome ReadDocs runs (default: found on PATH or where it usually is)"},
	{"CHROME_URL", "", "str",
		"a browser you run, for ReadDocs to use instead: ws://…, or http://127.0.0.1:PORT"},
	{"READDOCS_BROWSER", "on", "bool",
		"read pages in headless Chromium; off reads them over plain HTTP (no JavaScript)"},
	{"READDOCS_TIMEOUT_MS", "30000", "int",
		"ReadDocs's deadline for a page in milliseconds (wait_ms is added to it)"},
	{"READDOCS_IDLE_MS", "500", "int",
		"the longest ReadDocs waits, once a page is parsed, for requests to its own site to end"},
	{"WS_MAX_MESSAGE_BYTES", "134217728", "int",
		"longest DevTools message ReadDocs accepts from the browser"},
	{"BG_BUFFER_BYTES", "1048576", "int",
		"unread output a background task keeps; beyond it the oldest is dropped"},
	{"BG_MAX_TASKS", "32", "int", "background tasks that may run at once in a session"},
}

// configPrefixes: TOOL_<Name>=0 turns a tool off; SEARCH_URL_<ENGINE> is an engine's base URL.
var configPrefixes = []string{"TOOL_", "SEARCH_URL_"}

// internalEnv are the TELSON_ variables that are not configuration: the reaper's and the tests'.
var internalEnv = []string{"RUN_MAIN", "REAPER", "REQUIRE_BROWSER"}

func flagName(key string) string { return strings.ToLower(strings.ReplaceAll(key, "_", "-")) }

// config is the effective configuration: defaults, ~/.telson/telson-env.txt,
// ./.telson/telson-env.txt, TELSON_<KEY>, flags; later wins.
type config struct {
	values   map[string]string
	source   map[string]string
	warnings []string
}

func loadConfig(flags map[string]string) *config {
	c := &config{values: map[string]string{}, source: map[string]string{}}
	for _, k := range configKeys {
		c.values[k.name] = k.def
		c.source[k.name] = "default"
	}
	home, homeErr := os.UserHomeDir()
	if homeErr == nil {
		c.loadFile(filepath.Join(home, ".telson", "telson-env.txt"))
	}
	c.loadFile(filepath.Join(".telson", "telson-env.txt"))
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		name, ok := strings.CutPrefix(k, "TELSON_")
		if ok && !slices.Contains(internalEnv, name) && !strings.HasPrefix(name, "TEST_") {
			c.set(name, v, "environment "+k)
		}
	}
	for k, v := range flags {
		src := "flag -" + flagName(k)
		if c.lookup(k) == nil {
			src = "flag -set" // a prefix key has no flag of its own
		}
		c.set(k, v, src)
	}
	c.checkTools()
	c.checkChromePath()
	if dir, ok := strings.CutPrefix(c.values["STATE_DIR"], "~/"); ok && homeErr == nil {
		c.values["STATE_DIR"] = filepath.Join(home, dir)
	}
	return c
}

func (c *config) warn(format string, a ...any) {
	c.warnings = append(c.warnings, fmt.Sprintf(format, a...))
}

func (c *config) loadFile(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			c.warn("config: %v", err)
		}
		return
	}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			c.warn("%s:%d: not KEY=VALUE: %q", path, n+1, line)
			continue
		}
		k = strings.TrimSpace(strings.TrimPrefix(k, "export "))
		v = strings.Trim(strings.TrimSpace(v), `"'`) // as a shell would read it
		c.set(strings.TrimPrefix(k, "TELSON_"), v, fmt.Sprintf("%s:%d", path, n+1))
	}
}

// set records key=value from src, warning about unknown keys and bad values. Keys are upper case.
func (c *config) set(key, value, src string) {
	key = strings.ToUpper(key)
	k := c.lookup(key)
	prefixed := slices.ContainsFunc(configPrefixes, func(p string) bool {
		return strings.HasPrefix(key, p)
	})
	if k == nil && !prefixed {
		c.warn("%s: unknown key %s", src, key)
		return
	}
	problem := ""
	if n, err := strconv.Atoi(value); k != nil && k.kind == "int" && (err != nil || n < 0) {
		problem = fmt.Sprintf("%q is not a whole number of 0 or more", value)
	} else if _, ok := parseBool(value); k != nil && k.kind == "bool" && !ok {
		problem = fmt.Sprintf("%q is not a boolean (1/0, true/false, yes/no, on/off)", value)
	}
	if problem != "" {
		c.warn("%s: %s: %s; keeping %q", src, key, problem, c.values[key])
		return
	}
	c.values[key] = value
	c.source[key] = src
}

// checkTools warns about names in TOOLS that are no tool's.
func (c *config) checkTools() {
	for _, name := range splitList(c.values["TOOLS"]) {
		known := slices.ContainsFunc(toolTable, func(d *toolDef) bool {
			return strings.EqualFold(d.name, name)
		})
		if !known && !strings.EqualFold(name, "all") && !strings.EqualFold(name, "none") {
			c.warn("%s: TOOLS: no tool is named %q; it is left out (telson tools lists them)",
				c.source["TOOLS"], name)
		}
	}
}

// checkChromePath warns when CHROME_PATH is neither an executable file nor a command on PATH.
func (c *config) checkChromePath() {
	path := c.values["CHROME_PATH"]
	if _, err := exec.LookPath(path); path != "" && err != nil {
		c.warn("%s: CHROME_PATH: %v; ReadDocs cannot start that browser",
			c.source["CHROME_PATH"], err)
	}
}

func (c *config) lookup(key string) *configKey {
	i := slices.IndexFunc(configKeys, func(k configKey) bool { return k.name == key })
	if i < 0 {
		return nil
	}
	return &configKeys[i]
}

func parseBool(v string) (value, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true, true
	case "0", "false", "no", "off", "":
		return false, true
	}
	return false, false
}

func (c *config) str(key string) string { return c.values[key] }

func (c *config) int(key string) int {
	n, _ := strconv.Atoi(c.values[key])
	return n
}

func (c *config) bool(key string) bool {
	b, _ := parseBool(c.values[key])
	return b
}

// toolEnabled applies TOOLS (all, none, or a comma list) and TOOL_<Name>=0.
func (c *config) toolEnabled(name string) bool {
	v, set := c.values["TOOL_"+strings.ToUpper(name)]
	if on, ok := parseBool(v); set && ok && !on {
		return false
	}
	list := splitList(c.values["TOOLS"])
	return len(list) == 0 || slices.ContainsFunc(list, func(n string) bool {
		return strings.EqualFold(n, name) || strings.EqualFold(n, "all")
	})
}

func (c *config) print(w io.Writer) {
	for _, k := range sortedKeys(c.values) {
		v := c.values[k]
		if v != "" && (strings.Contains(k, "KEY") || strings.Contains(k, "TOKEN")) {
			v = "(set)"
		}
		fmt.Fprintf(w, "%s=%s\t# %s\n", k, v, c.source[k])
	}
}
