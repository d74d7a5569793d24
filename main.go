// Command telson is a Model Context Protocol server that gives an AI client
// practical agent tools: a shell, background processes, a browser-backed page
// reader, a many-engine web search and workflow tools.
//
// Usage:
//
//	telson                        serve MCP on stdin/stdout (what clients spawn)
//	telson -http 127.0.0.1:65510  serve Streamable HTTP at /mcp instead
//	telson call NAME 'JSON'       run one tool once and print its text
//	telson -config                print the settings
//	telson -version               print the version
//
// main.go holds the settings, the tool table, start and shutdown.
// Rules: main only calls run; settings are read once, into one typed struct,
// and a bad setting is a warning on stderr, never fatal; run owns everything
// it starts and stops it all before it returns.
package main

import (
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
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

// toolTable is every tool telson has, in tools/list order.
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

const usage = `usage: telson [-http ADDR] [call NAME 'JSON']

Serves MCP on stdin/stdout, or Streamable HTTP at /mcp with -http. Settings come from
~/.telson/telson-env.txt (KEY=VALUE lines) and TELSON_<KEY> environment variables, which win;
-config prints them.

flags:
`

// terminalHint is what a person who runs telson in a terminal reads.
const terminalHint = `telson speaks MCP on stdin/stdout: add it to a client ` +
	`(claude mcp add telson -- telson), or try a tool: telson call Bash '{"command":"ls"}'`

// errToolFailed makes `telson call` exit 1 when the tool's result is an error.
var errToolFailed = errors.New("tool returned an error")

// run is telson: it reads the flags and the settings, then serves until stdin ends or ctx
// ends, or runs one command.
func run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, args []string) error {
	fs := flag.NewFlagSet("telson", flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpAddr := fs.String("http", "", "serve Streamable HTTP at `ADDR` (a bare port means 127.0.0.1)")
	showVersion := fs.Bool("version", false, "print the version")
	showConfig := fs.Bool("config", false, "print the settings")
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
	set := loadSettings(os.Environ(), stderr)
	switch cmd := fs.Arg(0); {
	case *showVersion:
		fmt.Fprintln(stdout, "telson", buildVersion())
		return nil
	case *showConfig:
		set.print(stdout)
		return nil
	case cmd != "" && cmd != "call":
		return fmt.Errorf("unknown command %q (want call)", cmd)
	}
	srv := newServer(set, stderr)
	defer srv.close()
	switch {
	case fs.Arg(0) == "call":
		return callOnce(ctx, srv, stdout, fs.Args()[1:])
	case *httpAddr != "":
		return serveHTTP(ctx, srv, *httpAddr, stderr)
	}
	if isTerminal(stdin) {
		fmt.Fprintln(stderr, terminalHint)
	}
	return serveStdio(ctx, srv, stdin, stdout)
}

// buildVersion is the module version go install recorded, or "dev".
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Version == "" || bi.Main.Version == "(devel)" {
		return "dev"
	}
	return strings.TrimPrefix(bi.Main.Version, "v")
}

// newServer builds what every session shares; the process tracker's reaper starts with it,
// before any child can.
func newServer(set *settings, stderr io.Writer) *server {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: set.LogLevel}))
	wd, _ := os.Getwd()
	srv := &server{
		set:     set,
		log:     logger,
		version: buildVersion(),
		procs:   newProcTracker(logger),
		skills:  &skillCatalog{dir: wd},
		browser: &browserHolder{tabs: make(chan struct{}, 2)},
		search:  newSearchState(),
	}
	for _, d := range toolTable {
		if set.toolEnabled(d.name) {
			srv.tools = append(srv.tools, newToolEntry(d))
		}
	}
	return srv
}

// close stops everything the server started: the browser, then every child process.
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
	params, err := json.Marshal(map[string]any{"name": args[0], "arguments": json.RawMessage(args[1])})
	if err != nil {
		return fmt.Errorf("call: arguments are not valid JSON: %s", args[1])
	}
	s := newSession(srv, nil)
	defer s.close()
	req := &rpcRequest{s: s, id: json.RawMessage("1"), method: "tools/call", params: params,
		version: latestLegacy}
	res, err := handleToolsCall(ctx, req)
	if err != nil {
		return fmt.Errorf("call: %w", err)
	}
	for _, c := range res["content"].([]contentItem) {
		text := c.Text
		if c.Type != "text" {
			text = fmt.Sprintf("[%s content, %s, %d bytes base64]", c.Type, c.MimeType, len(c.Data))
		}
		if isTerminal(stdout) {
			text = stripControls(text)
		}
		fmt.Fprintln(stdout, strings.TrimSuffix(text, "\n"))
	}
	if res["isError"] == true {
		return errToolFailed
	}
	return nil
}

// isTerminal reports whether f is a terminal (a character device).
func isTerminal(f any) bool {
	file, _ := f.(*os.File)
	info, err := file.Stat() // a nil *os.File answers os.ErrInvalid
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

// settings is telson's configuration. It is read once at start: the defaults below, then
// ~/.telson/telson-env.txt, then TELSON_<KEY> environment variables; nothing reads a key by
// name after that.
type settings struct {
	Tools            []string // names of the tools served; "all" serves every one
	LogLevel         slog.Level
	StateDir         string
	Streaming        bool
	BashTimeout      time.Duration
	OutputLimit      int
	MaxMessage       int
	BgBuffer         int
	BgMaxTasks       int
	SearchEngines    []string
	SearchTimeout    time.Duration
	SearchBackoff    time.Duration
	SearchKeys       map[string]string // keyed engines' credentials and SEARCH_URL_<ENGINE>
	ImageMaxEdge     int
	ImageMaxBytes    int
	AskTimeout       time.Duration
	PlanModeStrict   bool
	AdditionalSkills []string
	HTTPToken        string
	HTTPOrigins      []string
	HTTPHosts        []string
	HTTPMaxBody      int
	HTTPTimeout      time.Duration
	HTTPMaxConns     int
	ChromePath       string
	ReadDocsBrowser  bool
	ReadDocsTimeout  time.Duration
	ReadDocsIdle     time.Duration
	WSMaxMessage     int
}

func defaultSettings() *settings {
	return &settings{
		Tools:           []string{"all"},
		LogLevel:        slog.LevelInfo,
		StateDir:        "~/.telson",
		Streaming:       true,
		BashTimeout:     30 * time.Second,
		OutputLimit:     30000,
		MaxMessage:      64 << 20,
		BgBuffer:        1 << 20,
		BgMaxTasks:      32,
		SearchTimeout:   6 * time.Second,
		SearchBackoff:   5 * time.Minute,
		SearchKeys:      map[string]string{},
		ImageMaxEdge:    2000,
		ImageMaxBytes:   5000000,
		AskTimeout:      10 * time.Minute,
		PlanModeStrict:  true,
		HTTPMaxBody:     4 << 20,
		HTTPTimeout:     10 * time.Second,
		HTTPMaxConns:    128,
		ReadDocsBrowser: true,
		ReadDocsTimeout: 30 * time.Second,
		ReadDocsIdle:    500 * time.Millisecond,
		WSMaxMessage:    128 << 20,
	}
}

// settingKey is one key: where its value goes (a *string, *[]string (a comma list), *bool,
// *int, *time.Duration (given in milliseconds) or an encoding.TextUnmarshaler; nil: a search
// key, kept in SearchKeys), the bounds of a number, and what it does.
type settingKey struct {
	name     string
	field    any
	min, max int
	help     string
}

// keys lists every setting; SEARCH_URL_<ENGINE> keys are search keys too.
func (s *settings) keys() []settingKey {
	const most = 1 << 40
	return []settingKey{
		{"TOOLS", &s.Tools, 0, 0, "tools to serve: all, none, or a comma list of names"},
		{"LOG_LEVEL", &s.LogLevel, 0, 0, "least severe stderr log level: debug, info, warn, error"},
		{"STATE_DIR", &s.StateDir, 0, 0, "where state files live (tasks.json, plans)"},
		{"STREAMING", &s.Streaming, 0, 0, "send a running Bash command's new lines as progress"},
		{"BASH_TIMEOUT_MS", &s.BashTimeout, 1, 600000, "Bash's default timeout"},
		{"OUTPUT_LIMIT", &s.OutputLimit, 200, most, "characters of command output a reply keeps"},
		{"MAX_MESSAGE_BYTES", &s.MaxMessage, 1024, most, "longest input message"},
		{"BG_BUFFER_BYTES", &s.BgBuffer, 256, most, "unread output a background task keeps"},
		{"BG_MAX_TASKS", &s.BgMaxTasks, 1, 10000, "background tasks running at once"},
		{"SEARCH_ENGINES", &s.SearchEngines, 0, 0, "engines WebSearch asks (default: all it can)"},
		{"SEARCH_TIMEOUT_MS", &s.SearchTimeout, 1, most, "time each WebSearch engine gets"},
		{"SEARCH_BACKOFF_MS", &s.SearchBackoff, 0, most, "rest of an engine that refused us"},
		{"BRAVE_API_KEY", nil, 0, 0, "Brave Search API key: turns on braveapi"},
		{"TAVILY_API_KEY", nil, 0, 0, "Tavily API key: turns on tavily"},
		{"SERPER_API_KEY", nil, 0, 0, "Serper API key: turns on serper"},
		{"EXA_API_KEY", nil, 0, 0, "Exa API key: turns on exa"},
		{"GOOGLE_API_KEY", nil, 0, 0, "Google Programmable Search key, with GOOGLE_CSE_ID"},
		{"GOOGLE_CSE_ID", nil, 0, 0, "Google Programmable Search engine id (cx)"},
		{"SEARXNG_URL", nil, 0, 0, "a SearXNG instance with JSON output: turns on searxng"},
		{"IMAGE_MAX_EDGE", &s.ImageMaxEdge, 16, 100000, "longest image edge sent, in pixels"},
		{"IMAGE_MAX_BYTES", &s.ImageMaxBytes, 1024, 6000000, "largest image sent, in bytes"},
		{"ASK_TIMEOUT_MS", &s.AskTimeout, 1, most, "how long AskUserQuestion waits"},
		{"PLAN_MODE_STRICT", &s.PlanModeStrict, 0, 0, "in plan mode, Bash sees files read-only"},
		{"ADDITIONAL_SKILLS", &s.AdditionalSkills, 0, 0, "more skill folders, a comma list"},
		{"HTTP_TOKEN", &s.HTTPToken, 0, 0, "bearer token HTTP clients must send"},
		{"HTTP_ORIGINS", &s.HTTPOrigins, 0, 0, "browser Origins allowed besides loopback ones"},
		{"HTTP_HOSTS", &s.HTTPHosts, 0, 0, "Host names allowed besides loopback ones"},
		{"HTTP_MAX_BODY_BYTES", &s.HTTPMaxBody, 1024, most, "largest HTTP request body"},
		{"HTTP_TIMEOUT_MS", &s.HTTPTimeout, 1, most, "time to send an HTTP request, and to idle"},
		{"HTTP_MAX_CONNECTIONS", &s.HTTPMaxConns, 1, 100000, "HTTP connections at once"},
		{"CHROME_PATH", &s.ChromePath, 0, 0, "the Chromium ReadDocs runs (default: found)"},
		{"READDOCS_BROWSER", &s.ReadDocsBrowser, 0, 0, "read pages in Chromium (off: plain HTTP)"},
		{"READDOCS_TIMEOUT_MS", &s.ReadDocsTimeout, 1, most, "ReadDocs's deadline for a page"},
		{"READDOCS_IDLE_MS", &s.ReadDocsIdle, 0, most, "longest wait for a parsed page's site"},
		{"WS_MAX_MESSAGE_BYTES", &s.WSMaxMessage, 1 << 20, most, "longest DevTools message"},
	}
}

// internalEnv are the TELSON_ variables that are not settings: markers and the test harness's.
var internalEnv = []string{"RUN", "RUN_MAIN", "REAPER", "SANDBOX", "REQUIRE_BROWSER"}

// loadSettings reads the settings: defaults, then the env file, then the environment.
// Warnings name the file and line, or the variable, and the value kept.
func loadSettings(environ []string, stderr io.Writer) *settings {
	s := defaultSettings()
	warn := func(format string, a ...any) {
		fmt.Fprintf(stderr, "telson: warning: "+format+"\n", a...)
	}
	home, _ := os.UserHomeDir()
	path := filepath.Join(home, ".telson", "telson-env.txt")
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		warn("settings: %v", err)
	}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		where := fmt.Sprintf("%s:%d", path, n+1)
		if !ok {
			warn("%s: not KEY=VALUE: %q", where, line)
			continue
		}
		k = strings.TrimPrefix(strings.TrimSpace(k), "TELSON_")
		v = strings.Trim(strings.TrimSpace(v), `"'`) // as a shell would read it
		if problem := s.set(k, v); problem != "" {
			warn("%s: %s", where, problem)
		}
	}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		name, ok := strings.CutPrefix(k, "TELSON_")
		if !ok || slices.Contains(internalEnv, name) {
			continue
		}
		if problem := s.set(name, v); problem != "" {
			warn("%s: %s", k, problem)
		}
	}
	if dir, ok := strings.CutPrefix(s.StateDir, "~/"); ok {
		s.StateDir = filepath.Join(home, dir)
	}
	return s
}

// set sets key (any case) to value; it says what is wrong instead when the key is unknown or
// the value does not fit, and keeps the value it had.
func (s *settings) set(key, value string) string {
	key = strings.ToUpper(key)
	i := slices.IndexFunc(s.keys(), func(k settingKey) bool { return k.name == key })
	if i < 0 && strings.HasPrefix(key, "SEARCH_URL_") {
		s.SearchKeys[key] = value
		return ""
	}
	if i < 0 {
		return "unknown key " + key
	}
	k := s.keys()[i]
	n, numErr := strconv.Atoi(value)
	wrong := ""
	switch field := k.field.(type) {
	case nil:
		s.SearchKeys[key] = value
	case *string:
		*field = value
	case *[]string:
		*field = strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == ' ' })
	case *bool:
		on, ok := parseBool(value)
		*field = on || !ok && *field
		if !ok {
			wrong = "a boolean (1/0, true/false, yes/no, on/off)"
		}
	case *int, *time.Duration:
		if numErr != nil || n < k.min || n > k.max {
			wrong = fmt.Sprintf("a whole number from %d to %d", k.min, k.max)
		} else if d, ok := field.(*time.Duration); ok {
			*d = time.Duration(n) * time.Millisecond
		} else {
			*field.(*int) = n
		}
	case encoding.TextUnmarshaler:
		if field.UnmarshalText([]byte(value)) != nil {
			wrong = "one of its words"
		}
	}
	if wrong != "" {
		return fmt.Sprintf("%s=%q is not %s; keeping %s", key, value, wrong, s.value(k))
	}
	return ""
}

// value is a key's value as -config prints it; a secret prints as (set).
func (s *settings) value(k settingKey) string {
	var v any = k.field
	if k.field == nil {
		v = s.SearchKeys[k.name]
	}
	text := ""
	switch field := v.(type) {
	case *[]string:
		text = strings.Join(*field, ",")
	case *time.Duration:
		text = strconv.FormatInt(field.Milliseconds(), 10)
	case *string:
		text = *field
	case *bool:
		text = strconv.FormatBool(*field)
	case *int:
		text = strconv.Itoa(*field)
	default:
		text = fmt.Sprint(field)
	}
	secret := strings.Contains(k.name, "KEY") || strings.Contains(k.name, "TOKEN")
	if secret && text != "" {
		return "(set)"
	}
	return text
}

// print writes every setting as KEY=VALUE, with what it does.
func (s *settings) print(w io.Writer) {
	for _, k := range s.keys() {
		fmt.Fprintf(w, "%s=%s\t# %s\n", k.name, s.value(k), k.help)
	}
	for _, k := range sortedKeys(s.SearchKeys) {
		if strings.HasPrefix(k, "SEARCH_URL_") {
			fmt.Fprintf(w, "%s=%s\t# an engine's base URL\n", k, s.SearchKeys[k])
		}
	}
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

// toolEnabled applies TOOLS: all, none, or a comma list of names.
func (s *settings) toolEnabled(name string) bool {
	return slices.ContainsFunc(s.Tools, func(n string) bool {
		return strings.EqualFold(n, name) || strings.EqualFold(n, "all")
	})
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
