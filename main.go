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
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// toolTable is every tool telson has, in tools/list order; tools/list, tools/call, `telson tools` and `telson call` use it.
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
	signal.Ignore(syscall.SIGPIPE) // a vanished client shows up as a write error, handled
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if err := run(ctx, os.Stdin, os.Stdout, os.Stderr, os.Args[1:]); err != nil {
		if !errors.Is(err, errToolFailed) {
			fmt.Fprintln(os.Stderr, "telson:", err)
		}
		os.Exit(1)
	}
}

// errToolFailed makes `telson call` exit 1 when the tool's result is an error.
var errToolFailed = errors.New("tool returned an error")

// run is telson: it parses args, loads configuration and serves until stdin ends, ctx ends or a command is done.
func run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, args []string) error {
	fs := flag.NewFlagSet("telson", flag.ContinueOnError)
	fs.SetOutput(stderr)
	showVersion := fs.Bool("version", false, "print the version and exit")
	showConfig := fs.Bool("config", false, "print the effective configuration and where each value came from")
	flags := map[string]string{} // key → value from -set and the per-key flags
	fs.Func("set", "set any configuration key, `KEY=VALUE` (repeatable; also for keys without a flag of their own, such as SEARCH_URL_BING)", func(kv string) error {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(k)), "TELSON_")
		if !ok || k == "" {
			return fmt.Errorf("-set %q: want KEY=VALUE", kv)
		}
		flags[k] = v
		return nil
	})
	for _, k := range configKeys {
		fs.Func(flagName(k.name), k.help, func(v string) error { flags[k.name] = v; return nil })
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: telson [flags] [tools | call NAME JSON]\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
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

// serveStdio serves one session; at stdin EOF running requests finish, when ctx ends they are cancelled.
func serveStdio(ctx context.Context, srv *server, stdin io.Reader, stdout io.Writer) error {
	s := newSession(srv, stdout)
	defer s.close() // runs after s.wait below: what the session started ends with it
	s.watchSkills()
	srv.log.debugf("serving stdio")
	readErr := make(chan error, 1)
	go func() { readErr <- s.serve(ctx, stdin) }() // exits at EOF or a read error; blocked on stdin otherwise
	select {
	case err := <-readErr:
		if err != nil {
			srv.log.errorf("%v", err)
		}
		s.wait()
		return nil
	case <-ctx.Done():
		s.cancelAll()
		done := make(chan struct{})
		go func() { s.wait(); close(done) }() // exits when the cancelled requests have answered
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			srv.log.warnf("requests still running at shutdown")
		}
		return nil
	}
}

// serveHTTP serves MCP at addr until ctx ends, then gives requests httpShutdownGrace and ends every session.
func serveHTTP(ctx context.Context, srv *server, addr string, stderr io.Writer) error {
	if !strings.Contains(addr, ":") || strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1:" + strings.TrimPrefix(addr, ":") // a bare port or :port
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("http: address %q: %w", addr, err)
	}
	h := newHTTPHandler(srv, host)
	if h.token == "" && !isLoopbackHost(host) {
		if h.token, err = randomHex(24); err != nil {
			return fmt.Errorf("http: token: %w", err)
		}
		fmt.Fprintf(stderr, "telson: %s is reachable beyond this machine; clients must send the header \"Authorization: Bearer %s\" (set HTTP_TOKEN to choose it)\n", addr, h.token)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	hs.RegisterOnShutdown(func() { close(h.shutdown) })
	fmt.Fprintf(stderr, "telson: serving MCP on http://%s/mcp\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }() // exits when the server is shut down or closed
	expiry := time.NewTicker(min(max(h.idle/4, time.Second), time.Minute))
	defer expiry.Stop()
	for ctx.Err() == nil {
		select {
		case err := <-served:
			h.closeAll()
			return fmt.Errorf("http: %w", err)
		case <-expiry.C:
			h.expire()
		case <-ctx.Done():
		}
	}
	grace, cancel := context.WithTimeout(context.Background(), httpShutdownGrace)
	defer cancel()
	if err := hs.Shutdown(grace); err != nil {
		srv.log.warnf("http: requests still running after %s are stopped", httpShutdownGrace)
		hs.Close()
	}
	h.closeAll()
	return nil
}

func newServer(cfg *config, stderr io.Writer) *server {
	log := &logger{w: stderr}
	log.level.Store(int32(logLevelIndex(cfg.str("LOG_LEVEL"))))
	wd, _ := os.Getwd()
	version := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = strings.TrimPrefix(bi.Main.Version, "v")
	}
	srv := &server{cfg: cfg, log: log, version: version, stateKey: newStateKey(), procs: newProcTracker(log),
		skills: &skillCatalog{dir: wd}, browser: &browserHolder{tabs: make(chan struct{}, 2)}}
	srv.search = newSearchState(srv.version)
	for _, d := range toolTable {
		if !cfg.toolEnabled(d.name) {
			continue
		}
		sc, err := parseSchema(d.input)
		if err != nil {
			panic(fmt.Sprintf("tool %s: %v", d.name, err)) // the table is code; a test checks every schema
		}
		output, err := outputSchema(d)
		if err != nil {
			panic(fmt.Sprintf("tool %s: %v", d.name, err))
		}
		srv.tools = append(srv.tools, &toolEntry{def: d, schema: sc, output: output})
	}
	return srv
}

// close stops everything the server started: every child process group dies.
func (srv *server) close() {
	srv.browser.close(srv.procs)
	srv.procs.closeAll()
	srv.search.client.CloseIdleConnections()
}

// callOnce runs one tool through the same dispatch a client uses and prints its text.
func callOnce(ctx context.Context, srv *server, stdout io.Writer, args []string) error {
	if len(args) < 1 || len(args) > 2 {
		return errors.New("usage: telson call NAME 'JSON'")
	}
	if len(args) == 1 {
		args = append(args, "{}") // what no arguments mean
	}
	raw, err := json.Marshal(map[string]any{"name": args[0], "arguments": json.RawMessage(args[1])})
	if err != nil {
		return fmt.Errorf("call: arguments are not valid JSON: %s", args[1])
	}
	s := newSession(srv, io.Discard)
	s.version = version20251125
	defer s.close()
	defer s.wait()
	res, err := handleToolsCall(ctx, &rpcRequest{s: s, id: json.RawMessage("1"), method: "tools/call", params: raw, version: s.version, logLevel: -1})
	if re := (*rpcError)(nil); errors.As(err, &re) { // handleToolsCall fails only with an *rpcError
		return fmt.Errorf("call: %s", re.Message)
	}
	for _, c := range res["content"].([]contentItem) {
		if c.Type == "text" {
			fmt.Fprintln(stdout, c.Text)
		} else {
			fmt.Fprintf(stdout, "[%s content, %s, %d bytes base64]\n", c.Type, c.MimeType, len(c.Data))
		}
	}
	if res["isError"] == true {
		return errToolFailed
	}
	return nil
}

// printTools lists the tools and their parameters for a person.
func printTools(w io.Writer, srv *server) {
	for _, t := range srv.tools {
		first, _, _ := strings.Cut(t.def.desc(srv), "\n")
		fmt.Fprintf(w, "%s — %s\n  %s\n", t.def.name, t.def.title, first)
		for _, n := range sortedKeys(t.schema.Properties) {
			req := ""
			if slices.Contains(t.schema.Required, n) {
				req = ", required"
			}
			fmt.Fprintf(w, "  - %s (%s%s): %s\n", n, t.schema.Properties[n].Type, req, t.schema.Properties[n].Description)
		}
		fmt.Fprintln(w)
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// configKey is one configuration key: its default, its kind and what it does.
type configKey struct{ name, def, kind, help string } // kind: str, int or bool

// configKeys are the keys telson knows, besides those starting with one of configPrefixes.
var configKeys = []configKey{
	{"TOOLS", "all", "str", "tools to serve: all, or a comma list of names"},
	{"STREAMING", "on", "bool", "send a running Bash command's new output lines as progress notifications"},
	{"BASH_TIMEOUT_MS", "30000", "int", "Bash's default timeout in milliseconds (a call may ask for up to 600000)"},
	{"OUTPUT_LIMIT", "30000", "int", "characters of command output a reply keeps (head and tail)"},
	{"LOG_LEVEL", "info", "str", "least severe level logged to stderr and sent to the client (debug, info, warning, error)"},
	{"STATE_DIR", "~/.telson", "str", "where state files live"},
	{"MAX_MESSAGE_BYTES", "67108864", "int", "longest input message; a longer line is skipped and answered with an error"},
	{"SEARCH_ENGINES", "", "str", "engines WebSearch asks, a comma list (default: the eleven keyless ones plus every keyed one configured)"},
	{"SEARCH_TIMEOUT_MS", "6000", "int", "milliseconds each WebSearch engine gets to answer"},
	{"SEARCH_BACKOFF_MS", "300000", "int", "milliseconds a rate-limited, blocked or captcha-showing engine rests"},
	{"BRAVE_API_KEY", "", "str", "Brave Search API key: turns on the braveapi engine"},
	{"TAVILY_API_KEY", "", "str", "Tavily API key: turns on the tavily engine"},
	{"SERPER_API_KEY", "", "str", "Serper API key: turns on the serper engine"},
	{"EXA_API_KEY", "", "str", "Exa API key: turns on the exa engine"},
	{"GOOGLE_API_KEY", "", "str", "Google Programmable Search key (with GOOGLE_CSE_ID): turns on the google engine"},
	{"GOOGLE_CSE_ID", "", "str", "Google Programmable Search engine id (cx)"},
	{"SEARXNG_URL", "", "str", "base URL of a SearXNG instance with JSON output: turns on the searxng engine"},
	{"GITHUB_TOKEN", "", "str", "token for the github engine (optional; raises GitHub's search rate limit)"},
	{"IMAGE_MAX_EDGE", "2000", "int", "ReadImage scales down images whose long edge is longer than this many pixels"},
	{"IMAGE_MAX_BYTES", "5000000", "int", "ReadImage scales down images larger than this many bytes (at most 6000000, so the message stays well under 10 MiB)"},
	{"ASK_TIMEOUT_MS", "600000", "int", "how long AskUserQuestion waits for the user's answer, in milliseconds"},
	{"ASK_TTY", "off", "bool", "let AskUserQuestion ask on /dev/tty when the client has no elicitation"},
	{"PLAN_MODE_STRICT", "on", "bool", "while PlanMode is active, Bash, BackgroundBash and KillBgTask refuse to run"},
	{"ADDITIONAL_SKILLS", "", "str", "more skill folders for InvokeSkill and prompts, comma or colon separated, searched last"},
	{"HTTP", "", "str", "serve MCP over HTTP at this address (/mcp) instead of stdio; a bare port or :port means 127.0.0.1"},
	{"HTTP_TOKEN", "", "str", "bearer token HTTP clients must send; generated and printed at start when HTTP listens beyond loopback"},
	{"HTTP_ORIGINS", "", "str", "comma list of browser Origins allowed besides http(s)://localhost, 127.0.0.1 and [::1] (* for any)"},
	{"HTTP_HOSTS", "", "str", "comma list of Host names allowed besides loopback ones and the listening address (DNS rebinding protection)"},
	{"HTTP_MAX_BODY_BYTES", "4194304", "int", "largest HTTP request body; a larger one is answered 413"},
	{"HTTP_MAX_SESSIONS", "64", "int", "most HTTP sessions at once; beyond it (after idle ones expire) a new session is refused with 503"},
	{"HTTP_SESSION_IDLE_MS", "1800000", "int", "an HTTP session idle this long (milliseconds) ends, with its tasks"},
	{"CHROME_PATH", "", "str", "the Chromium or Chrome binary ReadDocs runs (default: found on PATH and in the usual install locations)"},
	{"READDOCS_BROWSER", "on", "bool", "read pages in headless Chromium; off reads them over plain HTTP (no JavaScript)"},
	{"READDOCS_TIMEOUT_MS", "30000", "int", "ReadDocs's deadline for a page in milliseconds (wait_ms is added to it)"},
	{"READDOCS_IDLE_MS", "500", "int", "how long a page's network must be quiet after load before ReadDocs reads it"},
	{"WS_MAX_MESSAGE_BYTES", "134217728", "int", "longest DevTools websocket message ReadDocs accepts from the browser"},
	{"BG_BUFFER_BYTES", "1048576", "int", "unread output a background task keeps; beyond it the oldest unread bytes are dropped"},
	{"BG_MAX_TASKS", "32", "int", "background tasks that may run at once in a session"},
}

// configPrefixes: TOOL_<Name>=0 turns a tool off; SEARCH_URL_<ENGINE> is an engine's base URL.
var configPrefixes = []string{"TOOL_", "SEARCH_URL_"}

func flagName(key string) string { return strings.ToLower(strings.ReplaceAll(key, "_", "-")) }

// config is the effective configuration: defaults, ~/.telson/ and ./.telson/telson-env.txt, TELSON_<KEY>, flags.
type config struct {
	values   map[string]string
	source   map[string]string
	warnings []string
}

func loadConfig(flags map[string]string) *config {
	c := &config{values: map[string]string{}, source: map[string]string{}}
	for _, k := range configKeys {
		c.values[k.name], c.source[k.name] = k.def, "default"
	}
	home, homeErr := os.UserHomeDir()
	if homeErr == nil {
		c.loadFile(filepath.Join(home, ".telson", "telson-env.txt"))
	}
	c.loadFile(filepath.Join(".telson", "telson-env.txt"))
	env := os.Environ()
	sort.Strings(env)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if name, ok := strings.CutPrefix(k, "TELSON_"); ok && name != "RUN_MAIN" && name != "REAPER" && !strings.HasPrefix(name, "TEST_") && name != "REQUIRE_BROWSER" {
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
	if dir := c.values["STATE_DIR"]; homeErr == nil && (strings.HasPrefix(dir, "~/") || dir == "~") {
		c.values["STATE_DIR"] = filepath.Join(home, strings.TrimPrefix(dir, "~"))
	}
	return c
}

func (c *config) loadFile(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			c.warnings = append(c.warnings, fmt.Sprintf("config: %v", err))
		}
		return
	}
	for n, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(k), "export "))
		if !ok || k == "" {
			c.warnings = append(c.warnings, fmt.Sprintf("%s:%d: not KEY=VALUE: %q", path, n+1, line))
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		c.set(strings.TrimPrefix(k, "TELSON_"), v, fmt.Sprintf("%s:%d", path, n+1))
	}
}

// set records key=value from src, warning about unknown keys and bad values.
func (c *config) set(key, value, src string) {
	k, problem := c.lookup(key), ""
	if k == nil && !slices.ContainsFunc(configPrefixes, func(p string) bool { return strings.HasPrefix(key, p) }) {
		c.warnings = append(c.warnings, fmt.Sprintf("%s: unknown key %s", src, key))
		return
	}
	if _, err := strconv.Atoi(value); k != nil && k.kind == "int" && err != nil {
		problem = fmt.Sprintf("%q is not a whole number", value)
	} else if _, ok := parseBool(value); k != nil && k.kind == "bool" && !ok {
		problem = fmt.Sprintf("%q is not a boolean (1/0, true/false, yes/no, on/off)", value)
	}
	if problem != "" {
		c.warnings = append(c.warnings, fmt.Sprintf("%s: %s: %s; keeping %q", src, key, problem, c.values[key]))
		return
	}
	c.values[key], c.source[key] = value, src
}

func (c *config) lookup(key string) *configKey {
	if i := slices.IndexFunc(configKeys, func(k configKey) bool { return k.name == key }); i >= 0 {
		return &configKeys[i]
	}
	return nil
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

// toolEnabled applies TOOLS (all, or a comma list) and TOOL_<Name>=0.
func (c *config) toolEnabled(name string) bool {
	for k, v := range c.values {
		if b, ok := parseBool(v); ok && !b && strings.HasPrefix(k, "TOOL_") && strings.EqualFold(k[len("TOOL_"):], name) {
			return false
		}
	}
	list := strings.TrimSpace(c.values["TOOLS"])
	return list == "" || strings.EqualFold(list, "all") ||
		slices.ContainsFunc(strings.Split(list, ","), func(n string) bool { return strings.EqualFold(strings.TrimSpace(n), name) })
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
