package main

// search_new_test.go: WebSearch's shared extractor on the real engine pages
// of ../shared/fixtures/search, and the result of a call where only some
// engines, or none, answer.

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// searchEngineNamed returns the row of searchEngines called name.
func searchEngineNamed(t *testing.T, name string) *searchEngine {
	t.Helper()
	i := slices.IndexFunc(searchEngines, func(e searchEngine) bool { return e.name == name })
	if i < 0 {
		t.Fatalf("no engine %q", name)
	}
	return &searchEngines[i]
}

// TestWebSearchExtractorRealPages reads every real result page with its
// engine's row alone (no HTTP), with the expected values of SOURCES.md.
func TestWebSearchExtractorRealPages(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "shared", "fixtures", "search")
	if _, err := os.Stat(dir); err != nil {
		t.Skip("no ../shared/fixtures/search")
	}
	cases := []struct {
		engine, file string
		n            int
		first        searchHit // snippet: a prefix
		secondURL    string
	}{
		{"duckduckgo", "duckduckgo_html_2025_golang.html", 10,
			searchHit{"The Go Programming Language", "https://go.dev/",
				"Go is an open source programming language"},
			"https://en.wikipedia.org/wiki/Go_(programming_language)"},
		{"duckduckgo", "duckduckgo_html_2020_exit_vim.html", 30,
			searchHit{"vi - How do I exit the Vim editor? - Stack Overflow",
				"https://stackoverflow.com/questions/11828270/how-do-i-exit-the-vim-editor", ""}, ""},
		{"brave", "brave_html_2026_excerpt.html", 1,
			searchHit{"GitHub - react/react: The library for web and native user interfaces. · GitHub",
				"https://github.com/react/react", "The library for web and native user interfaces."}, ""},
		{"brave", "brave_html_2023_full.html", 19,
			searchHit{"What is a query? Explore database queries and more",
				"https://www.techtarget.com/searchdatamanagement/definition/query",
				"Learn about database queries"}, ""},
		{"yahoo", "yahoo_html_2026_excerpt.html", 1,
			searchHit{"GitHub - react/react: The library for web and native user ...",
				"https://github.com/react/react", "The library for web and native user interfaces."}, ""},
		// SOURCES.md counts 14 b_algo blocks, but 4 are answer-card divs: 10 are result items.
		{"bing", "bing_html_2023_sr.html", 10,
			searchHit{"322 Words and Phrases for Good Results - Power Thesaurus",
				"https://www.powerthesaurus.org/good_results/synonyms", "Good Results synonyms"},
			"https://www.powerthesaurus.org/very_good_result/synonyms"},
		{"wikipedia", "wikipedia_api_list_search_2025.json", 2,
			searchHit{"North America", "https://en.wikipedia.org/wiki/North_America",
				"North America is a continent"},
			"https://en.wikipedia.org/wiki/United_States"},
		{"mojeek", "mojeek_403_blocked_2023.html", 0, searchHit{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join(dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			hits, listed, err := searchEngineNamed(t, tc.engine).read(string(body))
			hits = searchTidy(hits)
			if err != nil || len(hits) != tc.n {
				t.Fatalf("got %d results (err %v), want %d: %+v", len(hits), err, tc.n, hits)
			}
			if tc.n == 0 {
				if listed {
					t.Error("a block page read as a result list")
				}
				return
			}
			h := hits[0]
			if h.title != tc.first.title || h.url != tc.first.url ||
				!strings.HasPrefix(h.snippet, tc.first.snippet) {
				t.Errorf("first: got %q %q %q, want %q %q %q…", h.title, h.url, h.snippet,
					tc.first.title, tc.first.url, tc.first.snippet)
			}
			if tc.secondURL != "" && hits[1].url != tc.secondURL {
				t.Errorf("second: got %q, want %q", hits[1].url, tc.secondURL)
			}
			for _, h := range hits {
				if h.title == "" || strings.Contains(h.title+h.snippet, "</") {
					t.Errorf("not plain text: %+v", h)
				}
			}
		})
	}
}

// TestWebSearchPartialFailure: with some engines down and results found the
// call succeeds, and its structured content names each failed engine.
func TestWebSearchPartialFailure(t *testing.T) {
	t.Parallel()
	ddg := searchServe(t, searchFilePage(t, "testdata/websearch/duckduckgo.html", 200, false))
	limited := searchServe(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	})
	broken := searchServe(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	c := startServer(t, "-set", "SEARCH_URL_DUCKDUCKGO="+ddg.URL, "-set", "SEARCH_URL_BRAVE="+limited.URL,
		"-set", "SEARCH_URL_GITHUB="+broken.URL, "-set", "SEARCH_BACKOFF_MS=0")
	c.initialize("2025-06-18")
	engines := []string{"duckduckgo", "brave", "github"}
	res := c.callTool("WebSearch", map[string]any{"query": "golang", "engines": engines})
	if isError(res) {
		t.Fatalf("partial failure is an error: %s", resultText(res))
	}
	sc, _ := res["structuredContent"].(map[string]any)
	results, _ := sc["results"].([]any)
	fates, _ := sc["engines"].([]any)
	if len(results) != 2 || len(fates) != 3 || sc["message"] != nil {
		t.Fatalf("structuredContent: %v", sc)
	}
	want := map[string][2]string{"duckduckgo": {"ok", "2 results"},
		"brave": {"rate-limited", "HTTP 429"}, "github": {"error", "HTTP 500"}}
	for _, e := range fates {
		m := e.(map[string]any)
		w := want[m["name"].(string)]
		if m["status"] != w[0] || m["detail"] != w[1] {
			t.Errorf("engine %v, want status %q detail %q", m, w[0], w[1])
		}
	}
	text := resultText(res)
	if !strings.Contains(text, "- brave: rate-limited (HTTP 429)") ||
		!strings.Contains(text, "- github: error (HTTP 500)") {
		t.Errorf("text does not name the failed engines:\n%s", text)
	}
}

// TestWebSearchNoResults: engines that answer with nothing make a plain
// success that says so, in the text and in the structured content; only
// every engine failing is an error, and its structured content says why.
func TestWebSearchNoResults(t *testing.T) {
	t.Parallel()
	empty := searchServe(t, searchFilePage(t, "testdata/websearch/duckduckgo_empty.html", 200, false))
	broken := searchServe(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	c := startServer(t, "-set", "SEARCH_URL_DUCKDUCKGO="+empty.URL,
		"-set", "SEARCH_URL_GITHUB="+broken.URL, "-set", "SEARCH_BACKOFF_MS=0")
	c.initialize("2025-06-18")
	both := []string{"duckduckgo", "github"}
	res := c.callTool("WebSearch", map[string]any{"query": "zzqx", "engines": both})
	sc, _ := res["structuredContent"].(map[string]any)
	msg, _ := sc["message"].(string)
	if isError(res) || !strings.HasPrefix(msg, "No results") ||
		!strings.Contains(resultText(res), msg) {
		t.Errorf("no results: isError %v, structured %v, text %q", isError(res), sc, resultText(res))
	}
	res = c.callTool("WebSearch", map[string]any{"query": "zzqx", "engines": []string{"github"}})
	sc, _ = res["structuredContent"].(map[string]any)
	engines, _ := sc["engines"].([]any)
	if !isError(res) || sc["message"] != "every engine failed" || len(engines) != 1 {
		t.Errorf("every engine failed: isError %v, structured %v", isError(res), sc)
	}
}

// TestWebSearchKeyNotShown: a failed request's detail leaves out the URL,
// which holds the Google API key.
func TestWebSearchKeyNotShown(t *testing.T) {
	t.Parallel()
	ts := searchServe(t, func(w http.ResponseWriter, r *http.Request) {})
	ts.Close() // nothing listens there any more
	o := searchAsk(t, "google", ts.URL, "GOOGLE_API_KEY", "secret-key", "GOOGLE_CSE_ID", "cx1")
	if o.Status != "error" || o.Detail == "" || strings.Contains(o.Detail, "secret-key") {
		t.Errorf("got %s (%s)", o.Status, o.Detail)
	}
}
