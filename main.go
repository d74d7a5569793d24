// Command telson is a Model Context Protocol server that gives an AI client
// practical agent tools: a shell, background processes, a browser-backed page
// reader, a many-engine web search and workflow tools.
//
// Usage:
//
//	telson                        serve MCP on stdin/stdout (what clients spawn)
//	telson -http 127.0.0.1:65510  serve Streamable HTTP at /mcp instead
//	telson call NAME ['JSON']     run one tool once and print its text
//	telson -version               print the version
//
// main.go holds the settings (the home's settings file, then the environment), the tool table,
// start, `telson call` and shutdown.
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
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
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

// main is telson, or telson re-executed as its reaper or its plan-mode sandbox (machine.go).
func main() {
	switch {
	case os.Getenv(reaperEnv) == "1":
		os.Exit(runReaper(os.Stdin))
	case os.Getenv(sandboxEnv) == "1":
		os.Exit(runSandbox(os.Args[1:]))
	}
	// Handled, not ignored: a write to a vanished client fails with EPIPE, and what telson starts
	// gets the default disposition, as from a terminal (an ignored signal stays ignored in bash).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM,
		syscall.SIGHUP)
	defer stop()
	if run(ctx, os.Stdin, os.Stdout, os.Stderr, os.Args[1:]) != nil {
		os.Exit(1)
	}
}

const usage = `usage: telson [-http ADDR] [call NAME ['JSON']]

Serves MCP on stdin/stdout, or Streamable HTTP at /mcp with -http; call runs one tool once.
Settings come from ~/.telson/telson-env.txt (KEY=VALUE lines) and TELSON_<KEY> environment
variables, which win.

flags:
`

// terminalHint is what a person who runs telson in a terminal reads.
const terminalHint = `telson speaks MCP on stdin/stdout: add it to a client ` +
	`(claude mcp add telson -- telson), or try a tool: telson call Bash '{"command":"ls"}'`

// errToolFailed makes `telson call` exit 1 when the tool's result is an error.
var errToolFailed = errors.New("call: the tool's result is an error")

// run is telson: it reads the flags and the settings, then serves until stdin ends or ctx
// ends, or runs one command. What fails it says on stderr, and returns.
func run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, args []string) (
	err error) {
	defer func() {
		if err != nil && !errors.Is(err, errToolFailed) {
			fmt.Fprintln(stderr, "telson:", err)
		}
	}()
	fs := flag.NewFlagSet("telson", flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpAddr := fs.String("http", "", "serve Streamable HTTP at `ADDR` (a bare port means 127.0.0.1)")
	showVersion := fs.Bool("version", false, "print the version")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	err = fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	set := loadSettings(readEnvironment(), stderr)
	cmd := fs.Arg(0)
	switch {
	case *showVersion:
		fmt.Fprintln(stdout, "telson", buildVersion())
		return nil
	case cmd != "" && cmd != "call":
		return fmt.Errorf("unknown command %q (want call)", cmd)
	}
	srv := newServer(set, stderr)
	defer srv.close()
	switch {
	case cmd == "call":
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
	srv := &server{
		set:     set,
		log:     logger,
		version: buildVersion(),
		procs:   newProcTracker(procConfig{set.env.exe, set.env.vars}, logger),
		browser: &browserHolder{tabs: make(chan struct{}, 2), turn: make(chan struct{}, 1)},
		search:  newSearchState(),
	}
	var names []string // each tool's name, then the name it is served by
	for _, d := range toolTable {
		if set.toolEnabled(d.name) {
			srv.tools = append(srv.tools, newToolEntry(d))
		}
		names = append(names, d.name, set.ToolPrefix+d.name)
	}
	srv.names = strings.NewReplacer(names...)
	return srv
}

// close stops everything the server started: the browser, then every child process.
func (srv *server) close() {
	srv.browser.close()
	srv.procs.closeAll()
}

// callOnce runs one tool through the dispatch a client's tools/call goes through, and prints
// its text; on a terminal without control characters.
func callOnce(ctx context.Context, srv *server, stdout io.Writer, args []string) error {
	if len(args) == 1 {
		args = append(args, "{}") // what no arguments mean
	}
	if len(args) != 2 {
		return errors.New("usage: telson call NAME ['JSON']")
	}
	params := map[string]any{"name": args[0], "arguments": json.RawMessage(args[1])}
	line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": params}) // fails only on arguments that are not JSON
	if err != nil {
		return fmt.Errorf("call: the arguments are not valid JSON: %s", args[1])
	}
	s := newSession(srv, nil)
	defer s.close()
	replies := make(chan any, 1)
	s.handleLine(ctx, line, false, nil, func(reply any) error {
		replies <- reply
		return nil
	})
	reply := (<-replies).(*outMessage)
	if reply.Error != nil {
		return fmt.Errorf("call: %s", reply.Error.Message)
	}
	res := reply.Result.(map[string]any)
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

// invisible holds what stripControls drops beyond ASCII's controls: C1 controls (a
// terminal's escape sequences would drive it), and what a reader never sees but a model
// reads, so that words can be hidden in it: the tag characters (ASCII spelled unseen; a
// subdivision flag keeps its black flag), bidi embeddings, overrides, isolates and marks
// (LRM, RLM, ALM: they reorder what is shown, never what it means), zero-width spaces,
// joiners and the BOM, soft hyphens, the invisible operators and the interlinear
// annotation marks.
var invisible = &unicode.RangeTable{
	R16: []unicode.Range16{
		{0x80, 0x9f, 1},     // C1 controls
		{0xad, 0xad, 1},     // soft hyphen
		{0x061c, 0x061c, 1}, // Arabic letter mark
		{0x200b, 0x200f, 1}, // zero-width space, non-joiner, joiner; LRM, RLM
		{0x202a, 0x202e, 1}, // bidi embeddings and overrides
		{0x2060, 0x206f, 1}, // word joiner, invisible operators, bidi isolates
		{0xfeff, 0xfeff, 1}, // zero-width no-break space, the BOM
		{0xfff9, 0xfffb, 1}, // interlinear annotation marks
	},
	R32: []unicode.Range32{{0xe0000, 0xe007f, 1}}, // tags
}

// stripControls returns the text a reader sees of s, which came from outside (a page,
// a search result, a skill's description, command output): it drops ASCII's controls
// but tab and newline, and the runes in invisible, but a zero-width non-joiner or joiner
// between two letters, marks or symbols beyond ASCII, which a script needs to render
// right: in emoji sequences (👩‍💻, ❤️‍🔥), in Persian and Indic words
// (می‌خواهم, क्‍ष).
func stripControls(s string) string {
	hidden := func(r rune) bool {
		if r < utf8.RuneSelf {
			return r < ' ' && r != '\t' && r != '\n' || r == 0x7f
		}
		return unicode.Is(invisible, r)
	}
	if !strings.ContainsFunc(s, hidden) { // most text
		return s
	}
	joins := func(r rune) bool {
		return r > unicode.MaxASCII && unicode.In(r, unicode.L, unicode.M, unicode.S)
	}
	var b strings.Builder
	prev := ' '
	for i, r := range s {
		keep := !hidden(r)
		if r == '\u200c' || r == '\u200d' { // three bytes long
			next, _ := utf8.DecodeRuneInString(s[i+3:])
			keep = joins(prev) && joins(next)
		}
		if keep {
			b.WriteRune(r)
		}
		prev = r
	}
	return b.String()
}

// settings is telson's configuration. It is read once at start: the defaults its tags give,
// then the settings file, then TELSON_<KEY> environment variables; nothing reads a key by name
// after that. A tag names the key, its default and, for a number or a duration (in
// milliseconds), its bounds.
type settings struct {
	Tools            []string          `key:"TOOLS" default:"all"`
	ToolPrefix       string            `key:"TOOL_PREFIX"`
	LogLevel         slog.Level        `key:"LOG_LEVEL" default:"info"`
	StateDir         string            `key:"STATE_DIR" default:"~/.telson"`
	Streaming        bool              `key:"STREAMING" default:"true"`
	BashTimeout      time.Duration     `key:"BASH_TIMEOUT_MS" default:"30000" bounds:"1 600000"`
	BashBlock        time.Duration     `key:"BASH_BLOCK_MS" default:"0" bounds:"0 600000"`
	ProgressInterval time.Duration     `key:"PROGRESS_INTERVAL_MS" default:"15000" bounds:"1000 60000"`
	OutputLimit      int               `key:"OUTPUT_LIMIT" default:"30000" bounds:"200 1000000"`
	MaxMessage       int               `key:"MAX_MESSAGE_BYTES" default:"67108864" bounds:"1024 268435456"`
	BgBuffer         int               `key:"BG_BUFFER_BYTES" default:"1048576" bounds:"256 67108864"`
	BgMaxTasks       int               `key:"BG_MAX_TASKS" default:"32" bounds:"1 10000"`
	SearchEngines    []string          `key:"SEARCH_ENGINES"`
	SearchTimeout    time.Duration     `key:"SEARCH_TIMEOUT_MS" default:"6000" bounds:"1 600000"`
	SearchBackoff    time.Duration     `key:"SEARCH_BACKOFF_MS" default:"300000" bounds:"0 86400000"`
	ImageMaxEdge     int               `key:"IMAGE_MAX_EDGE" default:"2000" bounds:"16 100000"`
	ImageMaxBytes    int               `key:"IMAGE_MAX_BYTES" default:"5000000" bounds:"1024 6000000"`
	AskTimeout       time.Duration     `key:"ASK_TIMEOUT_MS" default:"600000" bounds:"1 86400000"`
	PlanModeStrict   bool              `key:"PLAN_MODE_STRICT" default:"true"`
	AdditionalSkills []string          `key:"ADDITIONAL_SKILLS"`
	HTTPToken        string            `key:"HTTP_TOKEN"`
	HTTPHosts        []string          `key:"HTTP_HOSTS"`
	HTTPMaxBody      int               `key:"HTTP_MAX_BODY_BYTES" default:"4194304" bounds:"1024 268435456"`
	HTTPTimeout      time.Duration     `key:"HTTP_TIMEOUT_MS" default:"10000" bounds:"1 3600000"`
	HTTPMaxConns     int               `key:"HTTP_MAX_CONNECTIONS" default:"128" bounds:"1 100000"`
	ChromePath       string            `key:"CHROME_PATH"`
	ChromeURL        string            `key:"CHROME_URL"`
	ReadDocsBrowser  bool              `key:"READDOCS_BROWSER" default:"true"`
	ReadDocsTimeout  time.Duration     `key:"READDOCS_TIMEOUT_MS" default:"30000" bounds:"1 600000"`
	ReadDocsIdle     time.Duration     `key:"READDOCS_IDLE_MS" default:"500" bounds:"0 60000"`
	WSMaxMessage     int               `key:"WS_MAX_MESSAGE_BYTES" default:"33554432" bounds:"1048576 1073741824"`
	SearchURLs       map[string]string // SEARCH_URL_<ENGINE>, by key
	env              environment       // what telson read of its environment at start
}

// environment is what telson reads of the process's environment, once, at start.
type environment struct {
	vars []string // the variables, as os.Environ gives them
	home string   // the user's home: where ~/ points
	wd   string   // the working directory telson started in
	exe  string   // telson's own executable: the reaper and the sandbox re-execute it
	tmp  string   // the temporary directory (TMPDIR)
	uid  int      // the user telson runs as (its effective uid; 0: root)
	bash string   // bash's path ("bash" when PATH has none: its start fails, saying so)
	file []byte   // the settings file, ~/.telson/telson-env.txt
	// why the settings file could not be read; nil when it was (or there is no home)
	fileErr error
}

// The settings file, under the user's home (only there: a repository never configures
// telson), and the most of it read.
const (
	settingsFile    = ".telson/telson-env.txt"
	settingsFileMax = 1 << 20
)

// readEnvironment reads what telson takes from its environment, once, at start: the
// variables, the home, working, executable, temporary and bash paths, and the settings file
// under the home (a home that is not an absolute path has none: never the working directory's).
func readEnvironment() (env environment) {
	env.vars = os.Environ()
	env.home, _ = os.UserHomeDir()
	env.wd, _ = os.Getwd()
	env.exe, _ = os.Executable()
	env.tmp = os.TempDir()
	env.uid = os.Geteuid()
	var err error
	env.bash, err = exec.LookPath("bash")
	if err != nil {
		env.bash = "bash"
	}
	if filepath.IsAbs(env.home) {
		env.file, env.fileErr = readCapped(filepath.Join(env.home, settingsFile), settingsFileMax)
	}
	return env
}

// defaultSettings are the settings the tags give.
func defaultSettings() *settings {
	s := &settings{SearchURLs: map[string]string{}}
	for key, f := range settingsFields() {
		s.set(key, f.Tag.Get("default"))
	}
	return s
}

// settingsFields are the settings' tagged fields by key, found once: set looks a key up in them.
var settingsFields = sync.OnceValue(func() map[string]reflect.StructField {
	fields := map[string]reflect.StructField{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[settings]()) {
		fields[f.Tag.Get("key")] = f
	}
	delete(fields, "") // the untagged fields
	return fields
})

// loadSettings makes the settings: defaults, then the settings file's KEY=VALUE lines, then
// the environment's TELSON_<KEY> variables. A warning names the file and line, or the
// variable, and the value kept.
func loadSettings(env environment, stderr io.Writer) *settings {
	s := defaultSettings()
	s.env = env
	warn := func(where, problem string) {
		if problem != "" {
			fmt.Fprintf(stderr, "telson: warning: %s: %s\n", where, problem)
		}
	}
	if env.fileErr != nil && !errors.Is(env.fileErr, os.ErrNotExist) {
		warn("settings file", env.fileErr.Error())
	}
	for n, line := range strings.Split(strings.TrimPrefix(string(env.file), "\ufeff"), "\n") {
		line, _, _ = strings.Cut(strings.ReplaceAll(line, "\t", " "), " #") // a trailing comment
		line = strings.TrimPrefix(strings.TrimSpace(line), "export ")
		k, v, ok := strings.Cut(line, "=")
		where := fmt.Sprintf("%s:%d", filepath.Join(env.home, settingsFile), n+1)
		switch {
		case line == "" || line[0] == '#':
		case !ok:
			warn(where, fmt.Sprintf("not KEY=VALUE: %q", line))
		default:
			v = strings.Trim(strings.TrimSpace(v), `"'`) // as a shell would read it
			warn(where, s.set(strings.TrimPrefix(strings.TrimSpace(k), "TELSON_"), v))
		}
	}
	for _, kv := range env.vars {
		k, v, _ := strings.Cut(kv, "=")
		name, ok := strings.CutPrefix(k, "TELSON_")
		if ok && !slices.Contains(internalEnv, name) {
			warn(k, s.set(name, v))
		}
	}
	s.StateDir = expandHome(s.StateDir, env.home)
	return s
}

// state is STATE_DIR, for the functions that read and write there (machine.go).
func (s *settings) state() stateDir {
	return stateDir{s.StateDir, s.env.uid}
}

// expandHome replaces a leading ~/ in path by home.
func expandHome(path, home string) string {
	if rest, ok := strings.CutPrefix(path, "~/"); ok && home != "" {
		return filepath.Join(home, rest)
	}
	return path
}

// set sets key (any case) to value; it says what is wrong instead when the key is unknown or
// the value does not fit, and keeps the value it had. TOOLS keeps its known names, and says
// which are unknown.
func (s *settings) set(key, value string) string {
	key = strings.ToUpper(key)
	switch {
	case key == "MODEL": // an agent's settings file may hold it: a server has no model
		return ""
	case strings.HasPrefix(key, "SEARCH_URL_"):
		s.SearchURLs[key] = value
		return ""
	}
	f, ok := settingsFields()[key]
	if !ok {
		return "unknown key " + key
	}
	v := reflect.ValueOf(s).Elem().FieldByIndex(f.Index)
	kept := fmt.Sprint(v) // the value a warning says is kept
	wrong := ""
	switch field := v.Addr().Interface().(type) {
	case *string:
		*field = value
	case *[]string:
		*field = strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == ' ' })
		if key == "TOOLS" {
			return unknownTools(*field)
		}
	case *bool:
		on, err := strconv.ParseBool(strings.TrimSpace(value))
		if err != nil {
			wrong = "a boolean (1/0, true/false)"
			break
		}
		*field = on
	case *int, *time.Duration:
		unit := 1
		if _, ok := field.(*time.Duration); ok {
			unit = int(time.Millisecond) // a duration is set, and said, in milliseconds
		}
		var lo, hi int // every number has both bounds: a duration's keep it from overflowing
		fmt.Sscan(f.Tag.Get("bounds"), &lo, &hi)
		n, err := strconv.Atoi(value)
		if err != nil || n < lo || n > hi {
			wrong = fmt.Sprintf("a whole number from %d to %d", lo, hi)
			kept = fmt.Sprint(v.Int() / int64(unit))
			break
		}
		v.SetInt(int64(n * unit))
	case encoding.TextUnmarshaler:
		if field.UnmarshalText([]byte(value)) != nil {
			wrong = "one of its words"
		}
	}
	if wrong != "" {
		return fmt.Sprintf("%s=%q is not %s; keeping %s", key, value, wrong, kept)
	}
	return ""
}

// toolEnabled applies TOOLS: all or true, none or false, or a comma list of names.
func (s *settings) toolEnabled(name string) bool {
	return slices.ContainsFunc(s.Tools, func(n string) bool {
		all, _ := strconv.ParseBool(n)
		return strings.EqualFold(n, name) || strings.EqualFold(n, "all") || all
	})
}

// unknownTools names the TOOLS entries that are no tool's name, nor all, none, true or false;
// "" when there is none. The others are served.
func unknownTools(names []string) string {
	var unknown []string
	for _, n := range names {
		isName := func(d *toolDef) bool { return strings.EqualFold(d.name, n) }
		_, err := strconv.ParseBool(n)
		known := err == nil || strings.EqualFold(n, "all") || strings.EqualFold(n, "none")
		if !known && !slices.ContainsFunc(toolTable, isName) {
			unknown = append(unknown, strconv.Quote(n))
		}
	}
	if len(unknown) == 0 {
		return ""
	}
	return "TOOLS: no tool is named " + strings.Join(unknown, " or ")
}
