// tools_ui.go holds the two tools that cross the line between the agent and
// the person: ReadImage shows the model an image file, AskUserQuestion asks
// the person multiple-choice questions.
//
// Rules:
//   - ReadImage reads a regular file of at most imageMaxFile through
//     readCapped (never blocking on a fifo) and takes the type from the
//     bytes: PNG, JPEG and GIF, which the standard library decodes. An image
//     is decoded if its header gives at most imageMaxPixels (and a JPEG has at
//     most jpegMaxScans scans), and sent only if it decodes: as it is within
//     the limits, else shrunk with a box filter whose memory is the output's.
//   - AskUserQuestion and PlanMode's approval ask through elicit: a server
//     request in the legacy era, an input-required result in the 2026-07-28
//     era. A client without elicitation gets the questions back to ask in
//     chat (so does a multiple choice before 2025-11-25, which has no form
//     for it): a normal result, since nothing failed. Declined and
//     dismissed are answers of their own, never an empty answer.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // registers GIF with image.Decode
	"image/jpeg"
	"image/png"
	"net/http"
	"strings"
)

var readImageTool = toolDef{
	name:  "ReadImage",
	title: "Show an image file",
	describe: func(s *session) string {
		return fmt.Sprintf(s.srv.served(
			`Shows you an image file: PNG, JPEG or GIF (told by its bytes).

- Relative paths resolve against Bash's working directory.
- Images larger than %d px on the long edge or %s are scaled down and re-encoded
  (JPEG, or PNG with transparency; a GIF keeps its first frame).
- Refused, with the reason: a file cut short or that does not decode; an image over
  %.1f megapixels; other formats (WebP, BMP: convert them in Bash first).

Example: {"file_path": "screenshots/home.png"}`),
			s.srv.set.ImageMaxEdge, humanBytes(s.srv.set.ImageMaxBytes), imageMaxPixels/1e6)
	},
	input: `{"type":"object","required":["file_path"],"properties":{"file_path":{
		"type":"string","minLength":1,
		"description":"The image file, absolute or relative to Bash's working directory."}}}`,
	hints: toolHints{readOnly: true, idempotent: true},
	run:   runReadImage,
}

// What ReadImage reads and decodes. What it sends is bounded by IMAGE_MAX_BYTES, which the
// settings cap at 6 MB: in base64 (8 MB) that stays under the 10 MiB message cap.
const (
	imageMaxFile = 40_000_000 // bytes read
	// imageMaxPixels caps width × height, read from the header, before decoding
	// (4096×2048 and 4K UHD fit). Go's costliest image, a progressive CMYK JPEG,
	// holds 24 bytes a pixel while decoding: about 200 MB, so that with the file
	// telson stays under 300 MB.
	imageMaxPixels = 8_400_000
	// jpegMaxScans caps a JPEG's start-of-scan markers: Go decodes each scan
	// over the whole image, 3 ms at the cap, so a file repeating scans burns
	// CPU for as long as its size allows. A progressive JPEG has about 10.
	jpegMaxScans = 100
)

func runReadImage(ctx context.Context, c *toolCall) toolResult {
	var a struct {
		FilePath string `json:"file_path"`
	}
	json.Unmarshal(c.args, &a)
	path := c.s.shell.resolve(a.FilePath)
	data, err := readCapped(path, imageMaxFile)
	if err != nil {
		return errorResult("%v", err)
	}
	mime := http.DetectContentType(data)
	w, h, img, err := decodeImage(mime, data)
	if err != nil {
		return errorResult("%s: %s; %v", path, mime, err)
	}
	edge := c.s.srv.set.ImageMaxEdge
	maxBytes := c.s.srv.set.ImageMaxBytes
	info := fmt.Sprintf("%s: %s, %d×%d px, %s", path, mime, w, h, humanBytes(len(data)))
	text := info + ", sent as is."
	if len(data) > maxBytes || max(w, h) > edge {
		var out image.Rectangle
		data, mime, out = shrinkImage(img, edge, maxBytes)
		text = fmt.Sprintf("%s; scaled to %d×%d and re-encoded as %s (%s) to fit the limits "+
			"(%d px long edge, %s).", info, out.Dx(), out.Dy(), mime, humanBytes(len(data)), edge,
			humanBytes(maxBytes))
	}
	return toolResult{content: []contentItem{{Type: "image",
		Data: base64.StdEncoding.EncodeToString(data), MimeType: mime}, {Type: "text", Text: text}}}
}

// decodeImage reads an image's size from its header and, when it has at most
// imageMaxPixels, decodes it: an image is sent only if it decodes.
func decodeImage(mime string, data []byte) (w, h int, img image.Image, err error) {
	switch mime {
	case "image/png", "image/jpeg", "image/gif":
	default:
		return 0, 0, nil, errors.New("ReadImage shows PNG, JPEG and GIF; convert another " +
			"format in Bash first (for a WebP: dwebp IN -o OUT.png, or ffmpeg -i IN OUT.png)")
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	scans := bytes.Count(data, []byte{0xff, 0xda}) // in a JPEG markers only: its data escapes 0xff
	switch {
	case err != nil:
	case cfg.Width*cfg.Height > imageMaxPixels:
		return 0, 0, nil, fmt.Errorf("%d×%d px is over the %.1f megapixels telson decodes: "+
			"shrink it in Bash first", cfg.Width, cfg.Height, imageMaxPixels/1e6)
	case mime == "image/jpeg" && scans > jpegMaxScans:
		return 0, 0, nil, fmt.Errorf("it has %d scans, over the %d telson decodes: "+
			"re-encode it in Bash first", scans, jpegMaxScans)
	default:
		img, _, err = image.Decode(bytes.NewReader(data))
	}
	if err == nil && img.Bounds().Empty() { // a GIF's first frame, or a JPEG 0 px wide
		err = errors.New("it has no pixels")
	}
	if err != nil {
		err = fmt.Errorf("the file is cut short or damaged: %w", err)
	}
	return cfg.Width, cfg.Height, img, err
}

// shrinkImage fits img within edge px and maxBytes as JPEG (quality 85), or PNG
// when the scaled image has transparency, shrinking by 0.7 again while too many bytes. The
// loop ends: a 1×1 image fits the 1 KB floor the settings put under IMAGE_MAX_BYTES.
func shrinkImage(img image.Image, edge, maxBytes int) ([]byte, string, image.Rectangle) {
	b := img.Bounds()
	for scale := min(1, float64(edge)/float64(max(b.Dx(), b.Dy()))); ; scale *= 0.7 {
		small := boxScale(img, scale)
		var buf bytes.Buffer // encoding an RGBA image into it cannot fail
		mime := "image/png"
		if small.Opaque() {
			mime = "image/jpeg"
			jpeg.Encode(&buf, small, &jpeg.Options{Quality: 85})
		} else {
			png.Encode(&buf, small)
		}
		if buf.Len() <= maxBytes {
			return buf.Bytes(), mime, small.Rect
		}
	}
}

// boxScale shrinks img by scale (at most 1): each output pixel averages, in
// premultiplied colour, the block of source pixels mapped to it. It reads the
// pixels one by one, so its memory is the output's.
func boxScale(img image.Image, scale float64) *image.RGBA {
	src := img.(image.RGBA64Image) // as every image the standard decoders return is
	b := img.Bounds()
	w := b.Dx()
	h := b.Dy()
	dw := max(1, int(float64(w)*scale+0.5))
	dh := max(1, int(float64(h)*scale+0.5))
	out := image.NewRGBA(image.Rect(0, 0, dw, dh))
	pix := out.Pix[:0] // filled in order
	for oy := range dh {
		for ox := range dw {
			var sum [4]uint64 // R, G, B, A
			n := uint64(0)    // the block's pixels, times 257: 16-bit sums to 8-bit averages
			for y := oy * h / dh; y < (oy+1)*h/dh; y++ {
				for x := ox * w / dw; x < (ox+1)*w/dw; x++ {
					c := src.RGBA64At(b.Min.X+x, b.Min.Y+y)
					for i, v := range [...]uint16{c.R, c.G, c.B, c.A} {
						sum[i] += uint64(v)
					}
					n += 257
				}
			}
			for _, v := range sum {
				pix = append(pix, uint8((v+n/2)/n))
			}
		}
	}
	return out
}

func humanBytes(n int) string {
	if n >= 1e6 {
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f KB", float64(n)/1e3)
}

// askShape is the questions argument as Claude Code's AskUserQuestion takes it.
const askShape = `[{"question":"Which database?","header":"Database","options":[` +
	`{"label":"PostgreSQL","description":"a server"},` +
	`{"label":"SQLite","description":"one file"}],"multiSelect":false}]`

var askUserQuestionTool = toolDef{
	name:  "AskUserQuestion",
	title: "Ask the user questions",
	description: `Asks the user 1 to 4 multiple-choice questions and waits for the answers.

- questions: ` + askShape + `
  Options may be plain strings: "options":["A","B"].
- Or questions_json, the same as JSON text; it also takes {"questions": [...]} and one
  question alone.
- 2 to 10 options per question; multiSelect lets the user pick several. The user can add
  a free-text note, so do not add an "Other" option.
- The answer reads: User has answered your questions: "Which database?"="PostgreSQL".
  If the user declines or dismisses, or the client cannot show questions (status
  ask_in_chat), do not assume an answer.`,
	input: `{"type":"object","properties":{
		"questions":{"type":"array","minItems":1,"maxItems":4,
			"description":"The questions, in Claude Code's shape.","items":{"type":"object",
			"required":["options"],"properties":{"question":{"type":"string"},
			"text":{"type":"string","description":"Another name for question."},
			"header":{"type":"string"},"multiSelect":{"type":"boolean"},
			"multi_select":{"type":"boolean","description":"Another name for multiSelect."},
			"options":{"type":"array",
			"items":{"type":"object","required":["label"],"properties":{"label":{"type":"string"},
			"description":{"type":"string"}}}}}}},
		"questions_json":{"type":"string","maxLength":100000,
			"description":"The questions as JSON text, if not given as questions."}}}`,
	output: `{"type":"object","required":["status","message","answers"],"properties":{
		"status":{"type":"string","enum":["answered","declined","dismissed","ask_in_chat"]},
		"message":{"type":"string","description":"what happened and what to do next"},
		"answers":{"type":"array","items":{"type":"object","required":["question","selected"],
			"properties":{"question":{"type":"string"},"selected":{"type":["string","array","null"],
			"items":{"type":"string"},
			"description":"the label, labels when multiSelect, null unanswered"}}}},
		"note":{"type":"string","description":"the user's free-text note"},
		"questions":{"type":"array","description":"ask_in_chat: the questions to ask in chat",
			"items":{"type":"object","properties":{"question":{"type":"string"}}}}}}`,
	hints: toolHints{readOnly: true},
	run:   runAskUserQuestion,
}

// askQuestion is one question in Claude Code's shape; parseQuestions moves
// the other names models use (text, multi_select) to it.
type askQuestion struct {
	Question         string      `json:"question"`
	Text             string      `json:"text,omitempty"`
	Header           string      `json:"header,omitempty"`
	Options          []askOption `json:"options"`
	MultiSelect      bool        `json:"multiSelect"`
	MultiSelectSnake bool        `json:"multi_select,omitempty"`
}

type askOption struct {
	Label       string `json:"label"`
	Description string `json:"description,omitempty"`
}

// UnmarshalJSON takes an option as an object or a string, its label.
func (o *askOption) UnmarshalJSON(b []byte) error {
	if b[0] == '"' {
		return json.Unmarshal(b, &o.Label)
	}
	type plain askOption
	return json.Unmarshal(b, (*plain)(o))
}

// title is the option as a form shows it.
func (o askOption) title() string {
	if o.Description == "" {
		return o.Label
	}
	return o.Label + " — " + o.Description
}

func runAskUserQuestion(ctx context.Context, c *toolCall) toolResult {
	var a struct {
		Questions     json.RawMessage
		QuestionsJSON json.RawMessage `json:"questions_json"`
	}
	json.Unmarshal(c.args, &a)
	if a.Questions == nil {
		a.Questions = a.QuestionsJSON
	}
	qs, err := parseQuestions(a.Questions)
	if err != nil {
		return errorResult("%v; for example: %s", err, askShape)
	}
	params := elicitParams(qs, c.req)
	if params == nil {
		return askInChat(qs, "This client cannot show these questions to the user as a form.")
	}
	raw, ask, err := elicit(ctx, c, "ask", params)
	switch {
	case ask != nil:
		return toolResult{inputRequired: ask}
	case err != nil:
		return askInChat(qs, fmt.Sprintf("The client could not show the questions, "+
			"or the user did not answer within %s (%v).", c.s.srv.set.AskTimeout, err))
	}
	return askAnswer(qs, raw)
}

// canElicit reports whether the client declared elicitation in a version that
// has it. A client that declared URL mode only answers a form with an error.
func canElicit(r *rpcRequest) bool {
	_, declared := r.caps["elicitation"]
	return declared && r.version >= version20250618
}

// elicit shows the user a form under key: in the legacy era as a server
// request, whose reply is the answer, waited for ASK_TIMEOUT_MS at most; in the 2026-07-28
// era as an input-required result (ask), and the answer comes with the retried call.
func elicit(ctx context.Context, c *toolCall, key string, params any) (
	answer json.RawMessage, ask map[string]any, err error) {
	if !c.req.modern {
		ctx, cancel := context.WithTimeout(ctx, c.s.srv.set.AskTimeout)
		defer cancel()
		answer, err = c.req.request(ctx, "elicitation/create", params)
		return answer, nil, err
	}
	var p struct {
		InputResponses map[string]json.RawMessage
	}
	json.Unmarshal(c.req.params, &p)
	answer = p.InputResponses[key]
	if answer == nil {
		form := map[string]any{"method": "elicitation/create", "params": params}
		ask = map[string]any{"requestState": key, "inputRequests": map[string]any{key: form}}
	}
	return answer, ask, nil
}

// parseQuestions reads the questions in every shape models send for them:
// {"questions":[...]}, a bare array, or one question alone; also as JSON text
// in a string (questions_json), even encoded twice. It checks them.
func parseQuestions(raw []byte) ([]askQuestion, error) {
	var text string
	for len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &text) == nil {
		raw = bytes.TrimSpace([]byte(text))
	}
	var in struct {
		Questions   []askQuestion
		askQuestion // one question alone
	}
	target := any(&in)
	if bytes.HasPrefix(raw, []byte("[")) {
		target = &in.Questions
	}
	if err := json.Unmarshal(raw, target); err != nil {
		return nil, fmt.Errorf("questions: %w", err)
	}
	qs := in.Questions
	if qs == nil {
		qs = []askQuestion{in.askQuestion}
	}
	if len(qs) < 1 || len(qs) > 4 {
		return nil, fmt.Errorf("%d questions; ask 1 to 4 at a time", len(qs))
	}
	for i := range qs {
		q := &qs[i]
		q.Question = strings.TrimSpace(cmp.Or(q.Question, q.Text))
		q.MultiSelect = q.MultiSelect || q.MultiSelectSnake
		q.Text = ""
		q.MultiSelectSnake = false
		if q.Question == "" {
			return nil, fmt.Errorf(`questions[%d] has no "question"`, i)
		}
		if len(q.Options) < 2 || len(q.Options) > 10 {
			return nil, fmt.Errorf("questions[%d] has %d options; give 2 to 10", i, len(q.Options))
		}
		for j, o := range q.Options {
			if strings.TrimSpace(o.Label) == "" {
				return nil, fmt.Errorf("questions[%d].options[%d] has no label", i, j)
			}
		}
	}
	return qs, nil
}

// askRemark is the form's free-text field, after the questions.
const askRemark = `{"type":"string","title":"Anything to add? (optional)",
	"description":"Free text for the agent, such as an answer that is not among the options."}`

// elicitParams is the elicitation/create form, or nil when the client cannot show it: a
// field per question, q1 to q4, and a free-text remark. encoding/json sorts the keys, so the
// form shows the questions in order and the remark last. A single choice is an enum with
// enumNames before 2025-11-25, then oneOf; a multiple choice is an array, and has no form
// before 2025-11-25.
func elicitParams(qs []askQuestion, r *rpcRequest) map[string]any {
	if !canElicit(r) {
		return nil
	}
	newer := r.version >= version20251125
	msg := "The agent asks:"
	var required []string
	props := map[string]any{"remark": json.RawMessage(askRemark)}
	for i, q := range qs {
		var labels, titles []string
		var choices []map[string]string
		for _, o := range q.Options {
			labels = append(labels, o.Label)
			titles = append(titles, o.title())
			choices = append(choices, map[string]string{"const": o.Label, "title": o.title()})
		}
		field := map[string]any{"type": "string", "title": q.Question, "description": q.Header}
		switch {
		case q.MultiSelect && !newer:
			return nil
		case q.MultiSelect:
			field["type"] = "array"
			field["minItems"] = 1
			field["items"] = map[string]any{"anyOf": choices}
		case newer:
			field["oneOf"] = choices
		default:
			field["enum"] = labels
			field["enumNames"] = titles
		}
		key := fmt.Sprintf("q%d", i+1)
		props[key] = field
		required = append(required, key)
		msg += "\n" + q.Question
	}
	schema := map[string]any{"type": "object", "required": required, "properties": props}
	p := map[string]any{"message": msg, "requestedSchema": schema}
	if newer {
		p["mode"] = "form"
	}
	return p
}

// askAnswer turns an elicitation result into the tool's reply. Declined and dismissed are
// answers of their own.
func askAnswer(qs []askQuestion, raw json.RawMessage) toolResult {
	var r struct {
		Action  string
		Content map[string]any
	}
	json.Unmarshal(raw, &r)
	status := map[string]string{"decline": "declined", "cancel": "dismissed"}[r.Action]
	switch {
	case status != "":
		text := fmt.Sprintf("User %s the questions without answering. Do not assume an "+
			"answer: go on without one, or ask in chat if you must know.", status)
		return structuredResult(text, map[string]any{"status": status, "message": text,
			"answers": []any{}})
	case r.Action != "accept":
		return errorResult("the client's reply is no elicitation result: %s", raw)
	}
	text := "User has answered your questions: "
	answers := []any{}
	for i, q := range qs {
		selected, shown := askSelected(q, r.Content[fmt.Sprintf("q%d", i+1)])
		text += fmt.Sprintf("%q=%q, ", q.Question, shown)
		answers = append(answers, map[string]any{"question": q.Question, "selected": selected})
	}
	text = strings.TrimSuffix(text, ", ") + "."
	structured := map[string]any{"status": "answered", "answers": answers}
	note, _ := r.Content["remark"].(string)
	if note = strings.TrimSpace(note); note != "" {
		text += fmt.Sprintf(" The user added: %q.", note)
		structured["note"] = note
	}
	text += " You can now continue with the user's answers in mind."
	structured["message"] = text
	return structuredResult(text, structured)
}

// askSelected is a question's answer in an accepted form and how the reply shows
// it: the label, the labels picked when multiSelect, nil when unanswered.
func askSelected(q askQuestion, answer any) (any, string) {
	picked := []string{}
	switch v := answer.(type) {
	case string:
		return v, v
	case []any:
		for _, label := range v {
			picked = append(picked, fmt.Sprint(label))
		}
	}
	switch {
	case len(picked) > 0:
		return picked, strings.Join(picked, ", ")
	case q.MultiSelect:
		return picked, "(none selected)"
	}
	return nil, "(no answer)"
}

// askInChat hands questions that cannot reach the user back, for the agent to ask in chat.
func askInChat(qs []askQuestion, why string) toolResult {
	msg := why + " Do not assume an answer: " +
		"ask the user these questions in chat and wait for the reply."
	text := msg + "\n"
	for i, q := range qs {
		text += fmt.Sprintf("\n%d. %s", i+1, q.Question)
		if q.MultiSelect {
			text += " (several may be chosen)"
		}
		for _, o := range q.Options {
			text += "\n   - " + o.title()
		}
	}
	return structuredResult(text, map[string]any{"status": "ask_in_chat", "message": msg,
		"answers": []any{}, "questions": qs})
}
