// tools_ui.go holds the two tools that cross the line between the agent and
// the person: ReadImage shows the model an image file, AskUserQuestion asks
// the person multiple-choice questions.
//
// Rules:
//   - ReadImage opens regular files only (never blocking on a fifo), takes
//     the type from the bytes, reads a decodable image's size from its header
//     before decoding it, and never sends more than the configured limits:
//     larger images are shrunk with a box filter and re-encoded;
//   - AskUserQuestion asks through elicitation (a server request in the legacy
//     era, an input-required result with an HMAC-signed requestState in the
//     2026-07-28 era), else on /dev/tty when ASK_TTY is on, else hands the
//     questions back for the agent to ask in chat. Declined and dismissed are
//     answers of their own, never an empty answer.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/draw"
	_ "image/gif" // registers GIF with image.Decode
	"image/jpeg"
	"image/png"
	"io"
	"io/fs"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

var readImageTool = toolDef{
	name:  "ReadImage",
	title: "Show an image file",
	describe: func(srv *server) string {
		edge, max := imageLimits(srv.cfg)
		return fmt.Sprintf(`Reads an image file and shows it to you: PNG, JPEG, GIF, WebP or BMP, recognised from the file's bytes, not its name.

- Relative paths resolve against Bash's working directory (a "cd" in Bash applies here).
- Images larger than %d px on the long edge or %s are scaled down (aspect ratio kept) and re-encoded: JPEG, or PNG when the image has transparency; an animated GIF then keeps its first frame. WebP and BMP over the limits are an error: convert them first (e.g. with ImageMagick in Bash).
- Only regular files. A file that is not an image is an error saying what it looks like (text, PDF, ZIP, ...).

Example: {"file_path": "screenshots/home.png"}`, edge, humanBytes(max))
	},
	input: `{"type":"object","required":["file_path"],"additionalProperties":false,"properties":{
		"file_path":{"type":"string","minLength":1,"description":"The image file, absolute or relative to Bash's working directory."}}}`,
	hints: toolHints{readOnly: true, idempotent: true},
	run:   runReadImage,
}

const (
	imageMaxPixels  = 100_000_000 // a decodable image with more pixels is refused before decoding
	imageMaxPayload = 6_000_000   // bytes; their base64 (8 MB) stays well under the 10 MiB stdio message cap
	imageReadCap    = 256 << 20   // a file this large is refused outright
)

// imageLimits is the long-edge and byte limits from IMAGE_MAX_EDGE and IMAGE_MAX_BYTES.
func imageLimits(cfg *config) (edge int, maxBytes int64) {
	return max(cfg.int("IMAGE_MAX_EDGE"), 16), max(min(int64(cfg.int("IMAGE_MAX_BYTES")), imageMaxPayload), 1024)
}

func runReadImage(ctx context.Context, c *toolCall) toolResult {
	var a map[string]string // the schema check let through only file_path, a string
	json.Unmarshal(c.args, &a)
	path := c.s.shell.resolve(a["file_path"])
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0) // O_NONBLOCK: opening a fifo must not block
	if errors.Is(err, fs.ErrNotExist) {
		return errorResult("ReadImage: %s does not exist", path)
	} else if err != nil {
		return errorResult("ReadImage: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return errorResult("ReadImage: %v", err)
	} else if t := fi.Mode().Type(); t != 0 {
		kind := map[fs.FileMode]string{fs.ModeDir: "a directory", fs.ModeNamedPipe: "a named pipe (fifo)", fs.ModeSocket: "a socket",
			fs.ModeDevice: "a device", fs.ModeDevice | fs.ModeCharDevice: "a device"}[t]
		return errorResult("ReadImage: %s is %s, not a regular file", path, cmp.Or(kind, "a special file"))
	}
	head, _ := io.ReadAll(io.LimitReader(f, 512))
	size := fi.Size()
	format, looks := sniffImage(head, size)
	if format == "" {
		return errorResult("ReadImage: %s is not an image (PNG, JPEG, GIF, WebP or BMP): it looks like %s", path, looks)
	}
	edge, maxBytes := imageLimits(c.s.srv.cfg)
	w, h, ok := headerSize(format, head)
	if format == "WebP" || format == "BMP" {
		if !ok {
			return errorResult("ReadImage: %s: damaged %s header", path, format)
		} else if size > maxBytes || max(w, h) > edge {
			return errorResult("ReadImage: %s is a %d×%d %s image of %s, over the limits (%d px long edge, %s), and %s cannot be scaled without a decoder, which telson lacks. Shrink or convert it first (e.g. in Bash) and read the result.",
				path, w, h, format, humanBytes(size), edge, humanBytes(maxBytes), format)
		}
	} else {
		f.Seek(0, io.SeekStart)
		cfg, _, err := image.DecodeConfig(bufio.NewReader(f))
		if err != nil {
			return errorResult("ReadImage: %s: damaged %s image: %v", path, format, err)
		} else if w, h = cfg.Width, cfg.Height; int64(w)*int64(h) > imageMaxPixels {
			return errorResult("ReadImage: %s is a %d×%d %s image; telson refuses to decode more than %d megapixels", path, w, h, format, imageMaxPixels/1_000_000)
		}
	}
	info := fmt.Sprintf("%s: %s image, %d×%d px, %s", path, format, w, h, humanBytes(size))
	f.Seek(0, io.SeekStart)
	if size <= maxBytes && max(w, h) <= edge {
		data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
		if err != nil || int64(len(data)) > maxBytes {
			return errorResult("ReadImage: %s: read failed or the file grew: %v", path, err)
		}
		return imageResult(data, "image/"+strings.ToLower(format), info+", sent as is.")
	} else if size > imageReadCap {
		return errorResult("ReadImage: %s is %s; telson reads image files up to %s", path, humanBytes(size), humanBytes(imageReadCap))
	}
	img, _, err := image.Decode(bufio.NewReader(f))
	if err != nil {
		return errorResult("ReadImage: %s: cannot decode %s image: %v", path, format, err)
	}
	data, mime, b, err := shrinkImage(ctx, img, edge, maxBytes)
	if err != nil {
		return errorResult("ReadImage: %s: %v", path, err)
	}
	return imageResult(data, mime, fmt.Sprintf("%s%s; scaled to %d×%d and re-encoded as %s (%s) to fit the limits (%d px long edge, %s).", info,
		map[bool]string{true: " (first frame)"}[format == "GIF"], b.Dx(), b.Dy(), strings.ToUpper(mime[len("image/"):]), humanBytes(int64(len(data))), edge, humanBytes(maxBytes)))
}

func imageResult(data []byte, mime, text string) toolResult {
	return toolResult{content: []contentItem{{Type: "image", Data: base64.StdEncoding.EncodeToString(data), MimeType: mime}, {Type: "text", Text: text}}}
}

// signatures are magic numbers of the images Go decodes and of common files that are not images.
var signatures = []struct{ magic, format, looks string }{
	{"\x89PNG\r\n\x1a\n", "PNG", ""}, {"\xff\xd8\xff", "JPEG", ""}, {"GIF87a", "GIF", ""}, {"GIF89a", "GIF", ""},
	{"%PDF-", "", "a PDF document"}, {"PK\x03\x04", "", "a ZIP archive (or a file built on one: .docx, .xlsx, .jar)"},
	{"\x1f\x8b", "", "gzip-compressed data"}, {"\x7fELF", "", "an ELF executable or library"}, {"MZ", "", "a Windows executable"},
	{"II*\x00", "", "a TIFF image, which is not supported: convert it to PNG first"}, {"MM\x00*", "", "a TIFF image, which is not supported: convert it to PNG first"},
	{"\x00\x00\x01\x00", "", "a Windows icon, which is not supported: convert it to PNG first"}, {"BZh", "", "bzip2-compressed data"},
	{"\xfd7zXZ\x00", "", "xz-compressed data"}, {"\x28\xb5\x2f\xfd", "", "zstd-compressed data"}, {"7z\xbc\xaf\x27\x1c", "", "a 7-Zip archive"},
	{"SQLite format 3\x00", "", "an SQLite database"}, {"OggS", "", "Ogg audio or video"}, {"ID3", "", "MP3 audio"},
	{"RIFF", "", "a RIFF file (WAV audio or AVI video)"}, {"\x1a\x45\xdf\xa3", "", "Matroska or WebM video"},
}

// sniffImage names the image format the file's head b starts with, or says what the file looks like.
func sniffImage(b []byte, size int64) (format, looks string) {
	s := string(b)
	switch {
	case len(s) >= 16 && s[:4] == "RIFF" && s[8:12] == "WEBP":
		return "WebP", ""
	case len(s) >= 26 && s[:2] == "BM" && strings.Contains(" 12 40 52 56 64 108 124 ", fmt.Sprint(" ", le32(b, 14), " ")):
		return "BMP", ""
	case size == 0:
		return "", "an empty file"
	}
	for _, sig := range signatures {
		if strings.HasPrefix(s, sig.magic) {
			return sig.format, sig.looks
		}
	}
	lower := strings.ToLower(strings.TrimLeft(s, " \t\r\n\ufeff"))
	switch {
	case len(s) >= 12 && s[4:8] == "ftyp" && strings.Contains("heic heix mif1 msf1 avif avis", s[8:12]):
		return "", "a HEIF or AVIF image, which is not supported: convert it to PNG or JPEG first"
	case len(s) >= 12 && s[4:8] == "ftyp":
		return "", "MP4 or QuickTime media"
	case len(s) >= 262 && s[257:262] == "ustar":
		return "", "a tar archive"
	case strings.HasPrefix(lower, "<!doctype html") || strings.HasPrefix(lower, "<html"):
		return "", "an HTML document"
	case strings.Contains(lower, "<svg"):
		return "", "an SVG image, which is text (vector graphics) this tool cannot show: read it as text, or render it to PNG first"
	case strings.HasPrefix(lower, "<?xml"):
		return "", "an XML document"
	}
	for rest := s; rest != ""; {
		r, n := utf8.DecodeRuneInString(rest)
		if r == 0 || (r == utf8.RuneError && n == 1 && utf8.FullRuneInString(rest)) {
			return "", "binary data of an unknown kind"
		}
		rest = rest[n:]
	}
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 60 {
		line = line[:60] + "..."
	}
	return "", fmt.Sprintf("text (it starts %q)", strings.ToValidUTF8(line, ""))
}

func le32(b []byte, i int) uint32 {
	return uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16 | uint32(b[i+3])<<24
}

// headerSize reads width and height from a WebP (VP8, VP8L, VP8X) or BMP header.
func headerSize(format string, b []byte) (w, h int, ok bool) {
	chunk := ""
	if len(b) >= 32 {
		chunk = string(b[12:16])
	}
	switch {
	case format == "BMP" && le32(b, 14) == 12: // BITMAPCOREHEADER: 16-bit sizes
		return int(b[18]) | int(b[19])<<8, int(b[20]) | int(b[21])<<8, true
	case format == "BMP": // BITMAPINFOHEADER and later: signed, a negative height means top-down
		w, h := int64(int32(le32(b, 18))), int64(int32(le32(b, 22)))
		return int(w), int(max(h, -h)), w > 0 && h != 0
	case format == "WebP" && chunk == "VP8 " && string(b[23:26]) == "\x9d\x01\x2a":
		return int(le32(b, 26) & 0x3fff), int(le32(b, 28) & 0x3fff), true
	case format == "WebP" && chunk == "VP8L" && b[20] == 0x2f:
		return int(le32(b, 21)&0x3fff) + 1, int(le32(b, 21)>>14&0x3fff) + 1, true
	case format == "WebP" && chunk == "VP8X":
		return int(le32(b, 24)&0xffffff) + 1, int(le32(b, 27)&0xffffff) + 1, true
	}
	return 0, 0, false
}

// shrinkImage fits img within edge px and maxBytes as JPEG (quality 85), or PNG when it has transparency.
func shrinkImage(ctx context.Context, img image.Image, edge int, maxBytes int64) ([]byte, string, image.Rectangle, error) {
	mime, encode := "image/png", png.Encode
	if o, ok := img.(interface{ Opaque() bool }); ok && o.Opaque() {
		mime, encode = "image/jpeg", func(w io.Writer, m image.Image) error { return jpeg.Encode(w, m, &jpeg.Options{Quality: 85}) }
	}
	b := img.Bounds()
	scale := min(1, float64(edge)/float64(max(b.Dx(), b.Dy())))
	for ctx.Err() == nil {
		dw, dh := max(1, int(math.Round(float64(b.Dx())*scale))), max(1, int(math.Round(float64(b.Dy())*scale)))
		small := boxScale(img, dw, dh)
		var buf bytes.Buffer
		switch err := encode(&buf, small); {
		case err != nil:
			return nil, "", b, fmt.Errorf("encode: %w", err)
		case int64(buf.Len()) <= maxBytes:
			return buf.Bytes(), mime, small.Bounds(), nil
		case max(dw, dh) <= 16:
			return nil, "", b, fmt.Errorf("cannot encode it within %s even at %d×%d", humanBytes(maxBytes), dw, dh)
		}
		img, b, scale = small, small.Bounds(), 0.7 // shrink the last try further: cheaper than starting over
	}
	return nil, "", b, fmt.Errorf("scale: %w", ctx.Err())
}

// boxScale shrinks img to dw×dh, averaging in premultiplied colour the source pixels of each output pixel.
func boxScale(img image.Image, dw, dh int) *image.RGBA {
	b := img.Bounds()
	sw, sh := b.Dx(), b.Dy()
	out, row := image.NewRGBA(image.Rect(0, 0, dw, dh)), image.NewRGBA(image.Rect(0, 0, sw, 1))
	sum := make([]uint64, sw*4) // per source column, over the rows of one output row
	for dy := 0; dy < dh; dy++ {
		y0, y1 := (dy*sh+dh-1)/dh, ((dy+1)*sh+dh-1)/dh // the source rows sy with sy*dh/sh == dy
		clear(sum)
		for sy := y0; sy < y1; sy++ {
			draw.Draw(row, row.Rect, img, image.Pt(b.Min.X, b.Min.Y+sy), draw.Src)
			for i, v := range row.Pix {
				sum[i] += uint64(v)
			}
		}
		for dx := 0; dx < dw; dx++ {
			x0, x1 := (dx*sw+dw-1)/dw, ((dx+1)*sw+dw-1)/dw
			n := uint64((y1 - y0) * (x1 - x0))
			for c := 0; c < 4; c++ {
				t := n / 2
				for i := x0*4 + c; i < x1*4; i += 4 {
					t += sum[i]
				}
				out.Pix[dy*out.Stride+dx*4+c] = uint8(t / n)
			}
		}
	}
	return out
}

func humanBytes(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f KB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d bytes", n)
}

var askUserQuestionTool = toolDef{
	name:  "AskUserQuestion",
	title: "Ask the user questions",
	description: `Asks the user 1 to 4 multiple-choice questions and waits for the answers (up to 10 minutes by default).

- questions_json is a string holding JSON: {"questions":[{"question":"Which database?","header":"Database","options":[{"label":"PostgreSQL","description":"a server, many writers"},{"label":"SQLite","description":"one file"}],"multiSelect":false}]}. The short form {"questions":[{"text":"Which database?","options":["PostgreSQL","SQLite"]}]} and a bare array of questions work too.
- 2 to 10 options per question; multiSelect lets the user pick several. The user can also add a free-text note, so do not add an "Other" option.
- The answer reads: User has answered your questions: "Which database?"="PostgreSQL". The user may decline or dismiss the questions instead: then do not assume an answer.
- If the client cannot show questions you get an error with the questions laid out: ask them in chat instead.

Example: {"questions_json": "{\"questions\":[{\"text\":\"Which database?\",\"options\":[\"PostgreSQL\",\"SQLite\"]}]}"}`,
	input: `{"type":"object","required":["questions_json"],"additionalProperties":false,"properties":{
		"questions_json":{"type":"string","minLength":1,"maxLength":100000,"description":"JSON text: {\"questions\":[{\"question\",\"header\",\"options\":[{\"label\",\"description\"}],\"multiSelect\"}]}, or {\"questions\":[{\"text\",\"options\":[\"...\"]}]}, or a bare array of questions."}}}`,
	output: `{"type":"object","required":["status","answers"],"properties":{"status":{"type":"string","enum":["answered","declined","dismissed"]},
		"answers":{"type":"array","items":{"type":"object","required":["question","selected"],"properties":{"question":{"type":"string"},
			"selected":{"type":["string","array","null"],"items":{"type":"string"},"description":"the chosen label, the chosen labels when multiSelect, null when unanswered"}}}},
		"note":{"type":"string","description":"the user's free-text note"}}}`,
	hints: toolHints{readOnly: true},
	run:   runAskUserQuestion,
}

// askQuestion is one question in Claude Code's shape or the short one (text, options as strings).
type askQuestion struct {
	Question    string      `json:"question"`
	Text        string      `json:"text"`
	Header      string      `json:"header"`
	Options     []askOption `json:"options"`
	MultiSelect bool        `json:"multiSelect"`
}

type askOption struct {
	Label       string `json:"label"`
	Description string `json:"description"`
}

func (o *askOption) UnmarshalJSON(b []byte) error {
	if b[0] == '"' {
		return json.Unmarshal(b, &o.Label)
	}
	type plain askOption
	if json.Unmarshal(b, (*plain)(o)) != nil {
		return fmt.Errorf(`an option must be a string or {"label":"...","description":"..."}, got %s`, b)
	}
	return nil
}

func runAskUserQuestion(ctx context.Context, c *toolCall) toolResult {
	var a map[string]string // the schema check let through only questions_json, a string
	json.Unmarshal(c.args, &a)
	qs, err := parseQuestions(a["questions_json"])
	if err != nil {
		return errorResult("AskUserQuestion: %v", err)
	}
	timeout := time.Duration(c.s.srv.cfg.int("ASK_TIMEOUT_MS")) * time.Millisecond
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	var modes map[string]json.RawMessage // form elicitation: declared ({} means form) in a version that has it
	json.Unmarshal(c.req.caps["elicitation"], &modes)
	_, form := modes["form"]
	form = c.req.clientHas("elicitation") && atLeast(c.req.version, version20250618) && (form || len(modes) == 0)
	switch {
	case form && c.req.modern:
		return askRoundTrip(c, qs, a["questions_json"], timeout)
	case form:
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		raw, err := c.s.request(ctx, "elicitation/create", elicitParams(qs, c.req.version))
		if errors.Is(err, context.DeadlineExceeded) {
			return askInChat(qs, fmt.Sprintf("the user did not answer within %s, so the questions were withdrawn", timeout))
		} else if err != nil {
			return askInChat(qs, fmt.Sprintf("the client could not show the questions (%v)", err))
		}
		return askAnswer(qs, raw)
	case c.s.srv.cfg.bool("ASK_TTY"):
		if res, ok := askTTY(ctx, qs, timeout); ok {
			return res
		}
	}
	return askInChat(qs, "this client cannot show questions to the user (it did not declare form elicitation)")
}

// parseQuestions reads questions_json (also a bare array, or JSON encoded twice) and checks it.
func parseQuestions(text string) ([]askQuestion, error) {
	data, s := []byte(strings.TrimSpace(text)), ""
	if json.Unmarshal(data, &s) == nil {
		data = []byte(strings.TrimSpace(s))
	}
	var w struct {
		Questions []askQuestion `json:"questions"`
	}
	target := any(&w)
	if len(data) > 0 && data[0] == '[' {
		target = &w.Questions
	}
	if err := json.Unmarshal(data, target); err != nil {
		return nil, jsonProblem(string(data), err)
	}
	qs := w.Questions
	if len(qs) < 1 || len(qs) > 4 {
		return nil, fmt.Errorf(`%d questions; ask 1 to 4 at a time, as {"questions":[...]} or a bare array`, len(qs))
	}
	for i := range qs {
		q := &qs[i]
		q.Question = cmp.Or(strings.TrimSpace(q.Question), strings.TrimSpace(q.Text))
		switch {
		case q.Question == "":
			return nil, fmt.Errorf(`questions[%d] has no "question" (or "text")`, i)
		case len(q.Options) < 2 || len(q.Options) > 10:
			return nil, fmt.Errorf("questions[%d] has %d options; give 2 to 10", i, len(q.Options))
		case slices.ContainsFunc(qs[:i], func(p askQuestion) bool { return p.Question == q.Question }):
			return nil, fmt.Errorf("questions[%d] repeats the question %q", i, q.Question)
		}
		for j := range q.Options {
			o := &q.Options[j]
			if o.Label = strings.TrimSpace(o.Label); o.Label == "" {
				return nil, fmt.Errorf("questions[%d].options[%d] has no label", i, j)
			} else if slices.ContainsFunc(q.Options[:j], func(p askOption) bool { return p.Label == o.Label }) {
				return nil, fmt.Errorf("questions[%d] lists the option %q twice", i, o.Label)
			}
		}
	}
	return qs, nil
}

// jsonProblem says where JSON text broke: line, column and byte offset.
func jsonProblem(text string, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want := map[string]string{"bool": "true or false", "string": "a string", "slice": "an array", "struct": "an object"}
		return fmt.Errorf("questions_json: %s must be %s, not a %s", cmp.Or(te.Field, "a value"), want[te.Type.Kind().String()], te.Value)
	} else if !errors.As(err, &se) {
		return fmt.Errorf("questions_json: %w", err)
	}
	before := text[:min(int(se.Offset), len(text))]
	return fmt.Errorf("questions_json is not valid JSON: %v at line %d, column %d (byte %d), after %q", se, strings.Count(before, "\n")+1,
		utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:]), se.Offset, strings.ToValidUTF8(before[max(0, len(before)-20):], ""))
}

// elicitParams is the elicitation/create form, in the questions' order: a single choice (enum before
// 2025-11-25, then oneOf) or a multiple choice (checkboxes before 2025-11-25, then an array) each, and a note.
func elicitParams(qs []askQuestion, v string) map[string]any {
	newer, msg, required := atLeast(v, version20251125), "The agent asks:", []string{}
	var props []byte
	add := func(key string, field map[string]any) {
		fb, _ := marshalJSON(field)
		props = fmt.Appendf(props, ",%q:%s", key, fb)
	}
	for i, q := range qs {
		key := fmt.Sprintf("q%d", i+1)
		msg += "\n" + q.Question
		var labels, titles []string
		var choices []map[string]string
		for j, o := range q.Options {
			t := strings.TrimSuffix(o.Label+" — "+o.Description, " — ")
			labels, titles = append(labels, o.Label), append(titles, t)
			choices = append(choices, map[string]string{"const": o.Label, "title": t})
			if q.MultiSelect && !newer { // one checkbox per option
				add(fmt.Sprintf("%s_%c", key, 'a'+j), map[string]any{"type": "boolean", "title": q.Question + ": " + t, "default": false})
			}
		}
		field := map[string]any{"type": "string", "title": q.Question}
		if q.Header != "" {
			field["description"] = q.Header
		}
		switch {
		case q.MultiSelect && !newer:
			continue
		case q.MultiSelect:
			field["type"], field["minItems"], field["items"] = "array", 1, map[string]any{"anyOf": choices}
		case newer:
			field["oneOf"] = choices
		default:
			field["enum"], field["enumNames"] = labels, titles
		}
		add(key, field)
		required = append(required, key)
	}
	add("note", map[string]any{"type": "string", "title": "Anything to add? (optional)", "description": "Free text for the agent, such as an answer that is not among the options."})
	props[0] = '{' // the first property's leading comma
	p := map[string]any{"message": msg, "requestedSchema": map[string]any{"type": "object", "properties": json.RawMessage(append(props, '}')), "required": required}}
	if newer {
		p["mode"] = "form"
	}
	return p
}

// askAnswer turns an elicitation result into the tool's reply.
func askAnswer(qs []askQuestion, raw json.RawMessage) toolResult {
	var r struct {
		Action  string         `json:"action"`
		Content map[string]any `json:"content"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return errorResult("AskUserQuestion: the client's reply is not an elicitation result: %v", err)
	}
	if status := map[string]string{"decline": "declined", "cancel": "dismissed"}[r.Action]; status != "" {
		text := fmt.Sprintf("User %s the questions without answering. Do not assume an answer: go on without one, or ask in chat if you must know.", status)
		return toolResult{content: textResult(text).content, structured: map[string]any{"status": status, "answers": []any{}}}
	} else if r.Action != "accept" {
		return errorResult("AskUserQuestion: the client answered with the unknown action %q", r.Action)
	}
	var pairs []string
	answers := []map[string]any{}
	for i, q := range qs {
		key, picked := fmt.Sprintf("q%d", i+1), []string{}
		var selected any
		for j, o := range q.Options { // 2025-06-18: one checkbox per option
			if r.Content[fmt.Sprintf("%s_%c", key, 'a'+j)] == true {
				picked = append(picked, o.Label)
			}
		}
		switch x := r.Content[key].(type) {
		case string:
			selected, picked = x, []string{x}
		case []any:
			for _, s := range x {
				if s, ok := s.(string); ok {
					picked = append(picked, s)
				}
			}
		}
		if selected == nil && (q.MultiSelect || len(picked) > 0) {
			selected = picked
		}
		shown := cmp.Or(strings.Join(picked, ", "), map[bool]string{true: "(no answer)", false: "(none selected)"}[selected == nil])
		pairs = append(pairs, fmt.Sprintf("%q=%q", q.Question, shown))
		answers = append(answers, map[string]any{"question": q.Question, "selected": selected})
	}
	text := "User has answered your questions: " + strings.Join(pairs, ", ") + "."
	structured := map[string]any{"status": "answered", "answers": answers}
	if note, _ := r.Content["note"].(string); strings.TrimSpace(note) != "" {
		text += fmt.Sprintf(" The user added: %q.", strings.TrimSpace(note))
		structured["note"] = strings.TrimSpace(note)
	}
	return toolResult{content: textResult(text + " You can now continue with the user's answers in mind.").content, structured: structured}
}

// askRoundTrip is the 2026-07-28 way: an input-required result with a signed requestState, then the retry.
func askRoundTrip(c *toolCall, qs []askQuestion, questions string, ttl time.Duration) toolResult {
	var p struct {
		InputResponses map[string]json.RawMessage `json:"inputResponses"`
		RequestState   string                     `json:"requestState"`
	}
	json.Unmarshal(c.req.params, &p)
	key, again := c.s.srv.stateKey, "; call again without inputResponses and requestState to ask anew"
	if p.RequestState != "" || p.InputResponses != nil {
		exp, mac, _ := strings.Cut(p.RequestState, ".")
		n, err := strconv.ParseInt(exp, 10, 64)
		switch {
		case p.RequestState == "":
			return errorResult("AskUserQuestion: inputResponses came without requestState%s", again)
		case err != nil || !hmac.Equal([]byte(mac), []byte(askStateMAC(key, n, questions))):
			return errorResult("AskUserQuestion: requestState does not verify: it was altered, or belongs to other questions or an earlier telson process%s", again)
		case time.Now().Unix() > n:
			return errorResult("AskUserQuestion: the answer came after the %s limit%s", ttl, again)
		}
		if raw, ok := p.InputResponses["ask"]; ok {
			return askAnswer(qs, raw)
		} // no answer to the request: ask again, as the spec advises
	}
	exp := time.Now().Add(ttl).Unix()
	return toolResult{inputRequired: map[string]any{
		"inputRequests": map[string]any{"ask": map[string]any{"method": "elicitation/create", "params": elicitParams(qs, versionModern)}},
		"requestState":  fmt.Sprintf("%d.%s", exp, askStateMAC(key, exp, questions)),
	}}
}

// askStateMAC signs a requestState: this process's key over the expiry and the questions.
func askStateMAC(key []byte, exp int64, questions string) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "AskUserQuestion\x00%d\x00%s", exp, questions)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newStateKey is the per-process random key that signs requestState.
func newStateKey() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic(fmt.Sprintf("state key: %v", err)) // no randomness from the kernel: nothing is safe
	}
	return k
}

// askInChat is an error laying out for the agent to ask in chat questions that cannot reach the user.
func askInChat(qs []askQuestion, why string) toolResult {
	var b strings.Builder
	fmt.Fprintf(&b, "AskUserQuestion: %s. Ask the user these questions in chat yourself and wait for the reply:\n", why)
	for i, q := range qs {
		fmt.Fprintf(&b, "\n%d. %s%s", i+1, q.Question, map[bool]string{true: " (several may be chosen)"}[q.MultiSelect])
		for _, o := range q.Options {
			fmt.Fprintf(&b, "\n   - %s", strings.TrimSuffix(o.Label+": "+o.Description, ": "))
		}
	}
	return errorResult("%s", b.String())
}

// askTTY asks on /dev/tty; ok is false when there is no terminal whose reads can time out.
func askTTY(ctx context.Context, qs []askQuestion, timeout time.Duration) (res toolResult, ok bool) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return res, false
	}
	defer tty.Close()
	if tty.SetDeadline(time.Now().Add(timeout)) != nil {
		return res, false
	}
	stop := context.AfterFunc(ctx, func() { tty.SetReadDeadline(time.Now()) }) // a cancelled call ends the read
	defer stop()
	raw, err := ttyDialogue(bufio.NewReader(tty), tty, qs)
	if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil {
		return askInChat(qs, fmt.Sprintf("the user did not answer on the terminal within %s", timeout)), true
	} else if err != nil {
		return errorResult("AskUserQuestion: terminal: %v", err), true
	}
	return askAnswer(qs, raw), true
}

// ttyDialogue asks on a terminal and returns an elicitation result: a number picks an option (numbers
// separated by commas for multiSelect), other text is the answer itself, an empty line dismisses.
func ttyDialogue(r *bufio.Reader, w io.Writer, qs []askQuestion) (json.RawMessage, error) {
	content := map[string]any{}
	fmt.Fprintf(w, "\n== The agent asks (telson AskUserQuestion) ==\n")
	for i, q := range qs {
		fmt.Fprintf(w, "\n%d. %s\n", i+1, q.Question)
		for j, o := range q.Options {
			fmt.Fprintf(w, "   %d) %s\n", j+1, strings.TrimSuffix(o.Label+" — "+o.Description, " — "))
		}
		fmt.Fprintf(w, "Answer with %s, or type your own answer (an empty line dismisses the questions): ", map[bool]string{false: "a number", true: "numbers separated by commas"}[q.MultiSelect])
		line, err := r.ReadString('\n')
		if line = strings.TrimSpace(line); err != nil && !errors.Is(err, io.EOF) {
			return nil, err // a timeout or a cancelled call: a half-typed line is no answer
		} else if line == "" { // an empty line or end of input (Ctrl-D)
			return json.RawMessage(`{"action":"cancel"}`), nil
		}
		picked := []any{}
		for _, f := range strings.Split(line, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n >= 1 && n <= len(q.Options) && (q.MultiSelect || len(picked) == 0) {
				picked = append(picked, q.Options[n-1].Label)
			} else {
				picked = []any{line}
				break
			}
		}
		key := fmt.Sprintf("q%d", i+1)
		if content[key] = picked; !q.MultiSelect {
			content[key] = picked[0]
		}
	}
	fmt.Fprintf(w, "Thank you; the answers went to the agent.\n")
	return marshalJSON(map[string]any{"action": "accept", "content": content})
}
