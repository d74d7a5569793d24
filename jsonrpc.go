// jsonrpc.go holds the wire and the protocol: newline-delimited JSON-RPC 2.0 framing, the
// session (one client connection), dispatch, both protocol eras (legacy initialize; stateless
// 2026-07-28 with per-request _meta), tools/list and tools/call with the argument schema check,
// progress, logging, server-to-client requests, subscriptions/listen, the notice queue, and
// the Streamable HTTP transport on /mcp.
//
// Rules:
//   - only session.send writes to the session's output: one message per
//     line, written whole under wmu, so messages never interleave; over HTTP
//     a request's own messages go to its POST's reply instead (see routeKey);
//   - every request runs in its own goroutine with its own context;
//     notifications/cancelled cancels that context and no reply is sent;
//   - a handler's panic becomes -32603 with its stack on stderr, and the
//     session keeps serving;
//   - protocol faults are JSON-RPC errors; a tool's failures, bad arguments
//     included, are isError results the model can act on.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Protocol versions, oldest first: the legacy era negotiates one of the first
// four, the modern one is per request.
const (
	version20241105 = "2024-11-05"
	version20250326 = "2025-03-26"
	version20250618 = "2025-06-18"
	version20251125 = "2025-11-25"
	versionModern   = "2026-07-28"
)

var (
	legacyVersions    = []string{version20241105, version20250326, version20250618, version20251125}
	supportedVersions = append(slices.Clip(legacyVersions), versionModern)
)

// Keys of the modern era's request and result _meta.
const (
	metaProtocolVersion = "io.modelcontextprotocol/protocolVersion"
	metaClientCaps      = "io.modelcontextprotocol/clientCapabilities"
	metaServerInfo      = "io.modelcontextprotocol/serverInfo"
	metaSubscriptionID  = "io.modelcontextprotocol/subscriptionId"
)

// JSON-RPC and MCP error codes.
const (
	codeParseError         = -32700
	codeInvalidRequest     = -32600
	codeMethodNotFound     = -32601
	codeInvalidParams      = -32602
	codeInternalError      = -32603
	codeHeaderMismatch     = -32020
	codeUnsupportedVersion = -32022
)

// atLeast reports whether protocol version v is min or newer (dates compare as strings).
func atLeast(v, min string) bool { return v >= min }

// rpcMessage is any JSON-RPC 2.0 message: request, notification or response.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// rpcError is a JSON-RPC error object, and the error handlers return for protocol faults.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return e.Message }

func newRPCError(code int, format string, a ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, a...)}
}

// errorMessage is an error reply to id; an id that is not a string or a number becomes null.
func errorMessage(id json.RawMessage, e *rpcError) *rpcMessage {
	if !validID(id) {
		id = json.RawMessage("null")
	}
	return &rpcMessage{JSONRPC: "2.0", ID: id, Error: e}
}

// invalidParams is a -32602 error.
func invalidParams(format string, a ...any) *rpcError {
	return newRPCError(codeInvalidParams, "invalid params: "+format, a...)
}

// invalidRequest is a -32600 reply to id.
func invalidRequest(id json.RawMessage, format string, a ...any) *rpcMessage {
	return errorMessage(id, newRPCError(codeInvalidRequest, "invalid request: "+format, a...))
}

// validID reports whether id is a string or a number, the only ids JSON-RPC allows (not null).
func validID(id json.RawMessage) bool {
	return len(id) > 0 && (id[0] == '"' || id[0] == '-' || (id[0] >= '0' && id[0] <= '9'))
}

// readLine returns the next line without its line ending and a leading UTF-8 BOM; a line
// over max bytes is read to its end without being kept, and reported as too long.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, more, err := r.ReadLine()
		if err != nil {
			return nil, false, err
		}
		tooLong = tooLong || len(line)+len(chunk) > max
		if !tooLong {
			line = append(line, chunk...)
		}
		if !more {
			return bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")), tooLong, nil
		}
	}
}

// server is what all sessions of one telson process share.
type server struct {
	cfg     *config
	log     *logger
	tools   []*toolEntry // the tool table's enabled rows, in table order
	procs   *procTracker
	version string
	search  *searchState   // WebSearch's HTTP client and resting engines
	skills  *skillCatalog  // skills for InvokeSkill
	browser *browserHolder // ReadDocs's Chromium, started on first use
	listens listenerSet    // open subscriptions/listen requests, of every session
	list    listCache      // the last tools/list result
}

// listCache is the last tools/list result, encoded, with what it was made from: the protocol
// version and every tool's description (skills and settings change some). Encoding the 13
// tools again would cost more than the rest of a tools/list request.
type listCache struct {
	mu  sync.Mutex // guards key and raw
	key string
	raw json.RawMessage
}

// toolEntry is a row of the tool table with its parsed input schema.
type toolEntry struct {
	def    *toolDef
	schema *jsonSchema
	output json.RawMessage // the output schema with notices declared; nil for none
}

// newToolEntry parses d's input schema, and adds to its output schema the notices property
// every result may carry.
func newToolEntry(d *toolDef) (*toolEntry, error) {
	input, err := parseSchema(d.input)
	t := &toolEntry{def: d, schema: input}
	if err != nil || d.output == "" {
		return t, err
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(d.output), &m); err != nil {
		return nil, fmt.Errorf("output schema: %w", err)
	}
	if props, ok := m["properties"].(map[string]any); ok {
		props["notices"] = json.RawMessage(noticesSchema)
	}
	t.output, err = marshalJSON(m)
	return t, err
}

func (srv *server) tool(name string) *toolEntry {
	for _, t := range srv.tools {
		if t.def.name == name {
			return t
		}
	}
	return nil
}

// session is one client connection: stdio has exactly one.
type session struct {
	srv      *server
	notices  *noticeQueue
	shell    *shellState
	workflow *sessionWorkflow // plan mode, callbacks, skill watch
	bg       *bgTasks         // background tasks; closeAll when the session ends

	wmu sync.Mutex // guards out
	out io.Writer

	mu         sync.Mutex // guards version, clientCaps and logLevel
	version    string     // negotiated by initialize; "" before it
	clientCaps map[string]json.RawMessage
	logLevel   int // notifications/message below this level are not sent

	requests requestTable
	wg       sync.WaitGroup // counts running request goroutines
	slots    chan struct{}  // one per running request; at maxInflight the reader waits
}

// requestTable is a session's requests both ways: the client's that run (to
// cancel them) and the server's that await the client's reply.
type requestTable struct {
	mu       sync.Mutex                  // guards the fields below
	inflight map[string]*inflightRequest // by idKey
	pending  map[string]chan *rpcMessage // by idKey
	nextID   int64
}

type inflightRequest struct {
	cancel    context.CancelFunc
	cancelled bool // by the client: the reply is not sent
	listen    bool // a subscriptions/listen, which ends when the input does
}

func newSession(srv *server, out io.Writer) *session {
	s := &session{
		srv:      srv,
		out:      out,
		notices:  &noticeQueue{},
		shell:    newShellState(),
		bg:       newBgTasks(srv.procs),
		logLevel: logLevelIndex(srv.cfg.str("LOG_LEVEL")),
		requests: requestTable{
			inflight: map[string]*inflightRequest{},
			pending:  map[string]chan *rpcMessage{},
		},
		slots: make(chan struct{}, maxInflight),
	}
	s.workflow = newSessionWorkflow(s)
	return s
}

// marshalJSON encodes v as JSON without HTML escaping or a trailing newline.
func marshalJSON(v any) (json.RawMessage, error) {
	b, err := encodeLine(v)
	return bytes.TrimRight(b, "\n"), err
}

// encodeLine encodes msg, without HTML escaping, as one line of JSON ending in '\n'.
func encodeLine(msg any) ([]byte, error) {
	if m, ok := msg.(*rpcMessage); ok && m.Result != nil && m.Error == nil && m.Method == "" {
		return encodeResult(m), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(msg); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return buf.Bytes(), nil
}

// encodeResult writes a reply with a result by hand: its id is a checked JSON scalar and its
// result was encoded by marshalJSON, and encoding/json would scan the whole result again
// (for tools/list, that pass cost more than the rest of the request).
func encodeResult(m *rpcMessage) []byte {
	b := []byte(`{"jsonrpc":"2.0","id":`)
	b = append(b, m.ID...)
	b = append(b, `,"result":`...)
	b = append(b, m.Result...)
	b = append(b, "}\n"...)
	return b
}

// send writes one message as one line. It is the only writer of out.
func (s *session) send(msg any) error {
	b, err := encodeLine(msg)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.out.Write(b); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

// errNoStream says a route cannot carry a message; it goes to the session's output instead.
var errNoStream = errors.New("send: no stream to the client")

// routeKey keys, in a request's context, where messages about it go (an HTTP
// POST's reply); else the session's output.
type routeKey struct{}

func routeOf(ctx context.Context) func(msg any) error {
	route, _ := ctx.Value(routeKey{}).(func(msg any) error)
	return route
}

// sendVia sends msg on route when there is one that takes it, else on the session's output.
func (s *session) sendVia(route func(msg any) error, msg any) error {
	if route != nil {
		if err := route(msg); !errors.Is(err, errNoStream) {
			return err
		}
	}
	return s.send(msg)
}

// reply sends a reply (a message or a batch's array); nil sends nothing.
func (s *session) reply(msg any) {
	if msg != nil {
		s.send(msg)
	}
}

// close ends the session: its running requests are cancelled and what it owns is released.
func (s *session) close() {
	s.cancelAll(false)
	s.stopWorkflow()
	s.bg.closeAll()
}

// notify tells of a change to a list: an initialized legacy session directly, and
// every open subscriptions/listen of the server that asked for method (lists are server-wide).
func (s *session) notify(method string, params any) {
	s.mu.Lock()
	legacy := s.version != ""
	s.mu.Unlock()
	if legacy {
		s.send(notification(method, params))
	}
	s.srv.listens.deliver(method)
}

// outgoing is a request or a notification telson sends.
type outgoing struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  any             `json:"params,omitempty"`
}

func notification(method string, params any) any { return &outgoing{"2.0", nil, method, params} }

// notify sends a notification about request r on its route.
func (r *rpcRequest) notify(method string, params any) {
	r.s.sendVia(r.route, notification(method, params))
}

// serve dispatches messages from r until EOF or a read error, without waiting for running requests.
func (s *session) serve(ctx context.Context, r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	max := s.srv.cfg.int("MAX_MESSAGE_BYTES")
	for {
		line, tooLong, err := readLine(br, max)
		switch {
		case errors.Is(err, io.EOF):
			s.cancelAll(true)
			return nil
		case err != nil:
			return fmt.Errorf("read: %w", err)
		case tooLong:
			s.reply(invalidRequest(nil, "message longer than %d bytes skipped", max))
		default:
			s.handleLine(ctx, line, s.reply)
		}
	}
}

// cancelAll cancels every running request, or only the subscriptions/listen
// requests (a graceful end); they still answer.
func (s *session) cancelAll(onlyListens bool) {
	s.requests.mu.Lock()
	defer s.requests.mu.Unlock()
	for _, r := range s.requests.inflight {
		if r.listen || !onlyListens {
			r.cancel()
		}
	}
}

// handleLine handles a message or a batch; done gets the reply (a *rpcMessage
// or an array), or nil, once.
func (s *session) handleLine(ctx context.Context, line []byte, done func(reply any)) {
	switch line = bytes.TrimSpace(line); {
	case len(line) == 0:
		done(nil)
	case !json.Valid(line):
		err := json.Unmarshal(line, new(any))
		done(errorMessage(nil, newRPCError(codeParseError, "parse error: %v", err)))
	case line[0] == '[':
		s.handleBatch(ctx, line, done)
	default:
		s.handleMessage(ctx, line, false, done)
	}
}

// decodeMessage decodes one message (valid JSON without surrounding space), saying plainly what
// is wrong with its shape.
func decodeMessage(b []byte, m *rpcMessage) error {
	if b[0] != '{' {
		return errors.New("a message must be a JSON object")
	}
	err := json.Unmarshal(b, m)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("%q must not be a %s", te.Field, te.Value)
	}
	return err
}

// handleBatch answers a JSON array of messages with an array of replies (before 2025-06-18 only).
func (s *session) handleBatch(ctx context.Context, line []byte, done func(reply any)) {
	s.mu.Lock()
	v := s.version
	s.mu.Unlock()
	var items []json.RawMessage
	json.Unmarshal(line, &items) // line is a valid JSON array
	why := ""
	switch {
	case v == "":
		why = "a batch cannot come before initialize"
	case atLeast(v, version20250618):
		why = "batches are not supported in protocol version " + v
	case len(items) == 0:
		why = "empty batch"
	case len(items) > maxBatch:
		why = fmt.Sprintf("a batch of %d messages; at most %d are allowed", len(items), maxBatch)
	}
	if why != "" {
		done(invalidRequest(nil, "%s", why))
		return
	}
	answers := make(chan any, len(items))
	for _, item := range items {
		s.handleMessage(ctx, item, true, func(m any) { answers <- m })
	}
	s.wg.Add(1)
	go func() { // exits once every request of the batch has answered
		defer s.wg.Done()
		var replies []any
		for range items {
			if m := <-answers; m != nil {
				replies = append(replies, m)
			}
		}
		if len(replies) == 0 {
			done(nil)
		} else {
			done(replies)
		}
	}()
}

// handleMessage decodes, classifies and handles one message; done gets its reply (or nil) once.
func (s *session) handleMessage(ctx context.Context, raw []byte, inBatch bool,
	done func(reply any)) {
	var m rpcMessage
	err := decodeMessage(raw, &m)
	switch {
	case err != nil:
		done(invalidRequest(m.ID, "%v", err))
	case inBatch && m.Method == "initialize":
		done(invalidRequest(m.ID, "initialize cannot be part of a batch"))
	case m.JSONRPC != "2.0":
		done(invalidRequest(m.ID, `"jsonrpc" must be "2.0"`))
	case len(m.ID) > 0 && !validID(m.ID):
		done(invalidRequest(nil, "id must be a string or a number"))
	case m.Method == "" && (m.Result != nil || m.Error != nil) && len(m.ID) > 0:
		s.routeResponse(&m)
		done(nil)
	case m.Method == "":
		done(invalidRequest(m.ID, "no method"))
	case len(m.ID) == 0:
		s.handleNotification(&m)
		done(nil)
	default:
		s.startRequest(ctx, &m, done)
	}
}

// rpcRequest is one request being handled, with what its _meta says.
type rpcRequest struct {
	s             *session
	id            json.RawMessage
	method        string
	params        json.RawMessage
	version       string // the protocol version this request is served under
	modern        bool   // served in the 2026-07-28 era
	caps          map[string]json.RawMessage
	progressToken json.RawMessage
	route         func(msg any) error // where messages about it go (see routeKey)
}

// methodHandler handles one method's requests. Its result is a map, which the request's era
// completes, or a json.RawMessage already complete.
type methodHandler func(ctx context.Context, r *rpcRequest) (any, error)

var methods = map[string]methodHandler{
	"initialize":       handleInitialize,
	"ping":             handlePing,
	"server/discover":  handleDiscover,
	"tools/list":       handleToolsList,
	"tools/call":       handleToolsCall,
	"logging/setLevel": handleSetLevel,
	methodListen:       handleListen,
}

// idKey is id's value as a key: numbers by numeric value (5.0 is 5), strings as strings.
func idKey(id json.RawMessage) string {
	var v any
	if json.Unmarshal(id, &v) != nil {
		return string(id)
	}
	return fmt.Sprintf("%T %v", v, v)
}

// Limits on what a client can make a session hold.
const (
	maxBatch    = 100 // messages in a batch
	maxInflight = 64  // requests running at once, not counting those waiting on the client
)

func handlePing(context.Context, *rpcRequest) (any, error) { return nil, nil }

// startRequest runs one request in its own goroutine, or inline when later messages depend
// on its effect. At maxInflight it waits for a slot, so the reader stops reading: backpressure.
func (s *session) startRequest(ctx context.Context, m *rpcMessage, done func(reply any)) {
	handle, ok := methods[m.Method]
	r, rerr := s.newRequest(m)
	if !ok {
		rerr = newRPCError(codeMethodNotFound, "method not found: %s", m.Method)
	}
	if rerr != nil {
		done(errorMessage(m.ID, rerr))
		return
	}
	r.route = routeOf(ctx)
	reqCtx, cancel := context.WithCancel(ctx)
	inf := &inflightRequest{cancel: cancel, listen: m.Method == methodListen}
	key := idKey(m.ID)
	s.requests.mu.Lock()
	// A modern request over HTTP is cancelled by closing its stream, and its id is
	// unique only among its own client's: it is not registered.
	if !r.modern || r.route == nil {
		s.requests.inflight[key] = inf
	}
	s.requests.mu.Unlock()
	s.slots <- struct{}{}
	s.wg.Add(1)
	run := func() {
		defer s.wg.Done()
		defer cancel()
		var reply any = s.runRequest(reqCtx, r, handle)
		s.requests.mu.Lock()
		if s.requests.inflight[key] == inf {
			delete(s.requests.inflight, key)
		}
		if inf.cancelled {
			reply = nil
		}
		s.requests.mu.Unlock()
		done(reply)
		<-s.slots
	}
	// these run in the read loop, so later messages see their effect
	if m.Method == "initialize" || m.Method == "logging/setLevel" {
		run()
	} else {
		go run() // exits when the handler returns
	}
}

// awaitClient runs wait, which waits on the client, without holding a request's slot.
func (s *session) awaitClient(wait func()) {
	select {
	case <-s.slots:
		defer func() { s.slots <- struct{}{} }()
	default: // not called from a request
	}
	wait()
}

// requestMeta is what telson reads from a request's _meta.
type requestMeta struct {
	ProgressToken json.RawMessage
	Version       string                     `json:"io.modelcontextprotocol/protocolVersion"`
	Caps          map[string]json.RawMessage `json:"io.modelcontextprotocol/clientCapabilities"`
}

// newRequest reads a request's _meta and settles the era and version it is served under.
func (s *session) newRequest(m *rpcMessage) (*rpcRequest, *rpcError) {
	if len(m.Params) > 0 && string(m.Params) != "null" && m.Params[0] != '{' {
		return nil, invalidParams("params must be an object")
	}
	var p struct {
		Meta requestMeta `json:"_meta"`
	}
	if err := json.Unmarshal(m.Params, &p); len(m.Params) > 0 && err != nil {
		return nil, invalidParams("_meta: %v", err)
	}
	meta := p.Meta
	r := &rpcRequest{s: s, id: m.ID, method: m.Method, params: m.Params,
		progressToken: meta.ProgressToken}
	s.mu.Lock()
	r.version = s.version
	r.caps = s.clientCaps
	s.mu.Unlock()
	switch {
	case meta.Version == versionModern || (meta.Version == "" && m.Method == "server/discover"):
		if meta.Caps == nil && m.Method != "server/discover" {
			return nil, invalidParams("_meta %s is required in %s", metaClientCaps, versionModern)
		}
		r.version = versionModern
		r.modern = true
		r.caps = meta.Caps
	case slices.Contains(legacyVersions, meta.Version):
		r.version = meta.Version
	case meta.Version != "":
		return nil, unsupportedVersion(meta.Version)
	case r.version == "":
		r.version = version20251125 // before initialize: the newest legacy version
	}
	return r, nil
}

// runRequest calls the handler, turning its result, error or panic into a reply.
func (s *session) runRequest(ctx context.Context, r *rpcRequest, handle methodHandler,
) (reply *rpcMessage) {
	defer func() {
		if p := recover(); p != nil {
			s.srv.log.errorf("panic serving %s: %v\n%s", r.method, p, debug.Stack())
			reply = errorMessage(r.id, newRPCError(codeInternalError, "internal error: %v", p))
		}
	}()
	result, err := handle(ctx, r)
	raw, encoded := result.(json.RawMessage)
	if err == nil && !encoded {
		fields, _ := result.(map[string]any) // nil for an empty result
		raw, err = marshalJSON(s.completeResult(r, fields))
	}
	if err == nil {
		return &rpcMessage{JSONRPC: "2.0", ID: r.id, Result: raw}
	}
	re, ok := err.(*rpcError)
	if !ok {
		re = newRPCError(codeInternalError, "internal error: %v", err)
	}
	return errorMessage(r.id, re)
}

// completeResult adds to a handler's result what the request's era requires: in 2026-07-28, a
// resultType, the serverInfo in _meta, and a list's cache lifetime.
func (s *session) completeResult(r *rpcRequest, result map[string]any) map[string]any {
	if result == nil {
		result = map[string]any{}
	}
	if !r.modern {
		return result
	}
	if strings.HasSuffix(r.method, "/list") {
		result["ttlMs"] = 60000 // a change is announced on subscriptions/listen
		result["cacheScope"] = "public"
	}
	if result["resultType"] == nil {
		result["resultType"] = "complete"
	}
	meta, ok := result["_meta"].(map[string]any)
	if !ok {
		meta = map[string]any{}
		result["_meta"] = meta
	}
	if meta[metaServerInfo] == nil {
		meta[metaServerInfo] = s.srv.serverInfo("") // the bare name and version
	}
	return result
}

// handleNotification handles notifications/cancelled; other notifications need nothing.
func (s *session) handleNotification(m *rpcMessage) {
	var p struct {
		RequestID json.RawMessage
	}
	if m.Method != "notifications/cancelled" || json.Unmarshal(m.Params, &p) != nil {
		return
	}
	s.requests.mu.Lock()
	defer s.requests.mu.Unlock()
	if r, ok := s.requests.inflight[idKey(p.RequestID)]; ok {
		r.cancelled = true
		r.cancel()
	}
}

// take removes and returns the channel a server request with key awaits its reply on.
func (t *requestTable) take(key string) chan *rpcMessage {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch := t.pending[key]
	delete(t.pending, key)
	return ch
}

// routeResponse hands a client's reply to the server request waiting for it.
func (s *session) routeResponse(m *rpcMessage) {
	ch := s.requests.take(idKey(m.ID))
	if ch == nil {
		s.srv.log.debugf("reply to unknown request %s ignored", m.ID)
		return
	}
	ch <- m
}

// request sends a request to the client and waits for its reply; if ctx ends
// first, it sends notifications/cancelled.
func (s *session) request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	s.requests.mu.Lock()
	s.requests.nextID++
	id := json.RawMessage(fmt.Sprintf(`"telson-%d"`, s.requests.nextID))
	ch := make(chan *rpcMessage, 1)
	s.requests.pending[idKey(id)] = ch
	s.requests.mu.Unlock()
	defer s.requests.take(idKey(id))
	route := routeOf(ctx)
	if err := s.sendVia(route, &outgoing{"2.0", id, method, params}); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	var m *rpcMessage
	s.awaitClient(func() {
		select {
		case m = <-ch:
		case <-ctx.Done():
		}
	})
	if m == nil {
		cancel := map[string]any{"requestId": id, "reason": ctx.Err().Error()}
		s.sendVia(route, notification("notifications/cancelled", cancel))
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
	if m.Error != nil {
		return nil, fmt.Errorf("%s: client answered %d %s", method, m.Error.Code, m.Error.Message)
	}
	return m.Result, nil
}

// clientHas reports whether the client declared capability name, for this request.
func (r *rpcRequest) clientHas(name string) bool {
	_, ok := r.caps[name]
	return ok
}

// progress sends notifications/progress when the request asked for it; the caller's progress
// grows with every call.
func (r *rpcRequest) progress(progress, total float64, message string) {
	if len(r.progressToken) == 0 {
		return
	}
	p := map[string]any{"progressToken": r.progressToken, "progress": progress}
	if total > 0 {
		p["total"] = total
	}
	if message != "" && atLeast(r.version, version20250326) {
		p["message"] = message
	}
	r.notify("notifications/progress", p)
}

// Logging levels of RFC 5424, least severe first.
var logLevels = []string{
	"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency",
}

// logLevelIndex returns the index of level name, or that of "info" when unknown.
func logLevelIndex(name string) int {
	for i, l := range logLevels {
		if strings.EqualFold(l, name) {
			return i
		}
	}
	return 1
}

// log sends notifications/message at a level the initialized session asked for.
func (r *rpcRequest) log(level string, data any) {
	r.s.mu.Lock()
	wanted := r.s.version != "" && logLevelIndex(level) >= r.s.logLevel
	r.s.mu.Unlock()
	if wanted {
		msg := map[string]any{"level": level, "logger": "telson", "data": data}
		r.notify("notifications/message", msg)
	}
}

const methodListen = "subscriptions/listen"

// listenerSet is the open subscriptions/listen requests; a change to a list
// reaches every one that asked.
type listenerSet struct {
	mu   sync.Mutex // guards open, and is held while sending: an acknowledgement goes first
	open []*listener
}

// listener is one open subscriptions/listen request.
type listener struct {
	req     *rpcRequest
	ctx     context.Context // ends once the request is cancelled: deliver skips it
	methods []string        // the notifications granted
}

// deliver sends notification method to the listeners that asked for it.
func (ls *listenerSet) deliver(method string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, l := range ls.open {
		// a cancelled listener may not have left the set yet
		if l.ctx.Err() == nil && slices.Contains(l.methods, method) {
			meta := map[string]any{metaSubscriptionID: l.req.id}
			l.req.notify(method, map[string]any{"_meta": meta})
		}
	}
}

// handleListen acknowledges the notifications it will deliver, then delivers them until
// the request is cancelled; a graceful end (stdin closed, shutdown) answers it.
func handleListen(ctx context.Context, r *rpcRequest) (any, error) {
	var p struct {
		Notifications map[string]any
	}
	json.Unmarshal(r.params, &p) // what is not asked for as it should be is not granted
	l := &listener{req: r, ctx: ctx}
	granted := map[string]any{}
	if p.Notifications["toolsListChanged"] == true {
		granted["toolsListChanged"] = true
		l.methods = append(l.methods, "notifications/tools/list_changed")
	}
	meta := map[string]any{metaSubscriptionID: r.id}
	ls := &r.s.srv.listens
	ls.mu.Lock()
	ls.open = append(ls.open, l)
	ack := map[string]any{"notifications": granted, "_meta": meta}
	r.notify("notifications/subscriptions/acknowledged", ack)
	ls.mu.Unlock()
	r.s.awaitClient(func() { <-ctx.Done() })
	ls.mu.Lock()
	ls.open = slices.DeleteFunc(ls.open, func(o *listener) bool { return o == l })
	ls.mu.Unlock()
	return map[string]any{"_meta": meta}, nil
}

// noticeQueue holds one-line notices for the agent until the next tool
// result carries them, each once.
type noticeQueue struct {
	mu    sync.Mutex // guards lines
	lines []string
}

const maxNotices = 100

// push queues a notice; past maxNotices the oldest is dropped.
func (q *noticeQueue) push(line string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.lines) == maxNotices {
		q.lines = q.lines[1:]
	}
	q.lines = append(q.lines, line)
}

// drain returns the waiting notices and forgets them.
func (q *noticeQueue) drain() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	lines := q.lines
	q.lines = nil
	return lines
}

// announce queues a notice for the next tool result and tells the client at once.
func (s *session) announce(line string) {
	s.notices.push(line)
	(&rpcRequest{s: s}).log("info", line)
}

// serverInfo is the Implementation object for version v.
func (srv *server) serverInfo(v string) map[string]any {
	info := map[string]any{"name": "telson", "version": srv.version}
	if atLeast(v, version20250618) {
		info["title"] = "telson agent tools"
	}
	if atLeast(v, version20251125) {
		info["icons"] = telsonIcons
		info["description"] = "Shell, background processes, web reading and search, " +
			"and workflow tools for agents."
	}
	return info
}

var telsonIcon = []byte(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">` +
	`<rect width="16" height="16" rx="3" fill="#1f6feb"/>` +
	`<path d="M4 5h8M8 5v7" stroke="#fff" stroke-width="2" fill="none"/></svg>`)

var telsonIcons = []map[string]any{{
	"src":      "data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString(telsonIcon),
	"mimeType": "image/svg+xml",
	"sizes":    []string{"any"},
}}

const serverInstructions = "telson gives you a shell (Bash, and BackgroundBash for long-running " +
	"processes), web access (ReadDocs reads a page through a real browser; WebSearch asks many " +
	"search engines at once) and workflow tools. Tool results may start with notices about " +
	"background tasks or reminders; act on them."

var serverCapabilities = map[string]any{
	"tools":   map[string]any{"listChanged": true},
	"logging": map[string]any{},
}

func handleInitialize(ctx context.Context, r *rpcRequest) (any, error) {
	var p struct {
		ProtocolVersion string
		Capabilities    map[string]json.RawMessage
	}
	if err := json.Unmarshal(r.params, &p); len(r.params) > 0 && err != nil {
		return nil, invalidParams("%v", err)
	}
	v := p.ProtocolVersion
	if !slices.Contains(legacyVersions, v) {
		v = version20251125
	}
	r.s.mu.Lock()
	r.s.version, r.s.clientCaps = v, p.Capabilities
	r.s.mu.Unlock()
	return map[string]any{
		"protocolVersion": v,
		"capabilities":    serverCapabilities,
		"serverInfo":      r.s.srv.serverInfo(v),
		"instructions":    serverInstructions,
	}, nil
}

func handleDiscover(ctx context.Context, r *rpcRequest) (any, error) {
	return map[string]any{
		"supportedVersions": supportedVersions,
		"capabilities":      serverCapabilities,
		"instructions":      serverInstructions,
		"ttlMs":             3600000,
		"cacheScope":        "public",
		"_meta":             map[string]any{metaServerInfo: r.s.srv.serverInfo(versionModern)},
	}, nil
}

func handleSetLevel(ctx context.Context, r *rpcRequest) (any, error) {
	var p struct {
		Level string
	}
	json.Unmarshal(r.params, &p)
	level := slices.Index(logLevels, p.Level)
	if level < 0 {
		levels := strings.Join(logLevels, ", ")
		return nil, invalidParams("level %q is not one of %s", p.Level, levels)
	}
	r.s.mu.Lock()
	r.s.logLevel = level
	r.s.mu.Unlock()
	return nil, nil
}

func handleToolsList(ctx context.Context, r *rpcRequest) (any, error) {
	var p struct {
		Cursor *string
	}
	if err := json.Unmarshal(r.params, &p); len(r.params) > 0 && err != nil {
		return nil, invalidParams("%v", err)
	}
	if p.Cursor != nil {
		// one page holds every tool, so no cursor was ever handed out
		return nil, invalidParams("bad cursor %q", *p.Cursor)
	}
	srv := r.s.srv
	descs := make([]string, len(srv.tools))
	for i, t := range srv.tools {
		descs[i] = t.def.desc(srv)
	}
	key := r.version + "\x00" + strings.Join(descs, "\x00")
	srv.list.mu.Lock()
	defer srv.list.mu.Unlock()
	if srv.list.key == key {
		return srv.list.raw, nil
	}
	tools := []map[string]any{}
	for i, t := range srv.tools {
		tools = append(tools, describeTool(t, descs[i], r.version))
	}
	raw, err := marshalJSON(r.s.completeResult(r, map[string]any{"tools": tools}))
	if err != nil {
		return nil, err
	}
	srv.list.key = key
	srv.list.raw = raw
	return raw, nil
}

// describeTool is one tools/list entry, with the fields version v knows.
func describeTool(t *toolEntry, desc, v string) map[string]any {
	d := t.def
	listing := map[string]any{"name": d.name, "description": desc}
	listing["inputSchema"] = t.schema.raw
	if atLeast(v, version20250326) {
		listing["annotations"] = map[string]any{
			"title":           d.title,
			"readOnlyHint":    d.hints.readOnly,
			"destructiveHint": d.hints.destructive,
			"idempotentHint":  d.hints.idempotent,
			"openWorldHint":   d.hints.openWorld,
		}
	}
	if atLeast(v, version20250618) {
		listing["title"] = d.title
		if t.output != nil {
			listing["outputSchema"] = t.output
		}
	}
	if atLeast(v, version20251125) {
		listing["icons"] = telsonIcons
	}
	return listing
}

// toolDef is a row of the tool table (see toolTable in main.go).
type toolDef struct {
	name, title string
	description string
	describe    func(srv *server) string // builds the description when it depends on state
	input       string                   // JSON Schema of the arguments
	output      string                   // JSON Schema of structuredContent; "" for none
	hints       toolHints
	run         func(ctx context.Context, call *toolCall) toolResult
}

// desc is the tool's description as it stands now.
func (d *toolDef) desc(srv *server) string {
	if d.describe != nil {
		return d.describe(srv)
	}
	return d.description
}

// toolHints are the tool annotations of 2025-03-26.
type toolHints struct{ readOnly, destructive, idempotent, openWorld bool }

// toolCall is what a tool handler gets; args are already checked against the input schema.
type toolCall struct {
	s    *session
	req  *rpcRequest
	args json.RawMessage
}

// toolResult is what a tool handler returns.
type toolResult struct {
	content       []contentItem
	structured    any // structuredContent, sent from 2025-06-18 to tools with an output schema
	isError       bool
	named         bool           // by errorResult: the dispatcher puts the tool's name in front
	inputRequired map[string]any // 2026-07-28: reply with an InputRequiredResult with these fields
}

type contentItem struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	Data     string `json:"data,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
}

func textResult(text string) toolResult {
	return toolResult{content: []contentItem{{Type: "text", Text: text}}}
}

// structuredResult is a result whose text and structured content say the
// same: a client may show the model only one of them.
func structuredResult(text string, structured any) toolResult {
	return toolResult{content: []contentItem{{Type: "text", Text: text}}, structured: structured}
}

// errorResult is a failed call; the dispatcher puts the tool's name in front.
func errorResult(format string, a ...any) toolResult {
	r := textResult(fmt.Sprintf(format, a...))
	r.isError = true
	r.named = true
	return r
}

// noticesSchema is the output-schema property every tool's structured content
// may carry: notices (a background task ended, a reminder fired) waiting for the model.
const noticesSchema = `{"type":"array","items":{"type":"string"},"description":` +
	`"notices for you: background tasks that ended, reminders that fired; act on them"}`

// withNotices adds the notices to structured content, which becomes a JSON object.
func withNotices(structured any, notices []string) any {
	b, _ := json.Marshal(structured) // on failure, Unmarshal below fails too
	var m map[string]any
	if json.Unmarshal(b, &m) != nil || m == nil {
		return structured
	}
	m["notices"] = notices
	return m
}

// handleToolsCall runs a tool and answers its CallToolResult, waiting notices first.
func handleToolsCall(ctx context.Context, r *rpcRequest) (any, error) {
	var p struct {
		Name      string
		Arguments any
	}
	dec := json.NewDecoder(bytes.NewReader(r.params))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return nil, invalidParams("%v", err)
	}
	t := r.s.srv.tool(p.Name)
	if t == nil {
		return nil, newRPCError(codeInvalidParams, "unknown tool: %q", p.Name)
	}
	if p.Arguments == nil {
		p.Arguments = map[string]any{}
	}
	var res toolResult
	args, problem := t.schema.check(p.Arguments)
	if problem != "" {
		res = errorResult("invalid arguments: %s", problem)
	} else {
		res = t.def.run(ctx, &toolCall{s: r.s, req: r, args: args})
	}
	if res.inputRequired != nil { // only a modern request's tools ask so
		res.inputRequired["resultType"] = "input_required"
		return res.inputRequired, nil
	}
	content := res.content
	if res.named {
		content[0].Text = t.def.name + ": " + content[0].Text
	}
	notices := r.s.notices.drain()
	if len(notices) > 0 {
		item := contentItem{Type: "text", Text: strings.Join(notices, "\n")}
		content = append([]contentItem{item}, content...)
		res.structured = withNotices(res.structured, notices)
	}
	m := map[string]any{"content": content}
	if res.isError {
		m["isError"] = true
	}
	if res.structured != nil && t.def.output != "" && atLeast(r.version, version20250618) {
		m["structuredContent"] = res.structured
	}
	return m, nil
}

// jsonSchema is the part of JSON Schema that tool inputs use; check applies it.
type jsonSchema struct {
	Type        string
	Description string
	Properties  map[string]*jsonSchema
	Required    []string
	Items       *jsonSchema
	Enum        []any
	Minimum     *float64
	Maximum     *float64
	MinLength   *float64
	MaxLength   *float64
	MinItems    *float64
	MaxItems    *float64
	raw         json.RawMessage // the schema as text, compact
}

func parseSchema(text string) (*jsonSchema, error) {
	var schema jsonSchema
	if err := json.Unmarshal([]byte(text), &schema); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	if schema.Type != "object" {
		return nil, fmt.Errorf("schema: type is %q, want object", schema.Type)
	}
	var err error
	schema.raw, err = marshalJSON(json.RawMessage(text))
	return &schema, err
}

// check returns args (decoded with json.Number) normalized, or what is wrong, naming the
// field. Arguments the schema does not know are dropped; values that convert without loss are
// converted: "5" to 5 for numbers, 5 to "5" for strings, "true" to true for booleans.
func (schema *jsonSchema) check(args any) (json.RawMessage, string) {
	v, problem := schema.checkValue("arguments", args)
	if problem != "" {
		return nil, problem
	}
	normalized, _ := marshalJSON(v) // decoded JSON, converted without loss, encodes
	return normalized, ""
}

// convert returns v as the schema's type when it converts without loss, else v unchanged.
func (schema *jsonSchema) convert(v any) any {
	str, isString := v.(string)
	num, isNumber := v.(json.Number)
	switch {
	case isString && (schema.Type == "integer" || schema.Type == "number"):
		if _, err := strconv.ParseFloat(str, 64); err == nil && json.Valid([]byte(str)) {
			return json.Number(str)
		}
	case isString && schema.Type == "boolean" && (str == "true" || str == "false"):
		return str == "true"
	case isNumber && schema.Type == "string" && !strings.ContainsAny(num.String(), ".eE"):
		return num.String() // an integer, which a string holds without loss
	}
	return v
}

// checkValue returns v converted to the schema, or what is wrong with it.
func (schema *jsonSchema) checkValue(path string, v any) (any, string) {
	v = schema.convert(v)
	kind := jsonType(v)
	if schema.Type != "" && kind != schema.Type && (kind != "number" || schema.Type != "integer") {
		got := withArticle(kind)
		if num, ok := v.(json.Number); ok {
			got += " (" + num.String() + ")"
		}
		return v, fmt.Sprintf("%s must be %s, got %s", path, withArticle(schema.Type), got)
	}
	problem := ""
	switch schema.Type {
	case "object":
		v, problem = schema.checkObject(v.(map[string]any))
	case "string":
		n := float64(len([]rune(v.(string))))
		problem = checkRange(path, n, schema.MinLength, schema.MaxLength, " characters")
	case "integer", "number":
		problem = schema.checkNumber(path, v.(json.Number))
	case "array":
		v, problem = schema.checkArray(path, v.([]any))
	}
	if problem != "" || len(schema.Enum) == 0 {
		return v, problem
	}
	opts := make([]string, len(schema.Enum))
	for i, e := range schema.Enum {
		opts[i] = fmt.Sprint(e)
		if opts[i] == fmt.Sprint(v) {
			return v, ""
		}
	}
	return v, fmt.Sprintf("%s must be one of %s, got %v", path, strings.Join(opts, ", "), v)
}

// checkObject keeps the properties the schema knows, each checked.
func (schema *jsonSchema) checkObject(obj map[string]any) (any, string) {
	for _, name := range schema.Required {
		if obj[name] == nil {
			return obj, fmt.Sprintf("%q is required", name)
		}
	}
	known := map[string]any{}
	for name, prop := range schema.Properties {
		if obj[name] == nil {
			continue
		}
		x, problem := prop.checkValue(strconv.Quote(name), obj[name])
		if problem != "" {
			return obj, problem
		}
		known[name] = x
	}
	return known, ""
}

func (schema *jsonSchema) checkNumber(path string, num json.Number) string {
	f, err := num.Float64()
	switch {
	case err != nil: // ±Inf: out of float64's range
		return fmt.Sprintf("%s: %s is out of range", path, num)
	case schema.Type == "integer" && f != math.Trunc(f):
		return fmt.Sprintf("%s must be an integer, got %s", path, num)
	}
	return checkRange(path, f, schema.Minimum, schema.Maximum, "")
}

func (schema *jsonSchema) checkArray(path string, arr []any) (any, string) {
	problem := checkRange(path, float64(len(arr)), schema.MinItems, schema.MaxItems, " items")
	if problem != "" || schema.Items == nil {
		return arr, problem
	}
	out := make([]any, len(arr))
	for i, x := range arr {
		out[i], problem = schema.Items.checkValue(fmt.Sprintf("%s[%d]", path, i), x)
		if problem != "" {
			return arr, problem
		}
	}
	return out, ""
}

// checkRange says what is wrong when n (a number, a length, a count of unit) is below min or
// above max; a nil bound does not apply.
func checkRange(path string, n float64, min, max *float64, unit string) string {
	switch {
	case min != nil && n < *min:
		return fmt.Sprintf("%s must be at least %.10g%s, got %.10g", path, *min, unit, n)
	case max != nil && n > *max:
		return fmt.Sprintf("%s must be at most %.10g%s, got %.10g", path, *max, unit, n)
	}
	return ""
}

// jsonType is the JSON Schema type name of a decoded value.
func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "null"
}

// withArticle puts "a" or "an" in front of a type name.
func withArticle(name string) string {
	if strings.ContainsAny(name[:1], "aeiou") {
		return "an " + name
	}
	return "a " + name
}

// logger writes telson's own log lines to stderr, never to stdout.
type logger struct {
	mu    sync.Mutex // guards w
	w     io.Writer
	level int // set once; lines below it are not written
}

func (l *logger) logf(level int, format string, a ...any) {
	if level < l.level {
		return
	}
	now := time.Now().Format("15:04:05.000")
	line := fmt.Sprintf("telson: %s %s: %s\n", now, logLevels[level], fmt.Sprintf(format, a...))
	l.mu.Lock()
	io.WriteString(l.w, line)
	l.mu.Unlock()
}

func (l *logger) debugf(format string, a ...any) { l.logf(0, format, a...) }
func (l *logger) infof(format string, a ...any)  { l.logf(1, format, a...) }
func (l *logger) warnf(format string, a ...any)  { l.logf(3, format, a...) }
func (l *logger) errorf(format string, a ...any) { l.logf(4, format, a...) }

// httpHandler serves Streamable HTTP on /mcp in both protocol eras: legacy sessions (initialize,
// Mcp-Session-Id, a GET stream, DELETE) and stateless 2026-07-28 POSTs. Every request first
// passes gate's checks.
type httpHandler struct {
	gate      *httpGate
	sessions  *httpSessions
	stateless *session // serves the 2026-07-28 era, which has no sessions and no GET stream
	maxBody   int64
	shutdown  chan struct{} // closed when the server shuts down: GET streams end
}

// httpGate holds the checks every request passes: Host (DNS rebinding), Origin and bearer token.
type httpGate struct {
	token     string   // the bearer token every request must carry; "" for none
	origins   []string // allowed Origins besides loopback ones ("*": any)
	hosts     []string // allowed Host names besides loopback ones
	anyIPHost bool     // listening on every interface: any IP-literal Host is allowed
}

// httpSessions are the legacy era's sessions by id. A session without a request for idle ends:
// an open GET stream is not a request, so it cannot keep a session alive.
type httpSessions struct {
	srv  *server
	max  int
	idle time.Duration
	now  func() time.Time // the clock (tests replace it)

	mu   sync.Mutex // guards byID and every session's requests and lastUsed
	byID map[string]*httpSession
}

// httpSession is one legacy-era session and its GET stream.
type httpSession struct {
	id       string
	s        *session
	ended    chan struct{} // closed when the session ends
	requests int           // POSTs being served
	lastUsed time.Time     // when a POST last started or ended

	mu     sync.Mutex          // guards stream and writes to it
	stream http.ResponseWriter // the open GET stream; nil when none
}

// httpReply is a POST's reply: JSON, or an event stream once a message about the request
// (progress, a log, a server request) comes before its response.
type httpReply struct {
	mu     sync.Mutex // guards the fields below and writes to w
	w      http.ResponseWriter
	canSSE bool // the client accepts text/event-stream
	sse    bool // the reply is an event stream
	ended  bool
}

const httpShutdownGrace = 3 * time.Second

func newHTTPHandler(srv *server, host string) *httpHandler {
	cfg := srv.cfg
	return &httpHandler{
		gate: &httpGate{
			token:     cfg.str("HTTP_TOKEN"),
			origins:   splitList(cfg.str("HTTP_ORIGINS")),
			hosts:     append(splitList(cfg.str("HTTP_HOSTS")), host),
			anyIPHost: net.ParseIP(host).IsUnspecified(),
		},
		sessions: &httpSessions{
			srv:  srv,
			max:  cfg.int("HTTP_MAX_SESSIONS"),
			idle: time.Duration(cfg.int("HTTP_SESSION_IDLE_MS")) * time.Millisecond,
			now:  time.Now,
			byID: map[string]*httpSession{},
		},
		stateless: newSession(srv, &httpSession{}), // an output without a stream: errNoStream
		maxBody:   int64(cfg.int("HTTP_MAX_BODY_BYTES")),
		shutdown:  make(chan struct{}),
	}
}

// splitList splits a comma- or space-separated list.
func splitList(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
}

func isLoopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback()
}

// randomHex is n bytes from crypto/rand in hex: session ids and tokens.
func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// httpFail answers status with a JSON-RPC error body.
func httpFail(w http.ResponseWriter, status int, id json.RawMessage, e *rpcError) {
	b, _ := encodeLine(errorMessage(id, e))
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// httpError answers status with an invalid-request error saying why.
func httpError(w http.ResponseWriter, status int, format string, a ...any) {
	httpFail(w, status, nil, newRPCError(codeInvalidRequest, format, a...))
}

func unsupportedVersion(requested string) *rpcError {
	return &rpcError{
		Code:    codeUnsupportedVersion,
		Message: "unsupported protocol version: " + requested,
		Data:    map[string]any{"supported": supportedVersions, "requested": requested},
	}
}

// ServeHTTP answers 403 or 401 unless r passes the Host, Origin and token checks, then routes
// it by method.
func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	switch {
	case !h.gate.hostAllowed(r.Host):
		httpError(w, http.StatusForbidden,
			"forbidden: Host %q is not allowed (DNS rebinding protection; see HTTP_HOSTS)", r.Host)
	case origin != "" && !h.gate.originAllowed(origin):
		httpError(w, http.StatusForbidden, "forbidden: Origin %q is not allowed (see HTTP_ORIGINS)",
			origin)
	case !h.gate.tokenValid(r):
		w.Header().Set("WWW-Authenticate", `Bearer realm="telson"`)
		httpError(w, http.StatusUnauthorized,
			"unauthorized: send the header Authorization: Bearer <HTTP_TOKEN>")
	case r.URL.Path != "/mcp":
		httpError(w, http.StatusNotFound, "not found: %s (the MCP endpoint is /mcp)", r.URL.Path)
	case r.Method == http.MethodPost:
		h.post(w, r)
	case r.Method == http.MethodGet:
		h.stream(w, r)
	case r.Method == http.MethodDelete:
		h.delete(w, r)
	default:
		httpError(w, http.StatusMethodNotAllowed, "method %s is not allowed on /mcp", r.Method)
	}
}

func (g *httpGate) hostAllowed(host string) bool {
	if name, _, err := net.SplitHostPort(host); err == nil {
		host = name
	}
	host = strings.Trim(host, "[]")
	return isLoopbackHost(host) || g.anyIPHost && net.ParseIP(host) != nil ||
		slices.ContainsFunc(g.hosts, func(a string) bool { return strings.EqualFold(a, host) })
}

func (g *httpGate) originAllowed(origin string) bool {
	u, err := url.Parse(origin)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && isLoopbackHost(u.Hostname()) {
		return true
	}
	return slices.ContainsFunc(g.origins, func(o string) bool {
		return o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin)
	})
}

func (g *httpGate) tokenValid(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return g.token == "" || ok && subtle.ConstantTimeCompare([]byte(got), []byte(g.token)) == 1
}

// readBody reads a request body of at most maxBody bytes; nil means it answered an error.
func (h *httpHandler) readBody(w http.ResponseWriter, r *http.Request) []byte {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		httpError(w, http.StatusRequestEntityTooLarge,
			"invalid request: body longer than %d bytes (HTTP_MAX_BODY_BYTES)", h.maxBody)
	case err != nil || !json.Valid(body):
		httpFail(w, http.StatusBadRequest, nil,
			newRPCError(codeParseError, "parse error: the body is not one JSON value"))
	default:
		return body
	}
	return nil
}

// post serves POST /mcp: initialize opens a session, a message with Mcp-Session-Id belongs to
// one, any other is a stateless 2026-07-28 message, which a disconnect cancels.
func (h *httpHandler) post(w http.ResponseWriter, r *http.Request) {
	body := h.readBody(w, r)
	if body == nil {
		return
	}
	var m statelessMessage
	json.Unmarshal(body, &m)
	sid := r.Header.Get("Mcp-Session-Id")
	version := r.Header.Get("MCP-Protocol-Version")
	var hs *httpSession
	switch {
	case sid == "" && m.Method != "initialize":
		if e := checkStateless(r.Header, &m); e != nil {
			httpFail(w, http.StatusBadRequest, m.ID, e)
		} else {
			h.exchange(r.Context(), w, r, h.stateless, body)
		}
		return
	case version != "" && !slices.Contains(supportedVersions, version):
		// another supported version than the negotiated one is tolerated (Claude Code sends one)
		httpFail(w, http.StatusBadRequest, nil, unsupportedVersion(version))
		return
	case sid == "":
		hs = h.sessions.open(w)
	default:
		hs = h.sessionOf(w, r)
	}
	if hs == nil {
		return
	}
	h.sessions.countRequest(hs, 1)
	defer h.sessions.countRequest(hs, -1)
	// a dropped connection does not cancel a legacy request (notifications/cancelled does)
	h.exchange(context.WithoutCancel(r.Context()), w, r, hs.s, body)
}

// statelessMessage is what a 2026-07-28 POST's header checks read from its body.
type statelessMessage struct {
	ID     json.RawMessage
	Method string
	Params struct {
		Name string
		Meta requestMeta `json:"_meta"`
	}
}

// checkStateless says what is wrong with a 2026-07-28 message or its headers; nil when nothing
// is. A batch (this era has none) decodes as nothing, so it is refused as sessionless legacy.
func checkStateless(hdr http.Header, m *statelessMessage) *rpcError {
	version := m.Params.Meta.Version
	hdrVersion := hdr.Get("MCP-Protocol-Version")
	method := hdr.Get("Mcp-Method")
	name := hdr.Get("Mcp-Name")
	bodyName := "" // the Mcp-Name header the message needs
	if m.Method == "tools/call" {
		bodyName = m.Params.Name
	}
	switch {
	case version == "" && m.Method != "server/discover":
		return newRPCError(codeInvalidRequest, "bad request: Mcp-Session-Id header is required "+
			"(initialize first), or name protocol %s in _meta %s",
			versionModern, metaProtocolVersion)
	case version != "" && version != versionModern:
		return unsupportedVersion(version)
	case hdrVersion != "" && !slices.Contains(supportedVersions, hdrVersion):
		return unsupportedVersion(hdrVersion)
	case version != "" && hdrVersion != version || method != m.Method || name != bodyName:
		return newRPCError(codeHeaderMismatch, "header mismatch: MCP-Protocol-Version %q, "+
			"Mcp-Method %q, Mcp-Name %q must match the body's %q, %q, %q",
			hdrVersion, method, name, version, m.Method, bodyName)
	case version != "" && len(m.ID) > 0 && m.Params.Meta.Caps == nil:
		return invalidParams("_meta %s is required in protocol version %s", metaClientCaps,
			versionModern)
	}
	return nil
}

// exchange hands body to s and answers the POST: 202 when there is no reply, else the reply.
// Messages about the request go to the reply too (see routeKey).
func (h *httpHandler) exchange(ctx context.Context, w http.ResponseWriter, r *http.Request,
	s *session, body []byte) {
	hr := &httpReply{w: w, canSSE: strings.Contains(r.Header.Get("Accept"), "text/event-stream")}
	replies := make(chan any, 1)
	routed := context.WithValue(ctx, routeKey{}, hr.send)
	s.handleLine(routed, body, func(reply any) {
		replies <- reply
	})
	select {
	case reply := <-replies:
		hr.finish(reply, replyStatus(reply, s == h.stateless))
	case <-r.Context().Done():
		hr.finish(nil, 0)
	}
}

// replyStatus is a POST reply's HTTP status: an error without id is 400; stateless, an unknown
// method is 404 and an invalid request, version or _meta 400; everything else 200.
func replyStatus(reply any, stateless bool) int {
	m, ok := reply.(*rpcMessage)
	if !ok || m.Error == nil {
		return http.StatusOK
	}
	switch code := m.Error.Code; {
	case stateless && code == codeMethodNotFound:
		return http.StatusNotFound
	case string(m.ID) == "null":
		return http.StatusBadRequest
	case stateless && (code == codeInvalidRequest || code == codeUnsupportedVersion):
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// send writes a message about the request as an event, turning the reply into an event stream.
func (hr *httpReply) send(msg any) error {
	b, err := encodeLine(msg)
	if err != nil {
		return err
	}
	hr.mu.Lock()
	defer hr.mu.Unlock()
	if hr.ended || !hr.canSSE {
		return errNoStream
	}
	if !hr.sse {
		hr.sse = true
		startEventStream(hr.w)
	}
	return writeEvent(hr.w, b)
}

// finish writes the response (nil: none) as JSON or as the event stream's last event.
func (hr *httpReply) finish(reply any, status int) {
	b, _ := encodeLine(reply)
	hr.mu.Lock()
	defer hr.mu.Unlock()
	hr.ended = true
	switch {
	case hr.sse && reply != nil:
		writeEvent(hr.w, b)
	case hr.sse:
	case reply == nil:
		hr.w.WriteHeader(http.StatusAccepted)
	default:
		writeJSON(hr.w, status, b)
	}
}

func startEventStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
}

// writeEvent writes one message event (JSON is one line) and flushes it.
func writeEvent(w http.ResponseWriter, data []byte) error {
	_, err := fmt.Fprintf(w, "event: message\ndata: %s\n\n", bytes.TrimRight(data, "\n"))
	if err != nil {
		return fmt.Errorf("sse: %w", err)
	}
	return http.NewResponseController(w).Flush()
}

// sessionOf returns the session a request names; nil means it answered why there is none.
func (h *httpHandler) sessionOf(w http.ResponseWriter, r *http.Request) *httpSession {
	sid := r.Header.Get("Mcp-Session-Id")
	hs := h.sessions.get(sid)
	switch {
	case sid == "" && r.Header.Get("MCP-Protocol-Version") == versionModern:
		httpError(w, http.StatusMethodNotAllowed, "protocol %s has no %s", versionModern, r.Method)
	case sid == "":
		httpError(w, http.StatusBadRequest, "bad request: Mcp-Session-Id header is required")
	case hs == nil:
		httpError(w, http.StatusNotFound,
			"unknown or expired Mcp-Session-Id; initialize a new session")
	}
	return hs
}

// delete serves DELETE /mcp: the session ends.
func (h *httpHandler) delete(w http.ResponseWriter, r *http.Request) {
	hs := h.sessionOf(w, r)
	if hs != nil {
		h.sessions.end(hs)
	}
}

// stream serves GET /mcp: the session's stream, open until the client leaves, the session ends
// or the server shuts down.
func (h *httpHandler) stream(w http.ResponseWriter, r *http.Request) {
	hs := h.sessionOf(w, r)
	switch {
	case hs == nil:
	case !hs.attach(w):
		httpError(w, http.StatusConflict, "conflict: this session already has a stream open")
	default:
		defer hs.detach()
		select {
		case <-r.Context().Done():
		case <-hs.ended:
		case <-h.shutdown:
		}
	}
}

// closeAll ends every session; run's srv.close then kills what is left.
func (h *httpHandler) closeAll() {
	h.sessions.endWhere(func(*httpSession) bool { return true })
	h.stateless.close()
}

// attach opens the session's GET stream on w; false when it has one.
func (hs *httpSession) attach(w http.ResponseWriter) bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.stream != nil {
		return false
	}
	hs.stream = w
	startEventStream(w)
	http.NewResponseController(w).Flush() // clients wait for the headers
	return true
}

func (hs *httpSession) detach() {
	hs.mu.Lock()
	hs.stream = nil
	hs.mu.Unlock()
}

// Write is the session's output: one message as an event on its GET stream.
func (hs *httpSession) Write(p []byte) (int, error) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.stream == nil {
		return 0, errNoStream
	}
	return len(p), writeEvent(hs.stream, p)
}

// open mints a session after ending expired ones and names it in w's Mcp-Session-Id header; nil
// means it answered 503 at HTTP_MAX_SESSIONS.
func (ss *httpSessions) open(w http.ResponseWriter) *httpSession {
	id, err := randomHex(16)
	ss.expire()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if err == nil && len(ss.byID) >= ss.max {
		err = fmt.Errorf("%d sessions (HTTP_MAX_SESSIONS) are open; end one with DELETE or "+
			"try later", len(ss.byID))
	}
	if err != nil {
		httpFail(w, http.StatusServiceUnavailable, nil,
			newRPCError(codeInternalError, "no new session: %v", err))
		return nil
	}
	hs := &httpSession{id: id, ended: make(chan struct{}), lastUsed: ss.now()}
	hs.s = newSession(ss.srv, hs)
	ss.byID[id] = hs
	w.Header().Set("Mcp-Session-Id", id)
	return hs
}

// get returns the live session with id, or nil.
func (ss *httpSessions) get(id string) *httpSession {
	ss.expire()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.byID[id]
}

// countRequest records a POST on hs starting (+1) or ending (-1).
func (ss *httpSessions) countRequest(hs *httpSession, delta int) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	hs.requests += delta
	hs.lastUsed = ss.now()
}

// expire ends the sessions that have had no request running for longer than idle.
func (ss *httpSessions) expire() {
	now := ss.now()
	ss.endWhere(func(hs *httpSession) bool {
		return hs.requests == 0 && now.Sub(hs.lastUsed) > ss.idle
	})
}

// endWhere ends the sessions for which cond holds (cond is asked with ss.mu held): their GET
// streams and what they own. A session leaves byID once, so it ends once.
func (ss *httpSessions) endWhere(cond func(hs *httpSession) bool) {
	var ending []*httpSession
	ss.mu.Lock()
	for id, hs := range ss.byID {
		if cond(hs) {
			ending = append(ending, hs)
			delete(ss.byID, id)
		}
	}
	ss.mu.Unlock()
	for _, hs := range ending {
		close(hs.ended)
		hs.s.close()
	}
}

func (ss *httpSessions) end(hs *httpSession) {
	ss.endWhere(func(other *httpSession) bool { return other == hs })
}

// connLimiter is a listener that holds at most cap(slots) connections at once. At the cap a new
// connection is closed at once: the client learns it now and can retry, rather than hang.
type connLimiter struct {
	net.Listener
	slots chan struct{}
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: conn, release: sync.OnceFunc(func() { <-l.slots })}, nil
		default:
			conn.Close()
		}
	}
}

// limitedConn gives its slot back when it closes.
type limitedConn struct {
	net.Conn
	release func()
}

func (lc *limitedConn) Close() error {
	lc.release()
	return lc.Conn.Close()
}
