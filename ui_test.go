// ui_test.go tests ReadImage and AskUserQuestion: images made here with the
// standard encoders (WebP and BMP built byte by byte), special files, and a
// fake client that answers elicitation/create in every way it can.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"
)

// uiWriteFile writes data to dir/name and returns the path.
func uiWriteFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// uiNoise is a w×h opaque image of pseudo-random colours (it compresses badly).
func uiNoise(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	x := uint32(12345)
	for i := range img.Pix {
		x = x*1664525 + 1013904223
		img.Pix[i] = uint8(x >> 24)
		if i%4 == 3 {
			img.Pix[i] = 255
		}
	}
	return img
}

func uiEncode(t *testing.T, img image.Image, format string) []byte {
	t.Helper()
	var buf bytes.Buffer
	var err error
	switch format {
	case "png":
		err = png.Encode(&buf, img)
	case "jpeg":
		err = jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90})
	case "gif":
		err = gif.Encode(&buf, img, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// uiBMP builds an uncompressed 24-bit BMP (BITMAPINFOHEADER) of w×h grey pixels.
func uiBMP(w, h int) []byte {
	stride := (w*3 + 3) &^ 3
	var b bytes.Buffer
	le := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("BM")
	le(uint32(54 + stride*h))
	le(uint32(0))
	le(uint32(54))
	le(uint32(40))
	le(int32(w))
	le(int32(h))
	le(uint16(1))
	le(uint16(24))
	le(uint32(0))
	le(uint32(stride * h))
	le([4]uint32{2835, 2835, 0, 0})
	b.Write(bytes.Repeat([]byte{0x80}, stride*h))
	return b.Bytes()
}

// uiWebP builds a lossless (VP8L) WebP of w×h pixels of one colour: every
// prefix code is a simple one-symbol code, so the pixels take no bits
// (dwebp decodes it to rgb(128,64,192)).
func uiWebP(w, h int) []byte {
	var bits []bool
	put := func(v uint32, n int) {
		for i := 0; i < n; i++ {
			bits = append(bits, v>>i&1 == 1)
		}
	}
	put(uint32(w-1), 14)
	put(uint32(h-1), 14)
	put(0, 1)                                              // alpha hint
	put(0, 3)                                              // version
	put(0, 1)                                              // no transform
	put(0, 1)                                              // no colour cache
	put(0, 1)                                              // no meta prefix codes
	for _, sym := range []uint32{0x40, 0x80, 0xc0, 0xff} { // green, red, blue, alpha
		put(1, 1) // simple code
		put(0, 1) // one symbol
		put(1, 1) // 8-bit symbol
		put(sym, 8)
	}
	put(1, 1) // distance: simple code, one 1-bit symbol 0
	put(0, 1)
	put(0, 1)
	put(0, 1)
	data := []byte{0x2f}
	for i := 0; i < len(bits); i += 8 {
		var c byte
		for j := 0; j < 8 && i+j < len(bits); j++ {
			if bits[i+j] {
				c |= 1 << j
			}
		}
		data = append(data, c)
	}
	if len(data)%2 == 1 {
		data = append(data, 0)
	}
	var b bytes.Buffer
	b.WriteString("RIFF")
	binary.Write(&b, binary.LittleEndian, uint32(4+8+len(data)))
	b.WriteString("WEBPVP8L")
	binary.Write(&b, binary.LittleEndian, uint32(len(data)))
	b.Write(data)
	return b.Bytes()
}

// uiPNGHeader is a PNG signature and IHDR claiming w×h, with no pixel data.
func uiPNGHeader(w, h uint32) []byte {
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	binary.Write(&b, binary.BigEndian, uint32(13))
	b.WriteString("IHDR")
	b.Write(ihdr)
	binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(append([]byte("IHDR"), ihdr...)))
	return b.Bytes()
}

// uiImage returns a result's image item, decoded, and its mime type.
func uiImage(t *testing.T, res map[string]any) ([]byte, string) {
	t.Helper()
	for _, it := range res["content"].([]any) {
		m := it.(map[string]any)
		if m["type"] == "image" {
			data, err := base64.StdEncoding.DecodeString(m["data"].(string))
			if err != nil {
				t.Fatal(err)
			}
			return data, m["mimeType"].(string)
		}
	}
	t.Fatalf("no image in %v", resultText(res))
	return nil, ""
}

func TestReadImageFormats(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pal := image.NewPaletted(image.Rect(0, 0, 40, 30), color.Palette{color.Transparent, color.RGBA{255, 0, 0, 255}})
	files := map[string][]byte{
		"photo.jpg":     uiEncode(t, uiNoise(64, 48), "jpeg"),
		"shot.png":      uiEncode(t, uiNoise(64, 48), "png"),
		"anim.gif":      uiEncode(t, pal, "gif"),
		"pic.webp":      uiWebP(33, 17),
		"pic.bmp":       uiBMP(20, 10),
		"misnamed.txt":  uiEncode(t, uiNoise(8, 8), "png"),
		"extended.webp": append(append([]byte("RIFF\x00\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00\x10\x00\x00\x00"), 99, 0, 0, 49, 0, 0), make([]byte, 8)...),
	}
	want := map[string]struct{ mime, dims string }{
		"photo.jpg": {"image/jpeg", "64×48"}, "shot.png": {"image/png", "64×48"}, "anim.gif": {"image/gif", "40×30"},
		"pic.webp": {"image/webp", "33×17"}, "pic.bmp": {"image/bmp", "20×10"}, "misnamed.txt": {"image/png", "8×8"},
		"extended.webp": {"image/webp", "100×50"},
	}
	for _, name := range []string{"lossy.webp", "alpha.webp"} { // made by cwebp: VP8, and VP8X with an alpha chunk
		data, err := os.ReadFile(filepath.Join("testdata", "ui", name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
	want["lossy.webp"], want["alpha.webp"] = struct{ mime, dims string }{"image/webp", "41×29"}, struct{ mime, dims string }{"image/webp", "43×31"}
	for name, data := range files {
		uiWriteFile(t, dir, name, data)
	}
	c := startServer(t)
	c.initialize("2025-06-18")
	for name, w := range want {
		res := c.callTool("ReadImage", map[string]any{"file_path": filepath.Join(dir, name)})
		if isError(res) {
			t.Errorf("%s: %s", name, resultText(res))
			continue
		}
		data, mime := uiImage(t, res)
		if mime != w.mime || !bytes.Equal(data, files[name]) {
			t.Errorf("%s: got %s, %d bytes; want %s as is", name, mime, len(data), w.mime)
		}
		if text := resultText(res); !strings.Contains(text, w.dims+" px") || !strings.Contains(text, "as is") {
			t.Errorf("%s: text %q lacks %s", name, text, w.dims)
		}
	}
}

func TestReadImageScaling(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A 1-pixel checkerboard: a box filter averages it to grey, nearest-neighbour would keep black or white.
	board := image.NewGray(image.Rect(0, 0, 600, 300))
	for i := range board.Pix {
		if (i%600+i/600)%2 == 0 {
			board.Pix[i] = 255
		}
	}
	// Half transparent red fading in: must stay PNG with its alpha.
	alpha := image.NewNRGBA(image.Rect(0, 0, 500, 250))
	for y := 0; y < 250; y++ {
		for x := 0; x < 500; x++ {
			alpha.SetNRGBA(x, y, color.NRGBA{255, 0, 0, uint8(x * 255 / 499)})
		}
	}
	gifBig := image.NewPaletted(image.Rect(0, 0, 300, 120), color.Palette{color.Black, color.White})
	paths := map[string]string{
		"board":  uiWriteFile(t, dir, "board.png", uiEncode(t, board, "png")),
		"alpha":  uiWriteFile(t, dir, "alpha.png", uiEncode(t, alpha, "png")),
		"photo":  uiWriteFile(t, dir, "photo.jpg", uiEncode(t, uiNoise(450, 150), "jpeg")),
		"gif":    uiWriteFile(t, dir, "big.gif", uiEncode(t, gifBig, "gif")),
		"wbig":   uiWriteFile(t, dir, "big.webp", uiWebP(300, 20)),
		"bbig":   uiWriteFile(t, dir, "big.bmp", uiBMP(10, 250)),
		"bomb":   uiWriteFile(t, dir, "bomb.png", uiPNGHeader(20000, 20000)),
		"broken": uiWriteFile(t, dir, "broken.png", append(uiPNGHeader(300, 300), "IDATgarbage"...)),
	}
	c := startServer(t, "-image-max-edge", "200")
	c.initialize("2025-11-25")
	cases := []struct {
		name, mime string
		w, h       int
	}{{"board", "image/jpeg", 200, 100}, {"alpha", "image/png", 200, 100}, {"photo", "image/jpeg", 200, 67}, {"gif", "image/jpeg", 200, 80}}
	for _, tc := range cases {
		res := c.callTool("ReadImage", map[string]any{"file_path": paths[tc.name]})
		if isError(res) {
			t.Fatalf("%s: %s", tc.name, resultText(res))
		}
		data, mime := uiImage(t, res)
		img, _, err := image.Decode(bytes.NewReader(data))
		if err != nil || mime != tc.mime {
			t.Fatalf("%s: %s, %v", tc.name, mime, err)
		}
		if b := img.Bounds(); b.Dx() != tc.w || b.Dy() != tc.h {
			t.Errorf("%s: scaled to %v, want %d×%d", tc.name, b, tc.w, tc.h)
		}
		if !strings.Contains(resultText(res), fmt.Sprintf("scaled to %d×%d", tc.w, tc.h)) {
			t.Errorf("%s: text %q", tc.name, resultText(res))
		}
		switch tc.name {
		case "board":
			for _, p := range [][2]int{{10, 10}, {100, 50}, {199, 99}} {
				if g := color.GrayModel.Convert(img.At(p[0], p[1])).(color.Gray).Y; g < 100 || g > 155 {
					t.Errorf("checkerboard pixel %v = %d, want mid grey (box filter)", p, g)
				}
			}
		case "alpha":
			left, right := color.NRGBAModel.Convert(img.At(2, 50)).(color.NRGBA), color.NRGBAModel.Convert(img.At(197, 50)).(color.NRGBA)
			if left.A > 20 || right.A < 235 || right.R < 250 || right.G > 5 {
				t.Errorf("alpha lost: left %v right %v", left, right)
			}
		}
	}
	for name, want := range map[string]string{
		"wbig":   "WebP cannot be scaled without a decoder",
		"bbig":   "BMP cannot be scaled without a decoder",
		"bomb":   "refuses to decode more than 100 megapixels",
		"broken": "cannot decode PNG image",
	} {
		res := c.callTool("ReadImage", map[string]any{"file_path": paths[name]})
		if !isError(res) || !strings.Contains(resultText(res), want) {
			t.Errorf("%s: want error %q, got %q", name, want, resultText(res))
		}
	}
}

func TestReadImageByteLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	noisy := uiWriteFile(t, dir, "noise.png", uiEncode(t, uiNoise(300, 300), "png")) // about 270 KB, small in pixels
	c := startServer(t, "-image-max-bytes", "30000")
	c.initialize("2025-06-18")
	res := c.callTool("ReadImage", map[string]any{"file_path": noisy})
	if isError(res) {
		t.Fatal(resultText(res))
	}
	data, mime := uiImage(t, res)
	img, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil || mime != "image/jpeg" || len(data) > 30000 {
		t.Fatalf("got %s, %d bytes, %v", mime, len(data), err)
	}
	if b := img.Bounds(); b.Dx() != b.Dy() || b.Dx() > 300 {
		t.Errorf("aspect lost: %v", b)
	}
	if !strings.Contains(resultText(res), "to fit the limits (2000 px long edge, 30.0 KB)") {
		t.Errorf("text %q", resultText(res))
	}
}

func TestReadImageNotImages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		fifo:         "is a named pipe (fifo), not a regular file",
		dir:          "is a directory, not a regular file",
		"/dev/zero":  "is a device, not a regular file",
		"nope.png":   "does not exist",
		"notes.png":  `it looks like text (it starts "hello world")`,
		"empty.png":  "it looks like an empty file",
		"doc.png":    "it looks like a PDF document",
		"a.zip":      "it looks like a ZIP archive",
		"prog":       "it looks like an ELF executable",
		"page.png":   "it looks like an HTML document",
		"logo.svg":   "it looks like an SVG image",
		"blob.bin":   "it looks like binary data of an unknown kind",
		"photo.heic": "it looks like a HEIF or AVIF image",
	}
	uiWriteFile(t, dir, "notes.png", []byte("hello world\nsecond line\n"))
	uiWriteFile(t, dir, "empty.png", nil)
	uiWriteFile(t, dir, "doc.png", []byte("%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"))
	uiWriteFile(t, dir, "a.zip", []byte("PK\x03\x04\x14\x00\x00\x00"))
	uiWriteFile(t, dir, "prog", []byte("\x7fELF\x02\x01\x01\x00"))
	uiWriteFile(t, dir, "page.png", []byte("\n  <!DOCTYPE html><html><body>hi</body></html>"))
	uiWriteFile(t, dir, "logo.svg", []byte(`<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"/>`))
	uiWriteFile(t, dir, "blob.bin", []byte{0x13, 0x00, 0xfe, 0x99, 0x01})
	uiWriteFile(t, dir, "photo.heic", []byte("\x00\x00\x00\x18ftypheic\x00\x00\x00\x00"))
	c := startServer(t)
	c.initialize("2025-06-18")
	c.callTool("Bash", map[string]any{"command": "cd " + dir})
	for path, want := range cases {
		res := c.callTool("ReadImage", map[string]any{"file_path": path})
		if !isError(res) || !strings.Contains(resultText(res), want) {
			t.Errorf("%s: want %q, got %q", path, want, resultText(res))
		}
	}
}

func TestReadImageRelativeToBashCd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sub := filepath.Join(dir, "shots")
	os.Mkdir(sub, 0o755)
	data := uiEncode(t, uiNoise(10, 5), "png")
	uiWriteFile(t, sub, "a.png", data)
	c := startServer(t)
	c.initialize("2025-06-18")
	if res := c.callTool("Bash", map[string]any{"command": "cd " + dir + " && cd shots"}); isError(res) {
		t.Fatal(resultText(res))
	}
	res := c.callTool("ReadImage", map[string]any{"file_path": "a.png"})
	if isError(res) {
		t.Fatal(resultText(res))
	}
	if got, _ := uiImage(t, res); !bytes.Equal(got, data) || !strings.Contains(resultText(res), filepath.Join(sub, "a.png")) {
		t.Errorf("relative path: %q", resultText(res))
	}
}

// --- AskUserQuestion ---

const uiQuestions = `{"questions":[{"text":"Which database?","options":["PostgreSQL","SQLite"]}]}`

const uiClaudeQuestions = `[{"question":"Which database?","header":"DB","options":[{"label":"PostgreSQL","description":"a server"},{"label":"SQLite","description":"one file"}],"multiSelect":false},
	{"question":"Which extras?","header":"Extras","options":[{"label":"Redis"},{"label":"Kafka"},{"label":"S3"}],"multiSelect":true}]`

// uiInitialize initializes with the given client capabilities.
func uiInitialize(c *testClient, version string, caps map[string]any) {
	c.t.Helper()
	resp := c.request("initialize", map[string]any{"protocolVersion": version, "capabilities": caps,
		"clientInfo": map[string]any{"name": "ui-test", "version": "1"}})
	if resp["result"] == nil {
		c.t.Fatalf("initialize: %v", resp)
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// uiStartCall sends a tools/call without waiting and returns its id.
func uiStartCall(c *testClient, name string, args any) float64 {
	c.t.Helper()
	c.nextID++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.nextID, "method": "tools/call", "params": map[string]any{"name": name, "arguments": args}})
	c.send(string(b))
	return float64(c.nextID)
}

// uiNextRequest reads until telson sends a message with method, which it returns.
func uiNextRequest(c *testClient, method string) map[string]any {
	c.t.Helper()
	for {
		line := c.recvRaw()
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			c.t.Fatalf("%v: %s", err, line)
		}
		if m["method"] == method {
			m["_line"] = string(line)
			return m
		}
		if _, isNote := m["method"]; !isNote {
			c.t.Fatalf("waiting for %s, got %v", method, m)
		}
	}
}

// uiReply answers a server request with result.
func uiReply(c *testClient, id any, result any) {
	c.t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
	c.send(string(b))
}

func uiResult(t *testing.T, resp map[string]any) map[string]any {
	t.Helper()
	res, ok := resp["result"].(map[string]any)
	if !ok {
		t.Fatalf("no result: %v", resp)
	}
	return res
}

func TestAskUserQuestionElicitation(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	uiInitialize(c, "2025-11-25", map[string]any{"elicitation": map[string]any{}})
	id := uiStartCall(c, "AskUserQuestion", map[string]any{"questions_json": uiClaudeQuestions})
	req := uiNextRequest(c, "elicitation/create")
	p := req["params"].(map[string]any)
	if p["mode"] != "form" || !strings.Contains(p["message"].(string), "Which database?\nWhich extras?") {
		t.Errorf("params: %v", p)
	}
	schema := req["_line"].(string) // as sent: the properties' order is the form's order
	for _, want := range []string{
		`"properties":{"q1":{"description":"DB","oneOf":[{"const":"PostgreSQL","title":"PostgreSQL — a server"},{"const":"SQLite","title":"SQLite — one file"}],"title":"Which database?","type":"string"},"q2":{"description":"Extras","items":{"anyOf":[{"const":"Redis","title":"Redis"}`,
		`"minItems":1,"title":"Which extras?","type":"array"},"note":{`, `"required":["q1","q2"]`,
	} {
		if !strings.Contains(string(schema), want) {
			t.Errorf("schema %s\nlacks %s", schema, want)
		}
	}
	// The read loop stays free while the question waits: a ping is answered.
	if resp := c.request("ping", nil); resp["result"] == nil {
		t.Fatalf("ping: %v", resp)
	}
	uiReply(c, req["id"], map[string]any{"action": "accept", "content": map[string]any{"q1": "SQLite", "q2": []string{"Redis", "S3"}, "note": " keep it small "}})
	res := uiResult(t, c.waitResponse(id))
	want := `User has answered your questions: "Which database?"="SQLite", "Which extras?"="Redis, S3". The user added: "keep it small". You can now continue with the user's answers in mind.`
	if isError(res) || resultText(res) != want {
		t.Errorf("got %q", resultText(res))
	}
	sc, _ := json.Marshal(res["structuredContent"])
	if string(sc) != `{"answers":[{"question":"Which database?","selected":"SQLite"},{"question":"Which extras?","selected":["Redis","S3"]}],"note":"keep it small","status":"answered"}` {
		t.Errorf("structured: %s", sc)
	}
}

func TestAskUserQuestionLegacyForm(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	uiInitialize(c, "2025-06-18", map[string]any{"elicitation": map[string]any{}})
	id := uiStartCall(c, "AskUserQuestion", map[string]any{"questions_json": uiClaudeQuestions})
	req := uiNextRequest(c, "elicitation/create")
	p := req["params"].(map[string]any)
	schema, _ := json.Marshal(p["requestedSchema"])
	if _, hasMode := p["mode"]; hasMode || !strings.Contains(string(schema), `"enum":["PostgreSQL","SQLite"],"enumNames":["PostgreSQL — a server","SQLite — one file"]`) ||
		!strings.Contains(string(schema), `"q2_a":{"default":false,"title":"Which extras?: Redis","type":"boolean"},"q2_b"`) {
		t.Errorf("2025-06-18 form: %v %s", p["mode"], schema)
	}
	uiReply(c, req["id"], map[string]any{"action": "accept", "content": map[string]any{"q1": "PostgreSQL", "q2_a": false, "q2_b": true, "q2_c": true}})
	res := uiResult(t, c.waitResponse(id))
	if !strings.Contains(resultText(res), `"Which database?"="PostgreSQL", "Which extras?"="Kafka, S3". You can`) {
		t.Errorf("got %q", resultText(res))
	}
	// Without checkboxes ticked, the answer says so rather than being empty.
	id = uiStartCall(c, "AskUserQuestion", map[string]any{"questions_json": uiClaudeQuestions})
	req = uiNextRequest(c, "elicitation/create")
	uiReply(c, req["id"], map[string]any{"action": "accept", "content": map[string]any{}})
	res = uiResult(t, c.waitResponse(id))
	if !strings.Contains(resultText(res), `"Which database?"="(no answer)", "Which extras?"="(none selected)"`) {
		t.Errorf("got %q", resultText(res))
	}
}

func TestAskUserQuestionDeclineCancel(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	uiInitialize(c, "2025-11-25", map[string]any{"elicitation": map[string]any{"form": map[string]any{}}})
	for action, want := range map[string]string{"decline": "declined", "cancel": "dismissed"} {
		id := uiStartCall(c, "AskUserQuestion", map[string]any{"questions_json": uiQuestions})
		req := uiNextRequest(c, "elicitation/create")
		uiReply(c, req["id"], map[string]any{"action": action})
		res := uiResult(t, c.waitResponse(id))
		if isError(res) || !strings.HasPrefix(resultText(res), "User "+want+" the questions without answering.") {
			t.Errorf("%s: %q", action, resultText(res))
		}
		if sc, _ := json.Marshal(res["structuredContent"]); string(sc) != `{"answers":[],"status":"`+want+`"}` {
			t.Errorf("%s: structured %s", action, sc)
		}
	}
}

func TestAskUserQuestionMismatchedIDAndErrors(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	uiInitialize(c, "2025-11-25", map[string]any{"elicitation": map[string]any{}})
	id := uiStartCall(c, "AskUserQuestion", map[string]any{"questions_json": uiQuestions})
	req := uiNextRequest(c, "elicitation/create")
	uiReply(c, "telson-999", map[string]any{"action": "accept", "content": map[string]any{"q1": "SQLite"}})
	uiReply(c, 424242, map[string]any{"action": "decline"})
	if resp := c.request("ping", nil); resp["result"] == nil { // the stray replies changed nothing
		t.Fatalf("ping: %v", resp)
	}
	uiReply(c, req["id"], map[string]any{"action": "accept", "content": map[string]any{"q1": "PostgreSQL"}})
	if res := uiResult(t, c.waitResponse(id)); !strings.Contains(resultText(res), `"Which database?"="PostgreSQL"`) {
		t.Errorf("got %q", resultText(res))
	}
	// The client answers with an error: the questions come back for the chat.
	id = uiStartCall(c, "AskUserQuestion", map[string]any{"questions_json": uiQuestions})
	req = uiNextRequest(c, "elicitation/create")
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"error":{"code":-32602,"message":"form mode not supported"}}`, req["id"]))
	res := uiResult(t, c.waitResponse(id))
	if !isError(res) || !strings.Contains(resultText(res), "could not show the questions") || !strings.Contains(resultText(res), "form mode not supported") ||
		!strings.Contains(resultText(res), "1. Which database?\n   - PostgreSQL\n   - SQLite") {
		t.Errorf("got %q", resultText(res))
	}
	// An answer that is no elicitation result, and an unknown action.
	for _, bad := range []any{"yes", map[string]any{"action": "maybe"}} {
		id = uiStartCall(c, "AskUserQuestion", map[string]any{"questions_json": uiQuestions})
		req = uiNextRequest(c, "elicitation/create")
		uiReply(c, req["id"], bad)
		if res := uiResult(t, c.waitResponse(id)); !isError(res) {
			t.Errorf("%v: got %q", bad, resultText(res))
		}
	}
}

func TestAskUserQuestionTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-ask-timeout-ms", "300")
	uiInitialize(c, "2025-11-25", map[string]any{"elicitation": map[string]any{}})
	id := uiStartCall(c, "AskUserQuestion", map[string]any{"questions_json": uiQuestions})
	req := uiNextRequest(c, "elicitation/create")
	cancel := uiNextRequest(c, "notifications/cancelled") // never answered: telson withdraws the request
	if cancel["params"].(map[string]any)["requestId"] != req["id"] {
		t.Errorf("cancelled %v, want %v", cancel, req["id"])
	}
	res := uiResult(t, c.waitResponse(id))
	if !isError(res) || !strings.Contains(resultText(res), "did not answer within 300ms") || !strings.Contains(resultText(res), "1. Which database?") {
		t.Errorf("got %q", resultText(res))
	}
	uiReply(c, req["id"], map[string]any{"action": "accept", "content": map[string]any{"q1": "SQLite"}}) // too late: ignored
	if resp := c.request("ping", nil); resp["result"] == nil {
		t.Fatalf("ping after late answer: %v", resp)
	}

	// Cancelling the tool call cancels the question.
	c2 := startServer(t)
	uiInitialize(c2, "2025-11-25", map[string]any{"elicitation": map[string]any{}})
	id = uiStartCall(c2, "AskUserQuestion", map[string]any{"questions_json": uiQuestions})
	req = uiNextRequest(c2, "elicitation/create")
	c2.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%v}}`, id))
	cancel = uiNextRequest(c2, "notifications/cancelled")
	if cancel["params"].(map[string]any)["requestId"] != req["id"] {
		t.Errorf("cancelled %v, want %v", cancel, req["id"])
	}
	if resp := c2.request("ping", nil); resp["result"] == nil { // and no reply to the cancelled call came first
		t.Fatalf("ping: %v", resp)
	}
}

// uiModernCall is a 2026-07-28 tools/call with extra params.
func uiModernCall(c *testClient, caps map[string]any, args any, extra map[string]any) map[string]any {
	c.t.Helper()
	p := map[string]any{"name": "AskUserQuestion", "arguments": args, "_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": caps}}
	for k, v := range extra {
		p[k] = v
	}
	return uiResult(c.t, c.request("tools/call", p))
}

func TestAskUserQuestionModernRoundTrip(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	elicit := map[string]any{"elicitation": map[string]any{}}
	args := map[string]any{"questions_json": uiQuestions}
	first := uiModernCall(c, elicit, args, nil)
	state, _ := first["requestState"].(string)
	ask, _ := first["inputRequests"].(map[string]any)["ask"].(map[string]any)
	if first["resultType"] != "input_required" || state == "" || ask["method"] != "elicitation/create" || first["content"] != nil {
		t.Fatalf("first: %v", first)
	}
	if p := ask["params"].(map[string]any); p["mode"] != "form" || p["requestedSchema"] == nil {
		t.Errorf("params: %v", p)
	}
	answer := map[string]any{"ask": map[string]any{"action": "accept", "content": map[string]any{"q1": "PostgreSQL"}}}
	res := uiModernCall(c, elicit, args, map[string]any{"inputResponses": answer, "requestState": state})
	if res["resultType"] != "complete" || isError(res) || resultText(res) != `User has answered your questions: "Which database?"="PostgreSQL". You can now continue with the user's answers in mind.` {
		t.Errorf("retry: %v", res)
	}
	// Retried without an answer: asked again.
	if again := uiModernCall(c, elicit, args, map[string]any{"inputResponses": map[string]any{}, "requestState": state}); again["resultType"] != "input_required" {
		t.Errorf("no answer: %v", again)
	}
	declined := uiModernCall(c, elicit, args, map[string]any{"inputResponses": map[string]any{"ask": map[string]any{"action": "decline"}}, "requestState": state})
	if !strings.HasPrefix(resultText(declined), "User declined") {
		t.Errorf("decline: %v", declined)
	}
	// Forged, foreign or missing state is refused.
	exp, _, _ := strings.Cut(state, ".")
	other := map[string]any{"questions_json": `[{"text":"Deploy now?","options":["yes","no"]}]`}
	for name, tc := range map[string]struct {
		args  any
		extra map[string]any
	}{
		"forged":   {args, map[string]any{"inputResponses": answer, "requestState": exp + ".AAAA"}},
		"later":    {args, map[string]any{"inputResponses": answer, "requestState": "9" + state}},
		"foreign":  {other, map[string]any{"inputResponses": answer, "requestState": state}},
		"no state": {args, map[string]any{"inputResponses": answer}},
	} {
		res := uiModernCall(c, elicit, tc.args, tc.extra)
		if !isError(res) || res["resultType"] != "complete" || !strings.Contains(resultText(res), "requestState") {
			t.Errorf("%s: %v", name, res)
		}
	}
	// A client without elicitation gets the questions for the chat.
	if res := uiModernCall(c, map[string]any{}, args, nil); !isError(res) || !strings.Contains(resultText(res), "cannot show questions") {
		t.Errorf("no elicitation: %v", res)
	}
}

// TestAskUserQuestionStateExpiry signs a state that lapsed a minute ago
// with the server's own key: it verifies, and is refused as too late.
func TestAskUserQuestionStateExpiry(t *testing.T) {
	t.Parallel()
	srv := newServer(loadConfig(nil), io.Discard)
	defer srv.close()
	past := time.Now().Add(-time.Minute).Unix()
	params, _ := json.Marshal(map[string]any{"requestState": fmt.Sprintf("%d.%s", past, askStateMAC(srv.stateKey, past, uiQuestions)),
		"inputResponses": map[string]any{"ask": map[string]any{"action": "accept", "content": map[string]any{"q1": "SQLite"}}}})
	r := &rpcRequest{s: newSession(srv, io.Discard), params: params, version: versionModern, modern: true}
	qs, _ := parseQuestions(uiQuestions)
	res := askRoundTrip(&toolCall{s: r.s, req: r}, qs, uiQuestions, time.Minute)
	if !res.isError || !strings.Contains(res.content[0].Text, "the answer came after the 1m0s limit") {
		t.Errorf("got %+v", res)
	}
}

func TestAskUserQuestionValidation(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	uiInitialize(c, "2025-11-25", map[string]any{"elicitation": map[string]any{}})
	opts := `["a","b"]`
	q := func(s string) string { return `{"text":"` + s + `","options":` + opts + `}` }
	eleven := `["1","2","3","4","5","6","7","8","9","10","11"]`
	for input, want := range map[string]string{
		"{\"questions\": [\n  {\"text\": \"x\" \"options\": []}]}": `invalid character '"' after object key:value pair at line 2, column 16 (byte 32)`,
		`{"questions":[`:   "unexpected end of JSON input at line 1, column 14 (byte 14)",
		`"[{\"text\": }]"`: "not valid JSON: invalid character '}' looking for beginning of value at line 1, column 11",
		`{"qs":[]}`:        "0 questions; ask 1 to 4 at a time",
		`42`:               "a value must be an object, not a number",
		`[]`:               "0 questions; ask 1 to 4 at a time",
		`[` + strings.Repeat(q("x")+",", 4) + q("y") + `]`: "5 questions; ask 1 to 4 at a time",
		`["Which?"]`:                                             "a value must be an object, not a string",
		`[{"options":["a","b"]}]`:                                `questions[0] has no "question" (or "text")`,
		`[{"question":"  ","options":["a","b"]}]`:                `questions[0] has no "question" (or "text")`,
		`[` + q("x") + `,` + q("x") + `]`:                        `questions[1] repeats the question "x"`,
		`[{"text":"x","options":["a","b"],"multiSelect":"yes"}]`: "multiSelect must be true or false, not a string",
		`[{"text":"x"}]`:                                         "questions[0] has 0 options; give 2 to 10",
		`{"questions":[{"text":"x","options":"a,b"}]}`:           "questions.options must be an array, not a string",
		`[{"text":"x","options":["a"]}]`:                         "questions[0] has 1 options; give 2 to 10",
		`[{"text":"x","options":` + eleven + `}]`:                "questions[0] has 11 options; give 2 to 10",
		`[{"text":"x","options":["a",3]}]`:                       `an option must be a string or {"label":"...","description":"..."}, got 3`,
		`[{"text":"x","options":["a",{"description":"d"}]}]`:     "questions[0].options[1] has no label",
		`[{"text":"x","options":["a"," a "]}]`:                   `questions[0] lists the option "a" twice`,
	} {
		res := c.callTool("AskUserQuestion", map[string]any{"questions_json": input})
		if !isError(res) || !strings.Contains(resultText(res), want) {
			t.Errorf("%s:\n want %q\n got  %q", input, want, resultText(res))
		}
	}
	for _, args := range []map[string]any{{}, {"questions_json": ""}, {"questions_json": 5}, {"questions_json": strings.Repeat(" ", 100001)}} {
		if res := c.callTool("AskUserQuestion", args); !isError(res) {
			t.Errorf("%v: accepted", args)
		}
	}
	if len(c.notes) != 0 {
		t.Errorf("invalid input reached the client: %v", c.notes)
	}
}

func TestAskUserQuestionNoElicitation(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.initialize("2025-06-18")
	// The JSON may be encoded twice, and the short shape works.
	res := c.callTool("AskUserQuestion", map[string]any{"questions_json": fmt.Sprintf("%q", uiClaudeQuestions)})
	want := `AskUserQuestion: this client cannot show questions to the user (it did not declare form elicitation). Ask the user these questions in chat yourself and wait for the reply:

1. Which database?
   - PostgreSQL: a server
   - SQLite: one file
2. Which extras? (several may be chosen)
   - Redis
   - Kafka
   - S3`
	if !isError(res) || resultText(res) != want || res["structuredContent"] != nil {
		t.Errorf("got %q", resultText(res))
	}
	// Elicitation declared in a version without it, or URL mode only: no form either.
	for _, tc := range []struct {
		v    string
		caps map[string]any
	}{{"2025-03-26", map[string]any{"elicitation": map[string]any{}}}, {"2025-11-25", map[string]any{"elicitation": map[string]any{"url": map[string]any{}}}}} {
		c := startServer(t)
		uiInitialize(c, tc.v, tc.caps)
		if res := c.callTool("AskUserQuestion", map[string]any{"questions_json": uiQuestions}); !isError(res) || !strings.Contains(resultText(res), "cannot show questions") {
			t.Errorf("%s %v: %q", tc.v, tc.caps, resultText(res))
		}
	}
}

func TestAskUserQuestionTerminalDialogue(t *testing.T) {
	t.Parallel()
	qs, err := parseQuestions(uiClaudeQuestions)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	raw, err := ttyDialogue(bufio.NewReader(strings.NewReader("2\n1, 3\n")), &out, qs)
	if err != nil {
		t.Fatal(err)
	}
	if got := askAnswer(qs, raw).content[0].Text; !strings.Contains(got, `"Which database?"="SQLite", "Which extras?"="Redis, S3"`) {
		t.Errorf("got %q", got)
	}
	if !strings.Contains(out.String(), "   1) PostgreSQL — a server\n") || !strings.Contains(out.String(), "numbers separated by commas") {
		t.Errorf("terminal shows %q", out.String())
	}
	raw, _ = ttyDialogue(bufio.NewReader(strings.NewReader("MySQL, really\n7")), &out, qs)
	if got := askAnswer(qs, raw).content[0].Text; !strings.Contains(got, `"Which database?"="MySQL, really", "Which extras?"="7"`) {
		t.Errorf("typed answers: %q", got)
	}
	raw, _ = ttyDialogue(bufio.NewReader(strings.NewReader("1, 2\n2,9\n")), &out, qs) // two picks for one choice: taken as text
	if got := askAnswer(qs, raw).content[0].Text; !strings.Contains(got, `"Which database?"="1, 2", "Which extras?"="2,9"`) {
		t.Errorf("typed answers: %q", got)
	}
	if _, err := ttyDialogue(bufio.NewReader(iotest.TimeoutReader(strings.NewReader("Postgr"))), &out, qs); err != iotest.ErrTimeout {
		t.Errorf("a half-typed answer at the timeout: %v", err)
	}
	for _, in := range []string{"\n", "", "1\n", "1\n\n"} { // an empty line or the end of input dismisses
		raw, err := ttyDialogue(bufio.NewReader(strings.NewReader(in)), &out, qs)
		if got := askAnswer(qs, raw).content[0].Text; err != nil || !strings.HasPrefix(got, "User dismissed") {
			t.Errorf("%q: %v %q", in, err, got)
		}
	}
}

// TestAskUserQuestionTerminal runs telson under script(1), which gives it a
// terminal of its own, so ASK_TTY asks there.
func TestAskUserQuestionTerminal(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script(1) is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	args := shellQuote(`{"questions_json":"[{\"text\":\"Which db?\",\"options\":[\"PostgreSQL\",\"SQLite\"]}]"}`)
	cmd := exec.CommandContext(ctx, "script", "-qc", shellQuote(os.Args[0])+" -ask-tty on call AskUserQuestion "+args, "/dev/null")
	cmd.Env = append(os.Environ(), "TELSON_RUN_MAIN=1")
	cmd.Stdin = strings.NewReader("2\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1) PostgreSQL") || !strings.Contains(string(out), `User has answered your questions: "Which db?"="SQLite".`) {
		t.Errorf("%v: %s", err, out)
	}
}

func TestReadImageListed(t *testing.T) {
	c := startServer(t, "-image-max-edge", "1234", "-image-max-bytes", "99999999")
	c.initialize("2025-06-18")
	tools := uiResult(t, c.request("tools/list", nil))["tools"].([]any)
	found := 0
	for _, x := range tools {
		m := x.(map[string]any)
		switch m["name"] {
		case "ReadImage":
			found++
			if !strings.Contains(m["description"].(string), "larger than 1234 px on the long edge or 6.0 MB") { // the byte limit is capped
				t.Errorf("description: %s", m["description"])
			}
		case "AskUserQuestion":
			found++
			if m["outputSchema"] == nil {
				t.Error("AskUserQuestion has no outputSchema")
			}
		}
	}
	if found != 2 {
		t.Errorf("found %d of the 2 tools", found)
	}
}

// BenchmarkUIShrinkPhoto times ReadImage's scaling of a 4000×3000 photo to
// 2000×1500 JPEG; BenchmarkUIDecodePhoto, decoding that photo, is the
// baseline to compare it with.
func BenchmarkUIShrinkPhoto(b *testing.B) {
	img, _ := jpeg.Decode(bytes.NewReader(uiBenchPhoto(b)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, _, err := shrinkImage(context.Background(), img, 2000, 5000000); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUIDecodePhoto(b *testing.B) {
	data := uiBenchPhoto(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := jpeg.Decode(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

func uiBenchPhoto(b *testing.B) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 4000, 3000))
	for y := 0; y < 3000; y++ {
		for x := 0; x < 4000; x++ {
			i := img.PixOffset(x, y)
			img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = uint8(x/16), uint8(y/12), uint8((x^y)&0xff), 255
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}
