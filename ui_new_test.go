// ui_new_test.go tests ReadImage's memory bound (hostile images generated
// here, measured as the real binary's peak resident memory) and
// AskUserQuestion's array argument and its answer to clients without
// elicitation.
package main

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// uiChunk writes one PNG chunk.
func uiChunk(w *bufio.Writer, kind string, data []byte) {
	binary.Write(w, binary.BigEndian, uint32(len(data)))
	w.WriteString(kind)
	w.Write(data)
	binary.Write(w, binary.BigEndian, crc32.ChecksumIEEE(append([]byte(kind), data...)))
}

// uiZeroPNG writes a valid w×h PNG of black pixels, compressing the rows as it
// goes so that even a huge image costs the test little memory.
func uiZeroPNG(t *testing.T, path string, w, h int, depth, colorType byte) {
	t.Helper()
	channels := map[byte]int{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colorType]
	rowBytes := 1 + (w*channels*int(depth)+7)/8
	var idat bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&idat, zlib.BestSpeed)
	zero := make([]byte, 1<<20)
	for y := 0; y < h; y++ {
		for n := rowBytes; n > 0; n -= min(n, len(zero)) {
			zw.Write(zero[:min(n, len(zero))])
		}
	}
	zw.Close()
	ihdr := binary.BigEndian.AppendUint32(nil, uint32(w))
	ihdr = binary.BigEndian.AppendUint32(ihdr, uint32(h))
	ihdr = append(ihdr, depth, colorType, 0, 0, 0)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	bw.WriteString("\x89PNG\r\n\x1a\n")
	uiChunk(bw, "IHDR", ihdr)
	if colorType == 3 {
		uiChunk(bw, "PLTE", []byte{0, 0, 0, 255, 255, 255})
	}
	uiChunk(bw, "IDAT", idat.Bytes())
	uiChunk(bw, "IEND", nil)
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
}

// uiProgressiveJPEG builds a progressive (SOF2) w×h colour JPEG, 4:4:4, of one
// grey: a single DC scan whose every difference is the 1-bit code 0.
func uiProgressiveJPEG(w, h int) []byte {
	var b bytes.Buffer
	seg := func(marker byte, data []byte) {
		b.Write([]byte{0xff, marker, byte((len(data) + 2) >> 8), byte(len(data) + 2)})
		b.Write(data)
	}
	b.Write([]byte{0xff, 0xd8})
	seg(0xdb, append([]byte{0}, bytes.Repeat([]byte{1}, 64)...))
	seg(0xc2, []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 3, 1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0})
	seg(0xc4, append([]byte{0x00, 1}, append(make([]byte, 15), 0)...)) // DC table 0: one 1-bit code, category 0
	seg(0xda, []byte{3, 1, 0x00, 2, 0x00, 3, 0x00, 0, 0, 0})
	bits := 3 * ((w + 7) / 8) * ((h + 7) / 8)
	b.Write(make([]byte, bits/8))
	if bits%8 != 0 {
		b.WriteByte(0xff >> (bits % 8)) // the last byte padded with ones
	}
	b.Write([]byte{0xff, 0xd9})
	return b.Bytes()
}

// uiPeakCall runs "telson call ReadImage" on path as its own process and
// returns its output and its peak resident memory in MB.
func uiPeakCall(t *testing.T, path string) (string, int64) {
	t.Helper()
	args, _ := json.Marshal(map[string]string{"file_path": path})
	cmd := exec.Command(os.Args[0], "call", "ReadImage", string(args))
	cmd.Env = append(os.Environ(), "TELSON_RUN_MAIN=1")
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState == nil {
		t.Fatalf("%s did not run: %s", path, out)
	}
	return string(out), cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss / 1024
}

// TestReadImagePeakMemory reads the hostile images of issue 13 with the real
// binary: under the pixel cap, they used to cost gigabytes. Each must stay
// under 300 MB, refused before decoding or scaled within the output's memory.
func TestReadImagePeakMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and reads images of up to 100 megapixels")
	}
	if bi, _ := debug.ReadBuildInfo(); slices.Contains(bi.Settings, debug.BuildSetting{Key: "-race", Value: "true"}) {
		t.Skip("the race detector's shadow memory would be measured too")
	}
	dir := t.TempDir()
	paths := map[string]string{
		"wide grey PNG":     filepath.Join(dir, "wide-grey.png"),
		"wide palette PNG":  filepath.Join(dir, "wide-palette.png"),
		"16-bit PNG":        filepath.Join(dir, "deep.png"),
		"progressive JPEG":  filepath.Join(dir, "progressive.jpg"),
		"small progressive": filepath.Join(dir, "small-progressive.jpg"),
		"small 16-bit PNG":  filepath.Join(dir, "small-deep.png"),
	}
	uiZeroPNG(t, paths["wide grey PNG"], 50_000_000, 1, 8, 0)
	uiZeroPNG(t, paths["wide palette PNG"], 50_000_000, 1, 8, 3)
	uiZeroPNG(t, paths["16-bit PNG"], 10000, 10000, 16, 2)
	uiWriteFile(t, dir, "progressive.jpg", uiProgressiveJPEG(10000, 10000))
	uiWriteFile(t, dir, "small-progressive.jpg", uiProgressiveJPEG(3600, 3600))
	uiZeroPNG(t, paths["small 16-bit PNG"], 4000, 3000, 16, 6)
	want := map[string]string{
		"wide grey PNG":     "; decoding it would take 600 MB of memory, over telson's 200 MB: shrink it in Bash first",
		"wide palette PNG":  "scaled to 2000×1",
		"16-bit PNG":        "decoding it would take 800 MB of memory",
		"progressive JPEG":  "decoding it would take 1500 MB of memory",
		"small progressive": "scaled to 2000×2000",
		"small 16-bit PNG":  "scaled to 2000×1500 and re-encoded as image/png",
	}
	for name, path := range paths {
		out, peak := uiPeakCall(t, path)
		t.Logf("%s: peak %d MB: %s", name, peak, strings.TrimSpace(out))
		if peak >= 300 {
			t.Errorf("%s: peak %d MB, want under 300", name, peak)
		}
		if !strings.Contains(out, want[name]) {
			t.Errorf("%s: got %q, want %q", name, out, want[name])
		}
	}
}

func TestAskUserQuestionArray(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	uiInitialize(c, "2025-11-25", map[string]any{"elicitation": map[string]any{}})
	var questions any
	json.Unmarshal([]byte(askShape), &questions)
	id := uiStartCall(c, "AskUserQuestion", map[string]any{"questions": questions, "wait_for_previous": true})
	req := uiNextRequest(c, "elicitation/create")
	if !strings.Contains(req["_line"].(string), `"oneOf":[{"const":"PostgreSQL","title":"PostgreSQL — a server"}`) {
		t.Errorf("form: %s", req["_line"])
	}
	uiReply(c, req["id"], map[string]any{"action": "accept", "content": map[string]any{"q1": "SQLite"}})
	res := uiResult(t, c.waitResponse(id))
	if isError(res) || !strings.HasPrefix(resultText(res), `User has answered your questions: "Which database?"="SQLite".`) {
		t.Errorf("got %q", resultText(res))
	}
	// Neither argument: the error shows the shape.
	res = c.callTool("AskUserQuestion", map[string]any{})
	if !isError(res) || !strings.Contains(resultText(res), askShape) {
		t.Errorf("no questions: %q", resultText(res))
	}
}

// TestAskUserQuestionInChatStructured: without elicitation, the structured
// content alone tells the model what to do and what to ask.
func TestAskUserQuestionInChatStructured(t *testing.T) {
	t.Parallel()
	c := startServer(t)
	c.initialize("2025-11-25")
	res := c.callTool("AskUserQuestion", map[string]any{"questions_json": uiQuestions})
	sc, _ := res["structuredContent"].(map[string]any)
	msg, _ := sc["message"].(string)
	qs, _ := sc["questions"].([]any)
	if isError(res) || sc["status"] != "ask_in_chat" || !strings.Contains(msg, "Do not assume an answer: ask the user") || len(qs) != 1 {
		t.Errorf("got %v", res)
	}
}
