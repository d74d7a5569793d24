package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// TestReadDocsExtract: the converter keeps a page's main content and drops its furniture.
func TestReadDocsExtract(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file       string
		want, drop []string
	}{
		{"article", // heavy boilerplate around an article: only the article comes back
			[]string{"For the first time in forty years", "calm haul-out sites", "Volunteers will count the colony"},
			[]string{"cookies", "Share on", "newsletter", "Related stories", "Otters", "Comments", "wonderful news",
				"Most read", "All rights reserved", "Sport"}},
		{"docs", // a docs page with a sidebar: the docs content whole
			[]string{"# Configuration", "`toolkit.toml`", "## Options", "| `jobs` | 4 | Parallel jobs |",
				"```toml\njobs = 8\ncache = false\n```", "- Keys are case sensitive.", "[Command line](https://example.com/cli)"},
			[]string{"Getting started", "FAQ"}},
		{"hints", // class and id words match whole: commented, shared and pageRow are content
			[]string{"only contains the word commented", "## Shared history", "a longer word than share", "must come back too"},
			[]string{"Share this"}},
		{"layout", // a layout table is unwrapped; its code stays fenced
			[]string{"# Old style page", "```\nfor i in range(3):\n    print(i)\n```", "The loop prints three numbers."},
			[]string{"|"}},
	}
	for _, tc := range cases {
		src, err := os.ReadFile("testdata/readdocs/extract/" + tc.file + ".html")
		if err != nil {
			t.Fatal(err)
		}
		md := htmlToMarkdown(string(src), "https://example.com/page", 1<<20, false).text
		for _, w := range tc.want {
			if !strings.Contains(md, w) {
				t.Errorf("%s: lacks %q:\n%s", tc.file, w, md)
			}
		}
		for _, d := range tc.drop {
			if strings.Contains(md, d) {
				t.Errorf("%s: keeps %q:\n%s", tc.file, d, md)
			}
		}
	}
}

// TestReadDocsMath: MathJax output keeps its text; version 2's TeX source is read as $TeX$.
func TestReadDocsMath(t *testing.T) {
	t.Parallel()
	v2 := `<p>Energy <span class="MathJax" id="MathJax-Element-1-Frame"><span>E=mc2</span></span>` +
		`<script type="math/tex" id="MathJax-Element-1">E=mc^2</script> holds.</p>` +
		`<div><script type="math/tex; mode=display">a+b</script></div><script>var x = 1</script>`
	v3 := `<p>Let <mjx-container class="MathJax" jax="CHTML"><mjx-math aria-hidden="true"><mjx-c></mjx-c>` +
		`</mjx-math><mjx-assistive-mml><math><mi>x</mi><mo>=</mo><mn>2</mn></math></mjx-assistive-mml>` +
		`</mjx-container> be given.</p>`
	for src, want := range map[string]string{v2: "Energy $E=mc^2$ holds.\n\n$$a+b$$", v3: "Let x=2 be given."} {
		if md := htmlToMarkdown(src, "", 1000, false).text; md != want {
			t.Errorf("%s: got %q, want %q", src, md, want)
		}
	}
}

// TestReadDocsNeverEmpty: a page that is all furniture still gives its text.
func TestReadDocsNeverEmpty(t *testing.T) {
	t.Parallel()
	md := htmlToMarkdown(`<body><div class="sidebar"><p>Only <a href="/x">text</a> of the page.</p></div></body>`, "", 1000, false).text
	if md != "Only [text](/x) of the page." {
		t.Errorf("got %q", md)
	}
}

// TestReadDocsSourceWins: when the page's scripts removed the article, the
// HTML as the server sent it is read instead.
func TestReadDocsSourceWins(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("testdata/readdocs/extract/article.html")
	if err != nil {
		t.Fatal(err)
	}
	dom := `<html><head><title>Harbour seals</title></head><body><nav><a href="/">Home</a></nav>
<p>Please enable JavaScript to read this article.</p></body></html>`
	o := &readDocsOut{body: dom, source: string(src)}
	md, _ := o.convert(readDocsArgs{Format: "markdown", MaxLength: 30000})
	if !strings.Contains(md, "For the first time in forty years") {
		t.Errorf("got %q", md)
	}
	o = &readDocsOut{body: string(src), source: dom} // the page as shown is better: it stays
	if md, _ := o.convert(readDocsArgs{Format: "text", MaxLength: 30000}); !strings.Contains(md, "Volunteers") {
		t.Errorf("text: got %q", md)
	}
}

// TestReadDocsScriptsRemoveArticleChromium: a page whose script removes
// the article comes back with the article.
func TestReadDocsScriptsRemoveArticleChromium(t *testing.T) {
	readdocsNeedBrowser(t)
	src, err := os.ReadFile("testdata/readdocs/extract/article.html")
	if err != nil {
		t.Fatal(err)
	}
	page := strings.Replace(string(src), "</body>",
		`<script>document.querySelector('.main-column').innerHTML = '<p>Subscribe to read.</p>'</script></body>`, 1)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, page)
	}))
	defer site.Close()
	c := startServer(t)
	c.initialize("2025-06-18")
	text, _, isErr := readdocsCall(t, c, map[string]any{"url": site.URL + "/"})
	if isErr || !strings.Contains(text, "Volunteers will count the colony") {
		t.Errorf("got %s", text)
	}
}

// TestReadDocsBounded: output is bounded by the part asked for, whatever the
// page's shape; memory stays under 300 MB. Read without a browser.
func TestReadDocsBounded(t *testing.T) {
	t.Parallel()
	var table, big strings.Builder
	table.WriteString("<table><tr>" + strings.Repeat("<td>h</td>", 64) + "</tr>")
	for table.Len() < 2400<<10 {
		table.WriteString("<tr><td>cell</td></tr>\n")
	}
	big.WriteString("<html><body>")
	for big.Len() < 9900<<10 {
		big.WriteString("<div><p>Some text with <a href='/x'>a link</a>, and more words.</p><ul><li>item</li></ul></div>\n")
	}
	pages := map[string]string{"/table": table.String(), "/big": big.String(),
		"/title": "<title>" + strings.Repeat("t", 20<<20) + "</title><p>body</p>"}
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, pages[r.URL.Path])
	}))
	defer site.Close()
	c := startBinary(t, []string{"PATH=" + t.TempDir(), "TELSON_READDOCS_BROWSER=0"})
	c.initialize("2025-06-18")
	for _, path := range []string{"/table", "/big", "/title"} {
		text, sc, isErr := readdocsCall(t, c, map[string]any{"url": site.URL + path, "max_length": 1000})
		if isErr || len(text) > 4000 {
			t.Errorf("%s: error %v, %d bytes of reply", path, isErr, len(text))
		}
		if path != "/title" && (sc["truncated"] != true || sc["next_start_index"] != float64(1000) ||
			!strings.Contains(text, "More content: the page has at least ")) || strings.Contains(text, "<error>") {
			t.Errorf("%s: %v\n%s", path, sc, text[max(0, len(text)-300):])
		}
		t.Logf("%s: peak %.0f MB", path, procStatusKB(c.cmd.Process.Pid, "VmHWM")/1024)
	}
	peak := procStatusKB(c.cmd.Process.Pid, "VmHWM") / 1024
	t.Logf("peak memory %.0f MB", peak)
	if info, _ := debug.ReadBuildInfo(); peak > 300 && !slices.Contains(info.Settings, debug.BuildSetting{Key: "-race", Value: "true"}) {
		t.Errorf("peak memory %.0f MB, want under 300", peak)
	}
}
