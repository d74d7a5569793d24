// jsonrpc.go holds the protocol, in the order a request travels: the wire (framing, the one
// encoder, outboxes), dispatch (sessions, requests, methods, both protocol eras), tools/list
// and tools/call with the argument schema check, messages to the client (server requests,
// progress, notices), and the transports (stdio, Streamable HTTP).
//
// Rules:
//   - every outgoing message is encoded by encode and written by the one writer of its
//     output: stdio's writer goroutine, or the HTTP handler answering the POST;
//   - the transport hands each line its outbox and a reply function, which the request path
//     calls exactly once (nil: no reply);
//   - every request runs in its own goroutine with its own context; notifications/cancelled
//     cancels it, and no reply is sent;
//   - a handler's panic becomes -32603 with its stack on stderr, and the session keeps serving;
//   - protocol faults are JSON-RPC errors; a tool's failures, bad arguments included, are
//     isError results the model can act on.
//
// Concurrency map.
// Goroutines that can outlive the call that started them, and when each ends:
//   - stdio reader (session.serve): at stdin EOF or a read error (at shutdown it stays blocked
//     on stdin until the process exits); serveStdio's waiter for the running requests: when
//     they have all answered (at shutdown serveStdio stops waiting after shutdownGrace);
//   - stdio writer (outbox.writeLines): when serveStdio stops it and the queue is empty, or at
//     a write error;
//   - one per request (session.start): when its handler returns and the reply is handed on;
//     its keep-alive (rpcRequest.keepAlive), which sends progress only with a progress token:
//     before the reply;
//   - a batch's collector (session.handleBatch): when every message of the batch has answered;
//   - HTTP: serveHTTP's server, until shutdown; net/http's, one per connection, each the
//     writer of its POST's reply;
//   - per task (tools_bg.go): bgTask.run, once bash has exited and leftWait has passed; its
//     output's copier (child.wait, machine.go), at the output's end, which a process the
//     command left behind can hold off until it exits or the session's end kills it; a Bash
//     call's timeout (time.AfterFunc), which stops the command, until it fires or the task ends;
//   - the browser (tools_web.go): the DevTools reader, until the connection ends; a reply to a
//     tab's event, until Chrome answers or the read ends; a closed tab's call, until Chrome
//     answers or its deadline; WebSearch's engines, each until it answers or its timeout (the
//     call waits for all);
//   - callback timers (tools_workflow.go), until they fire (a repeating one arms the next,
//     under callbackSlots.mu) or the session ends.
//
// WaitGroups and onces: session.wg counts running requests and batches (serveStdio waits for
// them);
// bgTasks.wg the tasks' goroutines and bgTasks.starts the starts under way (closeAll waits for
// both); procTracker.starting the process starts under way (closeAll waits); procTracker.once
// starts the reaper before the first child; keptFile.once makes a kept output file (machine.go);
// toolEntry.schema parses a tool's input schema at its first call; settingsFields (main.go)
// finds the settings' fields.
//
// Mutexes, each a leaf unless said (none is held across I/O, a process start or kill, or a
// file read; what is found under one is acted on after it is released):
//   - session.mu: the negotiated version, client capabilities and name, in-flight and pending
//     requests;
//   - rpcRequest.progressMu: a request's progress count, held while a notification is queued
//     (a bounded queue, not I/O) so that the counts go out in order;
//   - noticeQueue.mu: notices waiting for the next tool result;
//   - connLimiter.mu: the HTTP connections;
//   - procTracker.mu, keptFile.mu (machine.go); shellState.mu (tools_bash.go); bgTasks.mu,
//     then bgTask.mu, then noticeQueue.mu, in that order (tools_bg.go); callbackSlots.mu
//     (tools_workflow.go); cdpClient.mu, tabState.mu, searchState.mu (tools_web.go).
//
// Channels as locks: session.slots bounds the requests running at once (the reader waits for a
// slot: backpressure); an outbox's queue bounds what waits for a slow client;
// browserHolder.turn is held while a ReadDocs call starts, attaches to or stops the browser,
// at most browserStart (a process start, a DevTools round trip, a dial: each under that
// deadline), and close waits for it at most as long; browserHolder.tabs bounds the tabs open
// at once.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ---- the wire ----------------------------------------------------------------

// Protocol versions, oldest first: the legacy era negotiates one of the first four, the
// modern one is named on each request.
const (
	version20250326 = "2025-03-26"
	version20250618 = "2025-06-18"
	version20251125 = "2025-11-25"
	latestLegacy    = version20251125
	versionModern   = "2026-07-28"
)

var (
	legacyVersions    = []string{"2024-11-05", version20250326, version20250618, latestLegacy}
	supportedVersions = append(slices.Clip(legacyVersions), versionModern)
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

// Limits on what a client can make a session hold.
const (
	maxInflight = 64  // requests running at once, not counting those waiting on the client
	outboxSize  = 64  // messages waiting for a client that is slow to read
	maxBatch    = 100 // messages in a batch
)

// rpcMessage is a JSON-RPC 2.0 message as it arrives: request, notification or response.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  rawJSON         `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// rawJSON is JSON kept in the bytes of the message it came in, which json.RawMessage would copy
// (a 60 MiB tools/call held twice); every message is read into bytes of its own.
type rawJSON []byte

func (r *rawJSON) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

// outMessage is a message telson sends: a response, a request or a notification.
type outMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  any             `json:"params,omitempty"`
	Result  any             `json:"result,omitempty"`
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

func invalidParams(format string, a ...any) *rpcError {
	return newRPCError(codeInvalidParams, "invalid params: "+format, a...)
}

// errorMessage is an error reply to id; an id that is not a string or a number becomes null.
func errorMessage(id json.RawMessage, e *rpcError) *outMessage {
	if !validID(id) {
		id = json.RawMessage("null")
	}
	return &outMessage{JSONRPC: "2.0", ID: id, Error: e}
}

func invalidRequest(id json.RawMessage, format string, a ...any) *outMessage {
	return errorMessage(id, newRPCError(codeInvalidRequest, "invalid request: "+format, a...))
}

func notification(method string, params any) *outMessage {
	return &outMessage{JSONRPC: "2.0", Method: method, Params: params}
}

// validID reports whether id is a string or a number, the only ids JSON-RPC allows (not null).
func validID(id json.RawMessage) bool {
	return len(id) > 0 && strings.ContainsRune(`"-0123456789`, rune(id[0])) // a string or a number
}

// idKey is id's value as a key: numbers by numeric value (5.0 is 5), strings as strings.
func idKey(id json.RawMessage) string {
	var v any
	if json.Unmarshal(id, &v) != nil {
		return string(id)
	}
	return fmt.Sprintf("%T %v", v, v)
}

// encode is the one encoder of what telson sends: one line of JSON without HTML escaping.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return buf.Bytes(), nil
}

// errNoStream says an output cannot take a message now: it is closed, or takes only a reply.
var errNoStream = errors.New("send: no stream to the client")

// outbox is a bounded queue of encoded messages for one output, drained by that output's one
// writer. A sender waits while the queue is full (the client is not reading): a stuck client
// holds its senders, never memory or a lock.
type outbox struct {
	queue  chan []byte
	done   chan struct{} // closed when the writer has stopped: sends fail from then on
	stream bool          // it takes messages besides a reply
	// version is the protocol version its transport names for the request (an HTTP POST's
	// MCP-Protocol-Version header); "" for the one the session negotiated
	version string
}

func newOutbox(stream bool) *outbox {
	return &outbox{queue: make(chan []byte, outboxSize), done: make(chan struct{}), stream: stream}
}

// versionOf is the protocol version o's transport named; "" for none (a nil o too).
func (o *outbox) versionOf() string {
	if o == nil || !slices.Contains(legacyVersions, o.version) {
		return ""
	}
	return o.version
}

// send queues one message (nil: nothing); a nil outbox, or one that takes only a reply,
// refuses it.
func (o *outbox) send(msg any) error {
	switch {
	case msg == nil:
		return nil
	case o == nil || !o.stream:
		return errNoStream
	}
	b, err := encode(msg)
	if err != nil {
		return err
	}
	select {
	case o.queue <- b:
		return nil
	case <-o.done:
		return errNoStream
	}
}

// writeLines is stdio's writer: it writes each queued message to w until stop is closed and
// the queue is empty, or a write fails.
func (o *outbox) writeLines(w io.Writer, stop <-chan struct{}) {
	defer close(o.done)
	for {
		var b []byte
		select {
		case b = <-o.queue:
		case <-stop:
			select {
			case b = <-o.queue:
			default:
				return
			}
		}
		if _, err := w.Write(b); err != nil {
			return
		}
	}
}

// ---- dispatch ------------------------------------------------------------------

// server is what all sessions of one telson process share.
type server struct {
	set     *settings
	log     *slog.Logger
	version string
	tools   []*toolEntry      // the tool table's enabled rows, in table order
	names   *strings.Replacer // puts TOOL_PREFIX before each tool's name (served)
	procs   *procTracker
	search  *searchState
	browser *browserHolder
}

// session is one client's state: stdio has one, and so has an HTTP server (one agent's).
type session struct {
	srv      *server
	out      *outbox // what no request carries goes here (stdio); nil over HTTP
	notices  noticeQueue
	shell    *shellState
	bg       *bgTasks
	workflow *sessionWorkflow
	wg       sync.WaitGroup // counts running requests and batches
	slots    chan struct{}  // one per running request; at maxInflight the reader waits
	inputEnd chan struct{}  // closed at stdin's end: no answer from the client can come

	mu      sync.Mutex                 // guards the fields below
	version string                     // negotiated by initialize; "" before it
	caps    map[string]json.RawMessage // every client's: one's handshake keeps another's
	client  string                     // the clientInfo name of the last initialize
	// the client's running requests, and each one's idKey: two HTTP clients may both run a
	// request 5, and a cancel naming it is then ignored
	inflight map[*rpcRequest]string
	pending  map[string]chan *rpcMessage // the server's requests awaiting a reply, by idKey
}

func newSession(srv *server, out *outbox) *session {
	s := &session{
		srv:      srv,
		out:      out,
		shell:    &shellState{home: srv.set.env.home, cwd: srv.set.env.wd},
		bg:       newBgTasks(srv.procs),
		slots:    make(chan struct{}, maxInflight),
		inflight: map[*rpcRequest]string{},
		caps:     map[string]json.RawMessage{},
		inputEnd: make(chan struct{}),
		pending:  map[string]chan *rpcMessage{},
	}
	s.workflow = newSessionWorkflow(s)
	return s
}

// close ends the session: its running requests are cancelled and what it owns is stopped.
func (s *session) close() {
	s.cancelAll()
	s.stopWorkflow()
	s.bg.closeAll()
}

// cancelAll cancels every running request; they still answer.
func (s *session) cancelAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.inflight {
		r.cancel()
	}
}

// serve dispatches the lines of r until EOF or a read error (logged), without waiting for the
// requests it started; then it closes inputEnd. A line's leading UTF-8 BOM goes; a line over
// MaxMessage bytes is read to its end without being kept, and answered with an error. Replies
// and messages go to the session's outbox.
func (s *session) serve(ctx context.Context, r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	max := s.srv.set.MaxMessage
	var line bytes.Buffer // doubles as it grows: an append's smaller steps cost a long line 5 times its size
	tooLong := false
	for {
		chunk, more, err := br.ReadLine()
		if err != nil {
			close(s.inputEnd)
			if !errors.Is(err, io.EOF) {
				s.srv.log.Error("read: " + err.Error())
			}
			return
		}
		tooLong = tooLong || line.Len()+len(chunk) > max
		if !tooLong {
			line.Write(chunk)
		}
		switch {
		case more:
			continue
		case tooLong:
			s.out.send(invalidRequest(nil, "message longer than %d bytes skipped", max))
		default: // without a UTF-8 BOM
			s.handleLine(ctx, bytes.TrimPrefix(line.Bytes(), []byte("\xef\xbb\xbf")), false, s.out,
				s.out.send)
		}
		line = bytes.Buffer{} // the request may hold the bytes (rawJSON)
		tooLong = false
	}
}

// handleLine decodes one line, a message or (not inBatch) a batch, and handles it: messages
// about its requests go to out, and reply gets the reply (a message, an array of them, or
// nil), exactly once.
func (s *session) handleLine(ctx context.Context, line []byte, inBatch bool, out *outbox,
	reply func(any) error) {
	line = bytes.TrimSpace(line)
	var m rpcMessage
	err := json.Unmarshal(line, &m)
	var syntax *json.SyntaxError
	var te *json.UnmarshalTypeError
	var msg any // the reply, unless a batch or a request answers on its own
	switch {
	case len(line) == 0:
	case errors.As(err, &syntax):
		msg = errorMessage(nil, newRPCError(codeParseError, "parse error: %v", err))
	case line[0] == '[' && !inBatch:
		s.handleBatch(ctx, line, out, reply)
		return
	case line[0] != '{':
		msg = invalidRequest(nil, "a message must be a JSON object")
	case errors.As(err, &te):
		msg = invalidRequest(m.ID, "%q must not be a %s", te.Field, te.Value)
	case m.JSONRPC != "2.0":
		msg = invalidRequest(m.ID, `"jsonrpc" must be "2.0"`)
	case len(m.ID) > 0 && !validID(m.ID):
		msg = invalidRequest(nil, "id must be a string or a number")
	case m.Method == "" && (m.Result != nil || m.Error != nil) && len(m.ID) > 0:
		s.routeResponse(&m)
	case m.Method == "":
		msg = invalidRequest(m.ID, "no method")
	case len(m.ID) == 0:
		s.handleNotification(&m)
	default:
		s.start(ctx, &m, out, reply)
		return
	}
	reply(msg)
}

// handleBatch answers a JSON array of messages with an array of replies, in protocol version
// 2025-03-26 only (the one version whose spec has batches): the version its transport names
// (an HTTP POST's header), else the session's.
func (s *session) handleBatch(ctx context.Context, line []byte, out *outbox,
	reply func(any) error) {
	s.mu.Lock()
	v := cmp.Or(out.versionOf(), s.version)
	s.mu.Unlock()
	var items []json.RawMessage
	json.Unmarshal(line, &items) // line is a valid JSON array
	switch {
	case v != version20250326:
		reply(invalidRequest(nil, "batches are taken in protocol version "+version20250326+
			" only: send each message on its own"))
		return
	case len(items) == 0:
		reply(invalidRequest(nil, "empty batch"))
		return
	case len(items) > maxBatch:
		reply(invalidRequest(nil, "a batch of %d messages; at most %d are allowed", len(items),
			maxBatch))
		return
	}
	answers := make(chan any, len(items))
	for _, item := range items {
		s.handleLine(ctx, item, true, out, func(m any) error {
			answers <- m
			return nil
		})
	}
	s.wg.Add(1)
	go func() { // exits once every message of the batch has answered
		defer s.wg.Done()
		var replies []any
		for range items {
			if m := <-answers; m != nil {
				replies = append(replies, m)
			}
		}
		if len(replies) == 0 {
			reply(nil) // notifications and responses only
		} else {
			reply(replies)
		}
	}()
}

// rpcRequest is one request being handled, with what its _meta says.
type rpcRequest struct {
	s             *session
	id            json.RawMessage
	method        string
	params        json.RawMessage
	out           *outbox // where messages about the request go
	version       string  // the protocol version it is served under
	modern        bool    // served in the 2026-07-28 era
	caps          map[string]json.RawMessage
	progressToken json.RawMessage
	client        string   // the client's clientInfo name: its own (2026-07-28), else the session's
	notices       []string // the notices its reply carries: back in the queue if it is not sent
	cancel        context.CancelFunc
	cancelled     bool // by the client: the reply is not sent (guarded by s.mu)

	progressMu    sync.Mutex // guards progressCount, and the order of the progress queued
	progressCount int
}

// methodHandler handles one method's requests; its result is a JSON object's fields.
type methodHandler func(ctx context.Context, r *rpcRequest) (map[string]any, error)

var methods = map[string]methodHandler{
	"initialize":      handleInitialize,
	"ping":            handlePing,
	"server/discover": handleDiscover,
	"tools/list":      handleToolsList,
	"tools/call":      handleToolsCall,
}

// start runs one request in its own goroutine (initialize inline: later messages depend on
// it). At maxInflight it waits for a slot, so the reader stops reading: backpressure.
func (s *session) start(ctx context.Context, m *rpcMessage, out *outbox, reply func(any) error) {
	handle, known := methods[m.Method]
	r, rerr := s.newRequest(m, out)
	if !known {
		rerr = newRPCError(codeMethodNotFound, "method not found: %s", m.Method)
	}
	if rerr != nil {
		reply(errorMessage(m.ID, rerr))
		return
	}
	ctx, r.cancel = context.WithCancel(ctx)
	s.mu.Lock()
	// A modern request over HTTP is cancelled by closing its stream, and its id is unique
	// only among its own client's: it is not registered.
	if !r.modern || out == s.out {
		s.inflight[r] = idKey(m.ID)
	}
	s.mu.Unlock()
	s.slots <- struct{}{}
	s.wg.Add(1)
	run := func() {
		defer s.wg.Done()
		stop := make(chan struct{})
		go r.keepAlive(stop) // exits when the handler has returned: no progress follows the reply
		var msg any = s.call(ctx, r, handle)
		stop <- struct{}{} // taken between two notifications
		r.cancel()
		s.mu.Lock()
		delete(s.inflight, r)
		cancelled := r.cancelled
		s.mu.Unlock()
		if cancelled {
			msg = nil
			s.notices.putBack(r.notices) // they ride on the next result
		}
		reply(msg) // holding the slot: a client that reads nothing stops the reader
		<-s.slots
	}
	if m.Method == "initialize" {
		run()
	} else {
		go run() // exits when the handler returns and the reply is handed on
	}
}

// call runs the handler, turning its result, error or panic into the reply.
func (s *session) call(ctx context.Context, r *rpcRequest, handle methodHandler) (
	reply *outMessage) {
	defer func() {
		if p := recover(); p != nil {
			s.srv.log.Error(fmt.Sprintf("panic serving %s: %v\n%s", r.method, p, debug.Stack()))
			reply = errorMessage(r.id, newRPCError(codeInternalError, "internal error: %v", p))
		}
	}()
	result, err := handle(ctx, r)
	if err != nil { // an *rpcError, as every handler's is (another would panic: -32603 above)
		return errorMessage(r.id, err.(*rpcError))
	}
	if r.modern {
		completeModern(r, result)
	}
	return &outMessage{JSONRPC: "2.0", ID: r.id, Result: result}
}

// handleNotification handles notifications/cancelled; other notifications need nothing.
func (s *session) handleNotification(m *rpcMessage) {
	var p struct {
		RequestID json.RawMessage
	}
	if m.Method != "notifications/cancelled" || json.Unmarshal(m.Params, &p) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var same []*rpcRequest
	for r, key := range s.inflight {
		if key == idKey(p.RequestID) {
			same = append(same, r)
		}
	}
	if len(same) == 1 {
		same[0].cancelled = true
		same[0].cancel()
	}
}

func handlePing(context.Context, *rpcRequest) (map[string]any, error) {
	return map[string]any{}, nil
}

func handleInitialize(ctx context.Context, r *rpcRequest) (map[string]any, error) {
	var p struct {
		ProtocolVersion string
		Capabilities    map[string]json.RawMessage
		ClientInfo      struct{ Name string }
	}
	if err := json.Unmarshal(r.params, &p); len(r.params) > 0 && err != nil {
		return nil, invalidParams("%v", err)
	}
	v := p.ProtocolVersion
	if !slices.Contains(legacyVersions, v) {
		v = latestLegacy // never an error: clients hang up on one
	}
	s := r.s
	s.mu.Lock()
	s.version = v
	s.client = p.ClientInfo.Name
	caps := maps.Clone(s.caps) // a new map: running requests hold the old one
	maps.Copy(caps, p.Capabilities)
	s.caps = caps
	s.mu.Unlock()
	return map[string]any{
		"protocolVersion": v,
		"capabilities":    serverCapabilities,
		"serverInfo":      s.srv.serverInfo(),
		"instructions":    s.srv.served(serverInstructions),
	}, nil
}

var serverCapabilities = map[string]any{"tools": map[string]any{}}

const serverInstructions = `telson gives you a shell (Bash, and BackgroundBash for long-running
processes), web access (ReadDocs reads a page through a real browser; WebSearch asks many
search engines at once) and workflow tools. Tool results may start with notices about
background tasks or reminders; act on them.`

// serverInfo is the Implementation object; clients ignore the fields their version lacks.
func (srv *server) serverInfo() map[string]any {
	return map[string]any{"name": "telson", "version": srv.version, "title": "telson agent tools",
		"description": "Shell, background processes, web reading and search, and workflow tools.",
		"icons":       telsonIcons}
}

// telsonIcons is telson's icon, this SVG in base64:
//
//	<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">
//	<rect width="16" height="16" rx="3" fill="#1f6feb"/>
//	<path d="M4 5h8M8 5v7" stroke="#fff" stroke-width="2" fill="none"/></svg>
var telsonIcons = []map[string]any{{
	"src": "data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIHZp" +
		"ZXdCb3g9IjAgMCAxNiAxNiI+CjxyZWN0IHdpZHRoPSIxNiIgaGVpZ2h0PSIxNiIgcng9IjMiIGZpbGw9IiMxZjZm" +
		"ZWIiLz4KPHBhdGggZD0iTTQgNWg4TTggNXY3IiBzdHJva2U9IiNmZmYiIHN0cm9rZS13aWR0aD0iMiIgZmlsbD0i" +
		"bm9uZSIvPjwvc3ZnPg==",
	"mimeType": "image/svg+xml",
	"sizes":    []string{"any"},
}}

// ---- the 2026-07-28 era: per-request _meta, results, HTTP headers ----

// Keys of the modern era's request and result _meta.
const (
	metaProtocolVersion = "io.modelcontextprotocol/protocolVersion"
	metaClientCaps      = "io.modelcontextprotocol/clientCapabilities"
	metaServerInfo      = "io.modelcontextprotocol/serverInfo"
)

// requestMeta is what telson reads from a request's _meta.
type requestMeta struct {
	ProgressToken json.RawMessage
	Version       string                     `json:"io.modelcontextprotocol/protocolVersion"`
	Caps          map[string]json.RawMessage `json:"io.modelcontextprotocol/clientCapabilities"`
	Client        struct{ Name string }      `json:"io.modelcontextprotocol/clientInfo"`
}

// newRequest reads a request's _meta and settles the era and the version it is served under.
func (s *session) newRequest(m *rpcMessage, out *outbox) (*rpcRequest, *rpcError) {
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
	r := &rpcRequest{s: s, id: m.ID, method: m.Method, params: json.RawMessage(m.Params), out: out,
		progressToken: meta.ProgressToken}
	s.mu.Lock()
	r.version = cmp.Or(out.versionOf(), s.version)
	r.caps = s.caps
	r.client = cmp.Or(meta.Client.Name, s.client)
	s.mu.Unlock()
	switch {
	case meta.Version == versionModern || meta.Version == "" && m.Method == "server/discover":
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
		r.version = latestLegacy // before initialize
	}
	return r, nil
}

func unsupportedVersion(requested string) *rpcError {
	return &rpcError{
		Code:    codeUnsupportedVersion,
		Message: "unsupported protocol version: " + requested,
		Data:    map[string]any{"supported": supportedVersions, "requested": requested},
	}
}

// completeModern adds what a 2026-07-28 result carries: its type, the serverInfo, and a
// list's cache lifetime (the list is asked again after it; no change is announced).
func completeModern(r *rpcRequest, result map[string]any) {
	if strings.HasSuffix(r.method, "/list") {
		result["ttlMs"] = 60000
		result["cacheScope"] = "public"
	}
	if result["resultType"] == nil {
		result["resultType"] = "complete"
	}
	if result["_meta"] == nil { // server/discover's holds the whole serverInfo
		result["_meta"] = map[string]any{
			metaServerInfo: map[string]any{"name": "telson", "version": r.s.srv.version}}
	}
}

func handleDiscover(ctx context.Context, r *rpcRequest) (map[string]any, error) {
	return map[string]any{
		"supportedVersions": supportedVersions,
		"capabilities":      serverCapabilities,
		"instructions":      r.s.srv.served(serverInstructions),
		"ttlMs":             3600000,
		"cacheScope":        "public",
		"_meta":             map[string]any{metaServerInfo: r.s.srv.serverInfo()},
	}, nil
}

// httpPeek is what the HTTP transport reads of a POST's body to check the 2026-07-28 headers.
type httpPeek struct {
	ID     json.RawMessage
	Method string
	Params struct {
		Name string
		Meta requestMeta `json:"_meta"`
	}
}

// checkHeaders says what is wrong with a POST's MCP-Protocol-Version, Mcp-Method and Mcp-Name
// headers (a 2026-07-28 message's must match its body) or with such a message; nil when
// nothing is.
func checkHeaders(hdr http.Header, m *httpPeek) *rpcError {
	version := hdr.Get("MCP-Protocol-Version")
	bodyVersion := m.Params.Meta.Version
	switch {
	case version != "" && !slices.Contains(supportedVersions, version):
		return unsupportedVersion(version)
	case bodyVersion == versionModern && m.ID != nil && m.Params.Meta.Caps == nil:
		return invalidParams("_meta %s is required in %s", metaClientCaps, versionModern)
	}
	if bodyVersion != versionModern && version != versionModern {
		return nil // another supported version than the negotiated one is tolerated
	}
	if bodyVersion == "" && m.Method == "server/discover" {
		bodyVersion = version // discover may come without _meta
	}
	bodyName := "" // the Mcp-Name a tools/call needs
	if m.Method == "tools/call" {
		bodyName = m.Params.Name
	}
	method := hdr.Get("Mcp-Method")
	name := hdr.Get("Mcp-Name")
	if version != bodyVersion || method != m.Method || name != bodyName {
		return newRPCError(codeHeaderMismatch, "header mismatch: MCP-Protocol-Version %q, "+
			"Mcp-Method %q, Mcp-Name %q must match the body's %q, %q, %q",
			version, method, name, bodyVersion, m.Method, bodyName)
	}
	return nil
}

// ---- tools/list and tools/call -----------------------------------------------------

// toolDef is a row of the tool table (see toolTable in main.go).
type toolDef struct {
	name, title string
	description string
	describe    func(s *session) string // builds the description when it depends on settings or state
	input       string                  // JSON Schema of the arguments
	output      string                  // JSON Schema of structuredContent; "" for none
	hints       toolHints
	run         func(ctx context.Context, call *toolCall) toolResult

	// aliases, if set, puts what agents send beside the schema in its terms, before the check.
	aliases func(args map[string]any)
}

// toolHints are the tool annotations.
type toolHints struct{ readOnly, destructive, idempotent, openWorld bool }

// toolEntry is a row of the tool table with its input schema, parsed at the tool's first call
// (start-up parses none), and its output schema with the notices every result may carry.
type toolEntry struct {
	def    *toolDef
	schema func() *jsonSchema
	output json.RawMessage // nil for none
}

// newToolEntry makes d's entry. The table is code, and a test checks every schema: a bad one
// is a panic (-32603) at the tool's first call.
func newToolEntry(d *toolDef) *toolEntry {
	t := &toolEntry{def: d, schema: sync.OnceValue(func() *jsonSchema {
		input, err := parseSchema(d.input)
		if err != nil {
			panic(fmt.Sprintf("tool %s: %v", d.name, err))
		}
		input.aliases = d.aliases
		return input
	})}
	if d.output != "" {
		t.output = json.RawMessage(strings.Replace(d.output, `"properties":{`,
			`"properties":{"notices":`+noticesSchema+`,`, 1))
	}
	return t
}

// desc is the tool's description as it stands now, naming tools as served (describe does
// that itself: the text it adds, such as skills' descriptions, is not telson's).
func (d *toolDef) desc(s *session) string {
	if d.describe != nil {
		return d.describe(s)
	}
	return s.srv.served(d.description)
}

// served is telson's own text with each tool named as it is served: TOOL_PREFIX, then its name.
func (srv *server) served(text string) string {
	return srv.names.Replace(text) // with no TOOL_PREFIX, each name is replaced by itself
}

// tool is the tool served by name.
func (srv *server) tool(name string) *toolEntry {
	name, ok := strings.CutPrefix(name, srv.set.ToolPrefix)
	for _, t := range srv.tools {
		if ok && t.def.name == name {
			return t
		}
	}
	return nil
}

func handleToolsList(ctx context.Context, r *rpcRequest) (map[string]any, error) {
	var p struct {
		Cursor *string
	}
	if err := json.Unmarshal(r.params, &p); len(r.params) > 0 && err != nil {
		return nil, invalidParams("%v", err)
	}
	if p.Cursor != nil { // one page holds every tool, so no cursor was ever handed out
		return nil, invalidParams("bad cursor %q", *p.Cursor)
	}
	tools := []map[string]any{}
	srv := r.s.srv
	for _, t := range srv.tools {
		d := t.def
		listing := map[string]any{"name": srv.set.ToolPrefix + d.name, "title": d.title,
			"description": d.desc(r.s), "inputSchema": json.RawMessage(srv.served(d.input)),
			"icons": telsonIcons,
			"annotations": map[string]any{
				"title":           d.title,
				"readOnlyHint":    d.hints.readOnly,
				"destructiveHint": d.hints.destructive,
				"idempotentHint":  d.hints.idempotent,
				"openWorldHint":   d.hints.openWorld,
			}}
		if t.output != nil {
			listing["outputSchema"] = t.output
		}
		tools = append(tools, listing)
	}
	return map[string]any{"tools": tools}, nil
}

// toolCall is what a tool handler gets; args are already checked against the input schema.
type toolCall struct {
	s    *session
	req  *rpcRequest
	args json.RawMessage
}

// toolResult is what a tool handler returns.
type toolResult struct {
	content       []contentItem
	structured    any // structuredContent, for tools with an output schema
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

func textResult(text string) toolResult { return structuredResult(text, nil) }

// structuredResult is a result whose text and structured content say the same: a client may
// show the model only one of them.
func structuredResult(text string, structured any) toolResult {
	return toolResult{content: []contentItem{{Type: "text", Text: text}}, structured: structured}
}

// maxErrorRunes is the longest error a tool returns: one that quotes a long argument is cut.
const maxErrorRunes = 10000

// errorResult is a failed call; the dispatcher puts the tool's name in front.
func errorResult(format string, a ...any) toolResult {
	r := textResult(cutRunes(fmt.Sprintf(format, a...), maxErrorRunes))
	r.isError = true
	r.named = true
	return r
}

// noticesSchema is the output-schema property every tool's structured content may carry.
const noticesSchema = `{"type":"array","items":{"type":"string"},"description":
	"notices for you: background tasks that ended, reminders that fired; act on them"}`

// handleToolsCall checks the arguments, runs the tool and answers its CallToolResult, with
// the waiting notices first.
func handleToolsCall(ctx context.Context, r *rpcRequest) (map[string]any, error) {
	var p struct {
		Name      string
		Arguments rawJSON
	}
	if err := json.Unmarshal(r.params, &p); err != nil {
		return nil, invalidParams("%v", err)
	}
	t := r.s.srv.tool(p.Name)
	if t == nil {
		return nil, newRPCError(codeInvalidParams, "unknown tool: %q", p.Name)
	}
	in, raw := decodeArguments(p.Arguments, true), p.Arguments
	if in == nil {
		in, raw = map[string]any{}, nil
	}
	args, problem := t.schema().check(in, raw)
	res := errorResult("invalid arguments: %s", problem)
	if problem == "" {
		res = t.def.run(ctx, &toolCall{s: r.s, req: r, args: args})
	}
	if res.inputRequired != nil { // only a modern request's tools ask so
		res.inputRequired["resultType"] = "input_required"
		return res.inputRequired, nil
	}
	content := res.content
	if res.named { // telson's own words, with the arguments it names
		content[0].Text = r.s.srv.served(t.def.name + ": " + content[0].Text)
	}
	text := content[len(content)-1].Text
	notices := r.s.notices.drain()
	r.notices = notices
	if len(notices) > 0 { // a line each; a client may join the items with nothing between
		content = append([]contentItem{{Type: "text", Text: strings.Join(notices, "\n") + "\n"}},
			content...)
	}
	m := map[string]any{"content": content}
	if res.isError {
		m["isError"] = true
	}
	// The notices join the structured content; for a client that shows the model both, a long
	// string the text carries too is replaced by a pointer to it, so the model reads it once.
	both := !r.known().whole
	var obj map[string]any // the structured content as a JSON object
	if len(notices) > 0 || both {
		b, _ := json.Marshal(res.structured) // on failure, Unmarshal fails too
		json.Unmarshal(b, &obj)
	}
	if obj != nil {
		if len(notices) > 0 {
			obj["notices"] = notices
		}
		for k, v := range obj {
			if s, ok := v.(string); ok && both && len(s) > 200 && strings.Contains(text, s) {
				obj[k] = "(in the text)"
			}
		}
		res.structured = obj
	}
	if res.structured != nil && t.output != nil {
		m["structuredContent"] = res.structured
	}
	return m, nil
}

// knownClient is what telson knows of a client, by its clientInfo name: how long it waits for a
// tool call by default, how much of a result it passes on to the model, and whether it shows
// the model the structured content alone (then it keeps its long strings).
type knownClient struct {
	name    string // how its clientInfo name starts
	timeout int    // its default, in seconds; 0 when long or reset by progress
	output  int    // the command output a reply may carry; 0: OUTPUT_LIMIT
	whole   bool
}

// knownClients are the clients whose needs differ from an unknown client's (unknownClient);
// see the README's client tables.
var knownClients = []knownClient{
	// Claude Code moves a longer call to its background.
	{name: "claude-code", timeout: 120, whole: true},
	{name: "codex-mcp-client", timeout: 300, output: 10000, whole: true},
	{name: "Visual Studio Code", whole: true},
	{name: "gemini-cli-mcp-client", timeout: 600},
	{name: "qwen-cli-mcp-client", timeout: 600, output: 24000},
	{name: "opencode"}, // resets its 60 s on progress
	{name: "@cline/core", timeout: 60},
	{name: "Cline", timeout: 60},
	{name: "copilot-cli", timeout: 60},
}

// unknownClient is what telson assumes of a client it does not know: the MCP SDK's request
// timeout, not reset by progress; its structured content whole, since a client or harness that
// reads only the structured content would otherwise lose what it holds.
var unknownClient = knownClient{timeout: 60, whole: true}

// Bash's blocking limit, when BASH_BLOCK_MS is 0: blockDefault, or the client's default
// timeout less clientMargin when that is sooner.
const (
	blockDefault = 240 * time.Second
	clientMargin = 10 * time.Second
)

// known is what telson knows of the request's client, or assumes of an unknown one.
func (r *rpcRequest) known() knownClient {
	for _, k := range knownClients {
		if strings.HasPrefix(r.client, k.name) {
			return k
		}
	}
	return unknownClient
}

// blockLimit is how long Bash waits for a command before handing it to the background.
func (r *rpcRequest) blockLimit() time.Duration {
	if set := r.s.srv.set; set.BashBlock > 0 {
		return set.BashBlock
	}
	if k := r.known(); k.timeout > 0 {
		return min(blockDefault, time.Duration(k.timeout)*time.Second-clientMargin)
	}
	return blockDefault
}

// outputLimit is how much command output a reply carries: OUTPUT_LIMIT, or less for a client
// known to pass on less (else it would cut the reply itself, and what telson says of the cut).
func (r *rpcRequest) outputLimit() int {
	return min(cmp.Or(r.known().output, math.MaxInt), r.s.srv.set.OutputLimit)
}

// jsonSchema is the part of JSON Schema that tool inputs use; check applies it.
type jsonSchema struct {
	Type       string
	Properties map[string]*jsonSchema
	Required   []string
	Items      *jsonSchema
	Enum       []any
	Minimum    *float64
	Maximum    *float64
	MinLength  *float64
	MaxLength  *float64
	MinItems   *float64
	MaxItems   *float64
	aliases    func(args map[string]any) // the tool's, on its arguments object
}

func parseSchema(text string) (*jsonSchema, error) {
	var schema jsonSchema
	if err := json.Unmarshal([]byte(text), &schema); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	if schema.Type != "object" {
		return nil, fmt.Errorf("schema: type is %q, want object", schema.Type)
	}
	return &schema, nil
}

// check returns args (decoded with json.Number) normalized, or what is wrong, naming the
// field. Arguments the schema does not know are dropped; values that convert without loss are
// converted: "5" to 5 for numbers, 5 to "5" for strings, "true" to true for booleans, JSON
// text to the array or object it holds, "A" to {"label":"A"} for an object whose one
// required property is a string. When nothing changed it returns raw, args as they came.
func (schema *jsonSchema) check(args any, raw []byte) (json.RawMessage, string) {
	v, problem := schema.checkValue("arguments", args)
	switch {
	case problem != "":
		return nil, problem
	case raw != nil && schema.aliases == nil && reflect.DeepEqual(v, args): // aliases change args
		return raw, "" // a long argument encoded again would cost three times its size
	}
	normalized, _ := json.Marshal(v) // decoded JSON, converted without loss, encodes
	return normalized, ""
}

// decodeArguments decodes b, one JSON value, numbers as json.Number; nil when b is not one
// (invalid, or followed by more): a string by json.Unmarshal, and with members an object member
// by member, since a json.Decoder first copies what it decodes into a buffer of its own, up to
// twice as large.
func decodeArguments(b []byte, members bool) (v any) {
	var m map[string]rawJSON
	switch {
	case bytes.HasPrefix(b, []byte(`"`)):
		json.Unmarshal(b, &v)
	case members && json.Unmarshal(b, &m) == nil && m != nil:
		obj := map[string]any{}
		for k, raw := range m {
			obj[k] = decodeArguments(raw, false)
		}
		v = obj
	default:
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if dec.Decode(&v) != nil || dec.More() {
			return nil
		}
	}
	return v
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
	case isString && (schema.Type == "array" || schema.Type == "object"):
		if parsed := decodeArguments([]byte(str), false); jsonType(parsed) == schema.Type {
			return parsed
		}
		if schema.Type == "object" && len(schema.Required) == 1 {
			only := schema.Properties[schema.Required[0]]
			if only != nil && only.Type == "string" {
				return map[string]any{schema.Required[0]: str}
			}
		}
	}
	return v
}

// checkValue returns v converted to the schema, or what is wrong with it. An object keeps the
// properties the schema knows, each checked (a "*_json" property, JSON text, also takes the
// JSON itself); an integer is written as one (300.0 and 3e2 are 300, which a Go int takes).
func (schema *jsonSchema) checkValue(path string, v any) (any, string) {
	v = schema.convert(v)
	kind := jsonType(v)
	num, isNumber := v.(json.Number)
	if schema.Type != "" && kind != schema.Type && (!isNumber || schema.Type != "integer") {
		got := withArticle(kind)
		if isNumber {
			got += " (" + num.String() + ")"
		}
		return v, fmt.Sprintf("%s must be %s, got %s", path, withArticle(schema.Type), got)
	}
	problem := ""
	switch schema.Type {
	case "object":
		obj := v.(map[string]any)
		if schema.aliases != nil {
			schema.aliases(obj) // on the object, also when sent as JSON text
		}
		known := map[string]any{}
		for _, name := range schema.Required {
			if obj[name] == nil {
				return v, fmt.Sprintf("%q is required", name)
			}
		}
		for name, prop := range schema.Properties {
			x := obj[name]
			if x == nil {
				continue
			}
			if _, text := x.(string); !text && strings.HasSuffix(name, "_json") {
				b, _ := json.Marshal(x) // a client that parsed the JSON text sends the JSON itself
				x = string(b)
			}
			if known[name], problem = prop.checkValue(strconv.Quote(name), x); problem != "" {
				return v, problem
			}
		}
		v = known
	case "string":
		n := float64(len([]rune(v.(string))))
		problem = checkRange(path, n, schema.MinLength, schema.MaxLength, " characters")
	case "integer", "number":
		f, err := num.Float64()
		isInteger := schema.Type == "integer"
		switch {
		case err != nil || isInteger && math.Abs(f) >= math.MaxInt64: // past float64's, int64's
			return v, fmt.Sprintf("%s: %s is out of range", path, num)
		case isInteger && f != math.Trunc(f):
			return v, fmt.Sprintf("%s must be an integer, got %s", path, num)
		case isInteger && strings.ContainsAny(num.String(), ".eE"):
			v = json.Number(strconv.FormatInt(int64(f), 10))
		}
		problem = checkRange(path, f, schema.Minimum, schema.Maximum, "")
	case "array":
		arr := v.([]any)
		problem = checkRange(path, float64(len(arr)), schema.MinItems, schema.MaxItems, " items")
		if problem != "" || schema.Items == nil {
			break
		}
		for i, x := range arr { // in place: arr is this call's, and unused once wrong
			arr[i], problem = schema.Items.checkValue(fmt.Sprintf("%s[%d]", path, i), x)
			if problem != "" {
				return v, problem
			}
		}
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

// ---- messages to the client ----------------------------------------------------------

// request sends a request to the client on r's outbox and waits for the reply; if ctx ends
// first, it sends notifications/cancelled.
func (r *rpcRequest) request(ctx context.Context, method string, params any) (
	json.RawMessage, error) {
	s := r.s
	ch := make(chan *rpcMessage, 1)
	// An id nobody else can guess: another HTTP client could otherwise answer for this one.
	id := json.RawMessage(`"telson-` + randomHex(12) + `"`)
	s.mu.Lock()
	s.pending[idKey(id)] = ch
	s.mu.Unlock()
	defer s.takePending(idKey(id))
	err := r.out.send(&outMessage{JSONRPC: "2.0", ID: id, Method: method, Params: params})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select { // the wait for the client holds no slot of the session's
	case <-s.slots:
		defer func() { s.slots <- struct{}{} }()
	default: // not called from a request
	}
	var m *rpcMessage
	select {
	case m = <-ch:
	case <-ctx.Done():
	case <-s.inputEnd:
	}
	switch {
	case m == nil && ctx.Err() == nil:
		return nil, fmt.Errorf("%s: the client's input ended", method)
	case m == nil:
		r.out.send(notification("notifications/cancelled",
			map[string]any{"requestId": id, "reason": ctx.Err().Error()}))
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	case m.Error != nil:
		return nil, fmt.Errorf("%s: client answered %d %s", method, m.Error.Code, m.Error.Message)
	}
	return m.Result, nil
}

// takePending removes and returns the channel a server request awaits its reply on.
func (s *session) takePending(key string) chan *rpcMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.pending[key]
	delete(s.pending, key)
	return ch
}

// routeResponse hands a client's reply to the server request waiting for it.
func (s *session) routeResponse(m *rpcMessage) {
	if ch := s.takePending(idKey(m.ID)); ch != nil {
		ch <- m
		return
	}
	s.srv.log.Debug("reply to an unknown request ignored", "id", string(m.ID))
}

// progress sends notifications/progress with message when the request asked for progress; the
// count grows with every notification, in the order they are queued.
func (r *rpcRequest) progress(message string) {
	if len(r.progressToken) == 0 {
		return
	}
	r.progressMu.Lock() // held across the queueing: that keeps the counts in order
	defer r.progressMu.Unlock()
	r.progressCount++
	r.out.send(notification("notifications/progress", map[string]any{
		"progressToken": r.progressToken, "progress": r.progressCount, "message": message}))
}

// keepAlive sends progress every PROGRESS_INTERVAL_MS, when the request asked for progress,
// until it takes from stop, even when the request has nothing new to say: a client that resets
// its timeout on progress then waits as long as the request runs.
func (r *rpcRequest) keepAlive(stop <-chan struct{}) {
	start := time.Now()
	tick := time.NewTicker(r.s.srv.set.ProgressInterval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			r.progress(fmt.Sprintf("still working, %s so far", time.Since(start).Round(time.Second)))
		}
	}
}

// noticeQueue holds one-line notices for the agent until the next tool result carries them,
// each once.
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

// remove forgets a waiting notice.
func (q *noticeQueue) remove(line string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lines = slices.DeleteFunc(q.lines, func(l string) bool { return l == line })
}

// putBack queues lines, drained for a reply that was not sent, before the waiting ones.
func (q *noticeQueue) putBack(lines []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lines = append(slices.Clone(lines), q.lines...)
	q.lines = q.lines[max(0, len(q.lines)-maxNotices):]
}

// drain returns the waiting notices and forgets them.
func (q *noticeQueue) drain() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	lines := q.lines
	q.lines = nil
	return lines
}

// ---- transports: stdio ---------------------------------------------------------------

// shutdownGrace is how long requests get to answer once shutdown cancelled them, and how long
// a client that stopped reading can hold telson's exit.
const shutdownGrace = 3 * time.Second

// serveStdio serves one session on stdin and stdout. At stdin EOF running requests finish and
// answer; when ctx ends they are cancelled. Then what the session started is stopped.
func serveStdio(ctx context.Context, srv *server, stdin io.Reader, stdout io.Writer) error {
	out := newOutbox(true)
	stop := make(chan struct{})
	go out.writeLines(stdout, stop) // exits once stopped and drained, or at a write error
	s := newSession(srv, out)
	go s.serve(ctx, stdin) // exits at EOF or a read error; at shutdown it stays blocked on stdin
	select {
	case <-s.inputEnd:
	case <-ctx.Done():
	}
	answered := make(chan struct{})
	go func() { // exits when every request has answered
		s.wg.Wait()
		close(answered)
	}()
	select {
	case <-answered:
	case <-ctx.Done():
		s.cancelAll()
		select {
		case <-answered:
		case <-time.After(shutdownGrace):
			srv.log.Warn("requests still running at shutdown")
		}
	}
	s.close()
	close(stop)
	select {
	case <-out.done:
	case <-time.After(shutdownGrace):
	}
	return nil
}

// ---- transports: Streamable HTTP ------------------------------------------------------
//
// One HTTP server serves one agent's state, as one session: a POST is answered with JSON,
// or with an event stream once a message about its request (progress, a question for the
// user) comes first; the client's answer to such a question arrives as a new POST and
// finds the waiting request by id. There are no Mcp-Session-Id sessions and no GET stream:
// notices ride on the next tool result.

// httpTokenFile holds, in STATE_DIR, the bearer token made when HTTP_TOKEN is not set.
const httpTokenFile = "http-token"

// minTokenLength is the shortest token a token file may hold.
const minTokenLength = 16

// serveHTTP serves MCP at addr until ctx ends, then gives requests shutdownGrace.
func serveHTTP(ctx context.Context, srv *server, addr string, stderr io.Writer) error {
	addr = httpAddr(addr)
	token, err := httpToken(srv.set)
	if err != nil {
		return fmt.Errorf("http: token: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	h, hs := newHTTPHandler(srv, ln, addr, token)
	defer h.s.close() // after the shutdown below
	fmt.Fprint(stderr, httpBanner(srv.set, token, ln.Addr().String()))
	served := make(chan error, 1)
	go func() { // exits when the server is shut down or closed
		served <- hs.Serve(h.limiter)
	}()
	select {
	case err := <-served:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	grace, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(grace); err != nil {
		srv.log.Warn("http: requests still running at shutdown are stopped")
		hs.Close()
	}
	return nil
}

// httpAddr is the address -http names: a bare port or :port is on 127.0.0.1.
func httpAddr(addr string) string {
	if !strings.Contains(addr, ":") || strings.HasPrefix(addr, ":") {
		return "127.0.0.1:" + strings.TrimPrefix(addr, ":")
	}
	return addr
}

// newHTTPHandler is the handler of one HTTP server, hs: one session, the gate's settings, the
// connection limiter over ln.
func newHTTPHandler(srv *server, ln net.Listener, addr, token string) (*httpHandler,
	*http.Server) {
	host, _, _ := net.SplitHostPort(addr) // net.Listen took it
	limiter := &connLimiter{Listener: ln, max: srv.set.HTTPMaxConns,
		conns: map[string]*trackedConn{}}
	h := &httpHandler{s: newSession(srv, nil), set: srv.set, host: host, token: token,
		limiter: limiter}
	return h, &http.Server{Handler: h, ReadTimeout: srv.set.HTTPTimeout,
		IdleTimeout: srv.set.HTTPTimeout, ConnState: limiter.track}
}

// httpBanner is what telson says on stderr when it serves HTTP: the header every request must
// carry, and where.
func httpBanner(set *settings, token, addr string) string {
	file := filepath.Join(set.StateDir, httpTokenFile)
	warning := ""
	if set.HTTPToken == "" && readableByOthers(file) {
		warning = "telson: warning: others can read " + file + ", and with it run commands as " +
			"you: chmod 600 it\n"
	}
	return fmt.Sprintf("telson: every request must carry the header \"Authorization: Bearer %s\" "+
		"(HTTP_TOKEN sets it; else it is kept in %s)\n%stelson: serving MCP on http://%s/mcp\n",
		token, file, warning, addr)
}

// httpToken is the bearer token every HTTP request must carry, of minTokenLength characters
// or more: HTTP_TOKEN, else the one kept in STATE_DIR/http-token, made (random, mode 0600) the
// first time.
func httpToken(set *settings) (string, error) {
	b, path := []byte(set.HTTPToken), "HTTP_TOKEN"
	st := set.state()
	var err error
	if set.HTTPToken == "" {
		path = filepath.Join(st.path, httpTokenFile)
		b, err = readState(st, path, 1024)
	}
	if errors.Is(err, os.ErrNotExist) {
		err = writeState(st, httpTokenFile, []byte(randomHex(24)+"\n"), false)
		if err == nil || errors.Is(err, os.ErrExist) { // made here, or by another telson
			b, err = readState(st, path, 1024)
		}
	}
	token := strings.TrimSpace(string(b))
	if err == nil && len(token) < minTokenLength {
		err = fmt.Errorf("%s holds no token of %d characters or more", path, minTokenLength)
	}
	return token, err
}

// httpHandler serves /mcp. Every request first passes the gate: Host (DNS rebinding), Origin,
// the bearer token, the path, the method and the content type.
type httpHandler struct {
	s       *session
	set     *settings
	host    string // the listening address's host
	token   string // the bearer token every request must carry
	limiter *connLimiter
}

// ServeHTTP answers with an error unless r passes the gate, then serves it.
func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	status, why := h.gate(r)
	switch status {
	case 0:
		h.post(w, r)
		return
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="telson"`)
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", http.MethodPost)
	}
	httpError(w, status, "%s", why)
}

// gate says why r may not be served, as a status and a message; 0 when it may: a Host of
// this machine's, no Origin but a loopback one, the bearer token, a POST of JSON to /mcp.
func (h *httpHandler) gate(r *http.Request) (int, string) {
	origin := r.Header.Get("Origin")
	got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case !h.hostAllowed(r.Host):
		return http.StatusForbidden, fmt.Sprintf("forbidden: Host %q is not allowed "+
			"(DNS rebinding protection; see HTTP_HOSTS)", r.Host)
	case origin != "" && !originLoopback(origin):
		return http.StatusForbidden, fmt.Sprintf("forbidden: Origin %q is not a loopback one",
			origin)
	case !bearer || subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1:
		return http.StatusUnauthorized, "unauthorized: send the header Authorization: Bearer " +
			"<token>, the token telson printed at start (HTTP_TOKEN, or STATE_DIR/http-token)"
	case r.URL.Path == "/sse":
		return http.StatusNotFound, fmt.Sprintf("not found: telson serves Streamable HTTP at "+
			"/mcp, not the old HTTP+SSE transport at /sse; in Gemini CLI set \"httpUrl\" (not "+
			"\"url\") to http://%s/mcp, or run: gemini mcp add --transport http telson "+
			"http://%s/mcp", r.Host, r.Host)
	case r.URL.Path != "/mcp":
		return http.StatusNotFound, fmt.Sprintf("not found: %s (the MCP endpoint is /mcp)",
			r.URL.Path)
	case r.Method != http.MethodPost:
		return http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed: telson "+
			"takes POST only (it opens no GET stream; notices ride on tool results)", r.Method)
	case mediaType != "application/json":
		return http.StatusUnsupportedMediaType, "unsupported media type: a POST to /mcp " +
			"carries Content-Type: application/json"
	}
	return 0, ""
}

// hostAllowed: a loopback name, the listening address, one in HTTP_HOSTS, or any IP literal
// when telson listens on every interface.
func (h *httpHandler) hostAllowed(host string) bool {
	if name, _, err := net.SplitHostPort(host); err == nil {
		host = name
	}
	host = strings.Trim(host, "[]")
	allowed := func(a string) bool { return strings.EqualFold(a, host) }
	return isLoopbackHost(host) || allowed(h.host) || slices.ContainsFunc(h.set.HTTPHosts, allowed) ||
		net.ParseIP(h.host).IsUnspecified() && net.ParseIP(host) != nil
}

// originLoopback: an http(s) Origin on this machine. A page of another origin could not
// send the token anyway: telson answers no CORS preflight.
func originLoopback(origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && isLoopbackHost(u.Hostname())
}

func isLoopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback()
}

// httpError answers status with a JSON-RPC error saying why.
func httpError(w http.ResponseWriter, status int, format string, a ...any) {
	writeJSON(w, status, errorMessage(nil, newRPCError(codeInvalidRequest, format, a...)))
}

func writeJSON(w http.ResponseWriter, status int, msg any) {
	b, _ := encode(msg) // telson's own messages encode
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// writeStatus answers status with no body.
func writeStatus(w http.ResponseWriter, status int) { w.WriteHeader(status) }

// readBody reads r's body, at most max bytes; a longer one fails with *http.MaxBytesError.
func readBody(w http.ResponseWriter, r *http.Request, max int) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, int64(max)))
}

// post serves POST /mcp: the body is handed to the session, and this handler writes what
// comes back about it. A dropped connection cancels a 2026-07-28 request, not a
// legacy request (notifications/cancelled does).
func (h *httpHandler) post(w http.ResponseWriter, r *http.Request) {
	if !h.limiter.showed(r.RemoteAddr) {
		return // closed: more connections than HTTP_MAX_CONNECTIONS have shown the token
	}
	body, err := readBody(w, r, h.set.HTTPMaxBody)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		httpError(w, http.StatusRequestEntityTooLarge,
			"invalid request: body longer than %d bytes (HTTP_MAX_BODY_BYTES)", h.set.HTTPMaxBody)
		return
	}
	var m httpPeek
	peekErr := json.Unmarshal(body, &m) // a batch peeks as nothing
	var syntax *json.SyntaxError
	if err != nil || errors.As(peekErr, &syntax) {
		writeJSON(w, http.StatusBadRequest, errorMessage(nil,
			newRPCError(codeParseError, "parse error: the body is not one JSON value")))
		return
	}
	h.limiter.serving(r.RemoteAddr)
	if e := checkHeaders(r.Header, &m); e != nil {
		writeJSON(w, http.StatusBadRequest, errorMessage(nil, e))
		return
	}
	modern := m.Params.Meta.Version == versionModern
	ctx := r.Context()
	if !modern {
		ctx = context.WithoutCancel(ctx)
	}
	out := newOutbox(strings.Contains(r.Header.Get("Accept"), "text/event-stream"))
	out.version = r.Header.Get("MCP-Protocol-Version") // this client's, whatever another's is
	defer close(out.done)
	replies := make(chan any, 1)
	h.s.handleLine(ctx, body, false, out, func(msg any) error {
		replies <- msg
		return nil
	})
	sse := false
	for {
		select {
		case b := <-out.queue:
			writeEvent(w, b, sse)
			sse = true
		case reply := <-replies:
			for len(out.queue) > 0 { // what was sent before the reply goes first
				writeEvent(w, <-out.queue, sse)
				sse = true
			}
			switch {
			case sse && reply != nil:
				b, _ := encode(reply)
				writeEvent(w, b, sse)
			case sse:
			case reply == nil:
				writeStatus(w, http.StatusAccepted)
			default:
				writeJSON(w, replyStatus(reply, modern), reply)
			}
			return
		case <-r.Context().Done():
			return
		}
	}
}

// replyStatus is a POST reply's HTTP status: an error without id is 400; in 2026-07-28, an
// unknown method is 404 and an invalid request or version 400; everything else 200.
func replyStatus(reply any, modern bool) int {
	m, ok := reply.(*outMessage)
	if !ok || m.Error == nil {
		return http.StatusOK
	}
	switch code := m.Error.Code; {
	case modern && code == codeMethodNotFound:
		return http.StatusNotFound
	case string(m.ID) == "null" ||
		modern && (code == codeInvalidRequest || code == codeUnsupportedVersion):
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// writeEvent writes one message as an event, starting the event stream when started is
// false, and flushes it.
func writeEvent(w http.ResponseWriter, data []byte, started bool) {
	if !started {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Accel-Buffering", "no")
	}
	fmt.Fprintf(w, "event: message\ndata: %s\n\n", bytes.TrimRight(data, "\n"))
	http.NewResponseController(w).Flush()
}

// connLimiter holds at most max connections that have shown the token (sent a request head
// with it), and as many again that have not. A newcomer at that cap takes the place of the
// oldest connection that has not shown the token; a connection that shows it beyond max takes
// the place of the oldest that has, or is closed when each of those is being served. So a
// flood without the token (or with it in headers that never end) never sheds a client that
// has shown it, nor keeps a newcomer out; a connection whose request arrived whole is never
// shed.
type connLimiter struct {
	net.Listener
	max int

	mu    sync.Mutex              // guards conns and each one's fields
	conns map[string]*trackedConn // by remote address, as net/http names it
}

type trackedConn struct {
	net.Conn
	addr    string    // its remote address, as net/http names it
	waiting time.Time // since when it has been sending a request, or idle
	serving bool      // its request arrived whole and is being answered
	shown   bool      // it sent a request head with the token
}

// Accept returns the next connection admit takes, closing those it sheds or refuses.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: conn, addr: conn.RemoteAddr().String(), waiting: time.Now()}
		shed, room := l.admit(tc)
		if shed != nil {
			shed.Close()
		}
		if room {
			return tc, nil
		}
		conn.Close()
	}
}

// admit takes tc when there is room, or makes room by shedding the oldest connection that has
// not shown the token; shed is the one to close, nil for none.
func (l *connLimiter) admit(tc *trackedConn) (shed *trackedConn, room bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= 2*l.max {
		shed, _ = l.oldestWaiting(nil, false)
	}
	if shed != nil {
		delete(l.conns, shed.addr)
	}
	room = len(l.conns) < 2*l.max
	if room {
		l.conns[tc.addr] = tc
	}
	return shed, room
}

// showed marks the connection at addr as one that has shown the token, and reports whether it
// stays (see show), closing the one it sheds.
func (l *connLimiter) showed(addr string) bool {
	shed, stays := l.show(addr)
	if shed != nil {
		shed.Close()
	}
	return stays
}

// show marks the connection at addr as one that has shown the token: beyond max of them, the
// oldest of the others not being served is to be shed, or else it; stays says whether it is
// not, and was not shed already.
func (l *connLimiter) show(addr string) (shed *trackedConn, stays bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.conns[addr]
	if c == nil {
		return nil, false
	}
	c.shown = true
	if oldest, n := l.oldestWaiting(c, true); n > l.max {
		shed = cmp.Or(oldest, c)
		delete(l.conns, shed.addr)
	}
	return shed, shed != c
}

// oldestWaiting is the connection but except, not being served, that has waited longest among
// those that have shown the token (shown) or not, nil when there is none; n is how many have
// (or have not). l.mu must be held.
func (l *connLimiter) oldestWaiting(except *trackedConn, shown bool) (
	oldest *trackedConn, n int) {
	for _, c := range l.conns {
		if c.shown != shown {
			continue
		}
		n++
		if c != except && !c.serving && (oldest == nil || c.waiting.Before(oldest.waiting)) {
			oldest = c
		}
	}
	return oldest, n
}

// track follows net/http's view of a connection Accept gave it: idle between requests, or gone.
func (l *connLimiter) track(conn net.Conn, state http.ConnState) {
	tc := conn.(*trackedConn) // Accept made every connection the server has
	l.mu.Lock()
	defer l.mu.Unlock()
	switch c := l.conns[tc.addr]; {
	case c != tc:
	case state == http.StateIdle:
		c.serving = false
		c.waiting = time.Now()
	case state == http.StateClosed || state == http.StateHijacked:
		delete(l.conns, tc.addr)
	}
}

// serving marks the connection at addr as one whose request has arrived whole.
func (l *connLimiter) serving(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.conns[addr]; c != nil {
		c.serving = true
	}
}
