// websearch_test.go tests WebSearch against engines served by httptest on
// 127.0.0.1: every engine's request and parser with our own pages
// (testdata/websearch), the real pages in ../shared/fixtures/search when
// present, classification, back-off, timeouts, cancellation, merging and the
// reply. Nothing here reaches the internet: every test names its engines.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// searchNewServer builds a server whose configuration is kv (KEY, VALUE, ...).
func searchNewServer(t testing.TB, kv ...string) *server {
	t.Helper()
	flags := map[string]string{"SEARCH_BACKOFF_MS": "0"}
	for i := 0; i+1 < len(kv); i += 2 {
		flags[kv[i]] = kv[i+1]
	}
	srv := newServer(loadConfig(flags), io.Discard)
	t.Cleanup(srv.close)
	return srv
}

// searchCall runs the WebSearch handler directly.
func searchCall(ctx context.Context, srv *server, args map[string]any) toolResult {
	b, _ := json.Marshal(args)
	return runWebSearch(ctx, &toolCall{s: newSession(srv, io.Discard), req: &rpcRequest{}, args: b})
}

// searchServe starts an httptest server for h.
func searchServe(t testing.TB, h http.HandlerFunc) *httptest.Server {
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}

func searchReadFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// searchFilePage serves file with status, gzipped when gz (as Stack Exchange does).
func searchFilePage(t testing.TB, file string, status int, gz bool) http.HandlerFunc {
	body := searchReadFile(t, file)
	return func(w http.ResponseWriter, r *http.Request) {
		if gz {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(body)
			zw.Close()
			w.Header().Set("Content-Encoding", "gzip")
			body = buf.Bytes()
		}
		w.WriteHeader(status)
		w.Write(body)
	}
}

// searchAsk asks one engine at base and returns its outcome.
func searchAsk(t testing.TB, engine, base string, n int, kv ...string) searchOutcome {
	t.Helper()
	srv := searchNewServer(t, append(kv, "SEARCH_URL_"+strings.ToUpper(engine), base)...)
	engines, err := searchSelect(srv.cfg, []string{engine})
	if err != nil {
		t.Fatal(err)
	}
	return srv.search.search(context.Background(), srv.cfg, "golang", engines, n)[0]
}

var searchKeys = []string{"BRAVE_API_KEY", "bk", "TAVILY_API_KEY", "tk", "SERPER_API_KEY", "sk", "EXA_API_KEY", "ek",
	"GOOGLE_API_KEY", "gk", "GOOGLE_CSE_ID", "cx1", "SEARXNG_URL", "http://127.0.0.1:1"}

func TestWebSearchEngines(t *testing.T) {
	t.Parallel()
	type want struct {
		n                   int
		title, url, snippet string // of the first result; snippet: exact
		url2                string // of the second result, when given
	}
	cases := []struct {
		engine, file string
		check        func(r *http.Request) string // "" when the request is right
		want         want
	}{
		{"duckduckgo", "duckduckgo.html", func(r *http.Request) string {
			if r.Method != "POST" || r.URL.Path != "/html/" || r.FormValue("q") != "golang" || r.FormValue("kl") != "wt-wt" {
				return "want POST /html/ with q and kl"
			}
			if !strings.HasPrefix(r.UserAgent(), "Mozilla/5.0") || !strings.HasSuffix(r.Referer(), "/") || strings.Contains(r.Header.Get("Accept-Encoding"), "br") {
				return "want a browser UA, a Referer and no brotli"
			}
			return ""
		}, want{2, "The Go Programming Language", "https://go.dev/", "Go is an open source programming language & tools.", "https://pkg.go.dev/context"}},
		{"brave", "brave.html", func(r *http.Request) string {
			if r.URL.Path != "/search" || r.URL.Query().Get("q") != "golang" || r.URL.Query().Get("source") != "web" {
				return "want GET /search?q=&source=web"
			}
			return ""
		}, want{2, "The Go Programming Language", "https://go.dev/", "Go is an open source programming language that makes it simple to build secure, scalable systems.", "https://en.wikipedia.org/wiki/Go_(programming_language)"}},
		{"mojeek", "mojeek.html", func(r *http.Request) string {
			if r.URL.Path != "/search" || r.URL.Query().Get("q") != "golang" || r.URL.Query().Has("s") {
				return "want GET /search?q= without s"
			}
			return ""
		}, want{2, "The Go Programming Language", "https://go.dev/", "Go is an open source programming language supported by Google.", "https://gobyexample.com/"}},
		{"bing", "bing.html", func(r *http.Request) string {
			if r.URL.Path != "/search" || r.URL.Query().Get("q") != "golang" {
				return "want GET /search?q="
			}
			return ""
		}, want{2, "The Go Programming Language", "https://go.dev/", "Go is an open source programming language.", "https://en.wikipedia.org/wiki/Go_(programming_language)"}},
		{"yahoo", "yahoo.html", func(r *http.Request) string {
			if r.URL.Path != "/search" || r.URL.Query().Get("p") != "golang" {
				return "want GET /search?p="
			}
			return ""
		}, want{2, "The Go Programming Language", "https://go.dev/", "Go is an open source programming language that makes it simple to build secure, scalable systems.", "https://go.dev/doc/effective_go"}},
		{"wikipedia", "wikipedia.json", func(r *http.Request) string {
			q := r.URL.Query()
			if r.URL.Path != "/w/api.php" || q.Get("srsearch") != "golang" || q.Get("list") != "search" || !strings.HasPrefix(r.UserAgent(), "telson/") {
				return "want /w/api.php?list=search&srsearch= from a telson UA"
			}
			return ""
		}, want{2, "Go (programming language)", "/wiki/Go_(programming_language)", "Go is a high-level general purpose programming language & more", ""}},
		{"hackernews", "hackernews.json", func(r *http.Request) string {
			if r.URL.Path != "/api/v1/search" || r.URL.Query().Get("query") != "golang" || r.URL.Query().Get("tags") != "story" {
				return "want /api/v1/search?query=&tags=story"
			}
			return ""
		}, want{2, "Go 1.0 released", "https://go.dev/blog/go1", "512 points, 170 comments: https://news.ycombinator.com/item?id=8602", "https://news.ycombinator.com/item?id=9001"}},
		{"stackoverflow", "stackoverflow.json", func(r *http.Request) string {
			if r.URL.Path != "/2.3/search/advanced" || r.URL.Query().Get("q") != "golang" || r.URL.Query().Get("site") != "stackoverflow" {
				return "want /2.3/search/advanced?q=&site=stackoverflow"
			}
			return ""
		}, want{2, `How to cancel a goroutine "nicely"?`, "https://stackoverflow.com/questions/1/how-to-cancel-a-goroutine", "3 answers, score 42; tags: go, concurrency", ""}},
		{"github", "github.json", func(r *http.Request) string {
			if r.URL.Path != "/search/repositories" || r.URL.Query().Get("q") != "golang" || r.Header.Get("Accept") != "application/vnd.github+json" || !strings.HasPrefix(r.UserAgent(), "telson/") {
				return "want /search/repositories?q= with the GitHub Accept and a telson UA"
			}
			return ""
		}, want{2, "golang/go", "https://github.com/golang/go", "The Go programming language (120000 stars, Go)", "https://github.com/avelino/awesome-go"}},
		{"arxiv", "arxiv.xml", func(r *http.Request) string {
			if r.URL.Path != "/api/query" || r.URL.Query().Get("search_query") != "all:golang" {
				return "want /api/query?search_query=all:golang"
			}
			return ""
		}, want{2, "Understanding Real-World Concurrency Bugs in Go", "https://arxiv.org/abs/2101.00001v1", "Go is a statically-typed programming language that aims to provide a simple, efficient, and safe way to build multi-threaded software.", "https://arxiv.org/abs/2202.00002v2"}},
		{"braveapi", "braveapi.json", func(r *http.Request) string {
			if r.URL.Path != "/res/v1/web/search" || r.Header.Get("X-Subscription-Token") != "bk" {
				return "want /res/v1/web/search with X-Subscription-Token"
			}
			return ""
		}, want{1, "The Go Programming Language", "https://go.dev/", "Go is an open source programming language.", ""}},
		{"tavily", "tavily.json", func(r *http.Request) string {
			var body map[string]any
			json.NewDecoder(r.Body).Decode(&body)
			if r.Method != "POST" || r.URL.Path != "/search" || r.Header.Get("Authorization") != "Bearer tk" || body["query"] != "golang" {
				return "want POST /search {query} with a bearer key"
			}
			return ""
		}, want{1, "The Go Programming Language", "https://go.dev/", "Go is an open source programming language.", ""}},
		{"serper", "serper.json", func(r *http.Request) string {
			if r.Method != "POST" || r.Header.Get("X-API-KEY") != "sk" {
				return "want POST with X-API-KEY"
			}
			return ""
		}, want{1, "The Go Programming Language", "https://go.dev/", "Go is an open source programming language.", ""}},
		{"exa", "exa.json", func(r *http.Request) string {
			if r.Method != "POST" || r.Header.Get("x-api-key") != "ek" {
				return "want POST with x-api-key"
			}
			return ""
		}, want{1, "The Go Programming Language", "https://go.dev/", "Go is an open source programming language. … Build simple, secure, scalable systems.", ""}},
		{"google", "google.json", func(r *http.Request) string {
			if q := r.URL.Query(); r.URL.Path != "/customsearch/v1" || q.Get("key") != "gk" || q.Get("cx") != "cx1" {
				return "want /customsearch/v1 with key and cx"
			}
			return ""
		}, want{1, "The Go Programming Language", "https://go.dev/", "Go is an open source programming language.", ""}},
		{"searxng", "searxng.json", func(r *http.Request) string {
			if r.URL.Path != "/search" || r.URL.Query().Get("format") != "json" {
				return "want /search?format=json"
			}
			return ""
		}, want{1, "The Go Programming Language", "https://go.dev/", "Go is an open source programming language.", ""}},
	}
	for _, tc := range cases {
		tc := tc
		t.Run(tc.engine, func(t *testing.T) {
			t.Parallel()
			var problem atomic.Value
			page := searchFilePage(t, filepath.Join("testdata", "websearch", tc.file), 200, tc.engine == "stackoverflow")
			ts := searchServe(t, func(w http.ResponseWriter, r *http.Request) {
				if p := tc.check(r); p != "" {
					problem.Store(p + "; got " + r.Method + " " + r.URL.String())
				}
				page(w, r)
			})
			o := searchAsk(t, tc.engine, ts.URL, 10, searchKeys...)
			if p, _ := problem.Load().(string); p != "" {
				t.Errorf("request: %s", p)
			}
			if o.Status != "ok" || o.Count != tc.want.n || len(o.hits) != tc.want.n {
				t.Fatalf("got %s (%s) with %d results, want ok with %d: %+v", o.Status, o.Detail, len(o.hits), tc.want.n, o.hits)
			}
			h := o.hits[0]
			if h.title != tc.want.title || !strings.HasSuffix(h.url, tc.want.url) || h.snippet != tc.want.snippet {
				t.Errorf("first result:\n got %q %q %q\nwant %q %q %q", h.title, h.url, h.snippet, tc.want.title, tc.want.url, tc.want.snippet)
			}
			if tc.want.url2 != "" && o.hits[1].url != tc.want.url2 {
				t.Errorf("second url: got %q, want %q", o.hits[1].url, tc.want.url2)
			}
		})
	}
}

func TestWebSearchStartpageTwoSteps(t *testing.T) {
	t.Parallel()
	home := searchFilePage(t, "testdata/websearch/startpage_home.html", 200, false)
	serp := searchFilePage(t, "testdata/websearch/startpage.html", 200, false)
	var sc atomic.Value
	ts := searchServe(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "GET" && r.URL.Path == "/":
			home(w, r)
		case r.Method == "POST" && r.URL.Path == "/sp/search" && r.FormValue("query") == "golang":
			sc.Store(r.FormValue("sc"))
			serp(w, r)
		default:
			http.NotFound(w, r)
		}
	})
	o := searchAsk(t, "startpage", ts.URL, 10)
	if o.Status != "ok" || len(o.hits) != 2 {
		t.Fatalf("got %s (%s) %+v", o.Status, o.Detail, o.hits)
	}
	if got, _ := sc.Load().(string); got != "Xy12abCD34ef20" {
		t.Errorf("sc posted: %q", got)
	}
	h := o.hits[0]
	if h.title != "The Go Programming Language" || h.url != "https://go.dev/" || h.snippet != "Go is an open source programming language & more." {
		t.Errorf("first: %+v", h)
	}
}

// searchFixturesDir finds shared/fixtures/search above the working directory, or "".
func searchFixturesDir() string {
	dir, _ := os.Getwd()
	for {
		if fi, err := os.Stat(filepath.Join(dir, "shared", "fixtures", "search")); err == nil && fi.IsDir() {
			return filepath.Join(dir, "shared", "fixtures", "search")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// TestWebSearchRealPages parses the real engine pages in the shared fixtures,
// with the expected values of their SOURCES.md.
func TestWebSearchRealPages(t *testing.T) {
	t.Parallel()
	dir := searchFixturesDir()
	if dir == "" {
		t.Skip("no shared/fixtures/search above the working directory")
	}
	cases := []struct {
		engine, file string
		status       int
		want         string // outcome status
		n            int
		first        [2]string // title, url
		second       [2]string
		snippet      string // prefix of the first snippet
	}{
		{"duckduckgo", "duckduckgo_html_2025_golang.html", 200, "ok", 10, [2]string{"The Go Programming Language", "https://go.dev/"},
			[2]string{"Go (programming language) - Wikipedia", "https://en.wikipedia.org/wiki/Go_(programming_language)"}, "Go is an open source programming language"},
		{"duckduckgo", "duckduckgo_html_2020_exit_vim.html", 200, "ok", 30, [2]string{"vi - How do I exit the Vim editor? - Stack Overflow", "https://stackoverflow.com/questions/11828270/how-do-i-exit-the-vim-editor"},
			[2]string{}, ""},
		{"duckduckgo", "duckduckgo_js_nojs_redirect_2020.html", 200, "blocked", 0, [2]string{}, [2]string{}, ""},
		{"wikipedia", "wikipedia_api_list_search_2025.json", 200, "ok", 2, [2]string{"North America", "/wiki/North_America"},
			[2]string{"United States", "/wiki/United_States"}, "North America is a continent"},
		{"brave", "brave_html_2026_excerpt.html", 200, "ok", 1, [2]string{"GitHub - react/react: The library for web and native user interfaces. · GitHub", "https://github.com/react/react"},
			[2]string{}, "The library for web and native user interfaces."},
		{"brave", "brave_html_2023_full.html", 200, "ok", 19, [2]string{"What is a query? Explore database queries and more", "https://www.techtarget.com/searchdatamanagement/definition/query"},
			[2]string{}, "Learn about database queries"},
		{"yahoo", "yahoo_html_2026_excerpt.html", 200, "ok", 1, [2]string{"GitHub - react/react: The library for web and native user ...", "https://github.com/react/react"},
			[2]string{}, "The library for web and native user interfaces."},
		// SOURCES.md says 14 li.b_algo with very_good_result first; the page holds
		// 10 li.b_algo (plus 5 div.b_algo inside answer cards, not results), and
		// very_good_result is the second.
		{"bing", "bing_html_2023_sr.html", 200, "ok", 10, [2]string{"322 Words and Phrases for Good Results - Power Thesaurus", "https://www.powerthesaurus.org/good_results/synonyms"},
			[2]string{"", "https://www.powerthesaurus.org/very_good_result/synonyms"}, "Good Results synonyms"},
		{"mojeek", "mojeek_403_blocked_2023.html", 403, "blocked", 0, [2]string{}, [2]string{}, ""},
	}
	for _, tc := range cases {
		tc := tc
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			ts := searchServe(t, searchFilePage(t, filepath.Join(dir, tc.file), tc.status, false))
			o := searchAsk(t, tc.engine, ts.URL, 50)
			if o.Status != tc.want || len(o.hits) != tc.n {
				t.Fatalf("got %s (%s) with %d results, want %s with %d", o.Status, o.Detail, len(o.hits), tc.want, tc.n)
			}
			if tc.n == 0 {
				return
			}
			h := o.hits[0]
			if h.title != tc.first[0] || !strings.HasSuffix(h.url, tc.first[1]) || !strings.HasPrefix(h.snippet, tc.snippet) || strings.Contains(h.snippet, "<") {
				t.Errorf("first: got %q %q %q", h.title, h.url, h.snippet)
			}
			if tc.second[1] != "" && (!strings.HasSuffix(o.hits[1].url, tc.second[1]) || tc.second[0] != "" && o.hits[1].title != tc.second[0]) {
				t.Errorf("second: got %q %q", o.hits[1].title, o.hits[1].url)
			}
			for _, h := range o.hits {
				if !strings.HasPrefix(h.url, "http") || strings.Contains(h.url, "duckduckgo.com/") || strings.Contains(h.url, "bing.com/") || h.title == "" {
					t.Errorf("bad result %+v", h)
				}
			}
		})
	}
}

func TestWebSearchClassify(t *testing.T) {
	t.Parallel()
	page := func(status int, ctype, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ctype)
			w.WriteHeader(status)
			io.WriteString(w, body)
		}
	}
	file := func(name string) string {
		return string(searchReadFile(t, filepath.Join("testdata", "websearch", name)))
	}
	cases := []struct {
		name, engine string
		h            http.HandlerFunc
		status       string
		detail       string // substring
	}{
		{"ddg 202", "duckduckgo", page(202, "text/html", "<html><body></body></html>"), "rate-limited", "HTTP 202"},
		{"429", "brave", page(429, "text/html", "Too Many Requests"), "rate-limited", "HTTP 429"},
		{"403", "bing", page(403, "text/html", "<html>Forbidden</html>"), "blocked", "HTTP 403"},
		{"500", "mojeek", page(500, "text/html", "oops"), "error", "HTTP 500"},
		{"503 json", "wikipedia", page(503, "application/json", `{"error":{"code":"maxlag","info":"lagged"}}`), "error", "HTTP 503"},
		{"ddg anomaly page", "duckduckgo", page(200, "text/html", file("duckduckgo_challenge.html")), "captcha", "challenge page"},
		{"mojeek altcha", "mojeek", page(200, "text/html", file("mojeek_captcha.html")), "captcha", ""},
		{"cloudflare 403", "brave", page(403, "text/html", `<html><script src="/cdn-cgi/challenge-platform/h/b/orchestrate/jsch/v1"></script></html>`), "captcha", ""},
		{"redirect to captcha", "startpage", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/" {
				http.Redirect(w, r, "/sp/captcha?x=1", http.StatusFound)
				return
			}
			io.WriteString(w, "<html>solve this</html>")
		}, "captcha", "/sp/captcha"},
		{"startpage without sc", "startpage", page(200, "text/html", "<html><form id=search></form></html>"), "blocked", "no sc token"},
		{"consent wall", "yahoo", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/search" {
				http.Redirect(w, r, "/consent?sessionId=1", http.StatusFound)
				return
			}
			io.WriteString(w, "<html><form>Accept all</form></html>")
		}, "blocked", "consent page"},
		{"truncated json", "wikipedia", page(200, "application/json", `{"query":{"search":[{"title":"Go","snippet":"x"`), "error", "unexpected end of JSON input"},
		{"github rate limit", "github", page(403, "application/json", `{"message":"API rate limit exceeded for 192.0.2.1.","documentation_url":"https://docs.github.com"}`), "rate-limited", "API rate limit exceeded"},
		{"stack exchange throttle", "stackoverflow", page(400, "application/json", `{"error_id":502,"error_name":"throttle_violation","error_message":"too many requests from this IP, more requests available in 60 seconds"}`), "rate-limited", "too many requests"},
		{"stack exchange error 200", "stackoverflow", page(200, "application/json", `{"error_id":400,"error_name":"bad_parameter","error_message":"site is required"}`), "error", "site is required"},
		{"bad key", "braveapi", page(401, "application/json", `{"type":"ErrorResponse","error":{"code":"SUBSCRIPTION_TOKEN_INVALID","detail":"The provided subscription token is invalid."}}`), "error", "HTTP 401: The provided subscription token is invalid."},
		{"html instead of json", "hackernews", page(200, "text/html", `<!DOCTYPE html><html><head><title>Captcha</title></head></html>`), "captcha", ""},
		{"no results", "duckduckgo", page(200, "text/html", file("duckduckgo_empty.html")), "empty", ""},
		{"json no results", "github", page(200, "application/json", `{"total_count":0,"items":[]}`), "empty", ""},
		{"bot words", "bing", page(200, "text/html", "<html><body>Our systems have detected unusual traffic from your network.</body></html>"), "blocked", "bot check"},
		{"not a result page", "bing", page(200, "text/html", "<html><body>hello</body></html>"), "error", "unrecognised"},
		{"only ads", "duckduckgo", page(200, "text/html", `<div id="links"><div class="result result--ad"><a class="result__a" href="https://duckduckgo.com/y.js?ad_domain=x.com">Ad</a></div></div>`), "empty", ""},
	}
	for _, tc := range cases {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := searchServe(t, tc.h)
			o := searchAsk(t, tc.engine, ts.URL, 10, searchKeys...)
			if o.Status != tc.status || !strings.Contains(o.Detail, tc.detail) {
				t.Errorf("got %q (%s), want %q (…%s…)", o.Status, o.Detail, tc.status, tc.detail)
			}
		})
	}
	t.Run("not configured", func(t *testing.T) {
		srv := searchNewServer(t)
		res := searchCall(context.Background(), srv, map[string]any{"query": "golang", "engines": []string{"tavily"}})
		if !res.isError || !strings.Contains(res.content[0].Text, "tavily: error (not configured: set TAVILY_API_KEY)") {
			t.Errorf("got %+v", res)
		}
	})
}

func TestWebSearchBackoff(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	ts := searchServe(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusTooManyRequests)
	})
	wiki := searchServe(t, searchFilePage(t, "testdata/websearch/wikipedia.json", 200, false))
	srv := searchNewServer(t, "SEARCH_URL_BRAVE", ts.URL, "SEARCH_URL_WIKIPEDIA", wiki.URL, "SEARCH_BACKOFF_MS", "600000", "SEARCH_ENGINES", "brave,wikipedia")
	first := searchCall(context.Background(), srv, map[string]any{"query": "golang"})
	if first.isError || !strings.Contains(first.content[0].Text, "- brave: rate-limited (HTTP 429)") {
		t.Fatalf("first call: %+v", first)
	}
	second := searchCall(context.Background(), srv, map[string]any{"query": "golang again"})
	if !strings.Contains(second.content[0].Text, "- brave: resting (rate-limited 0s ago)") || !strings.Contains(second.content[0].Text, "- wikipedia: ok (2 results)") {
		t.Errorf("second call: %s", second.content[0].Text)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("a resting engine was asked: %d requests", n)
	}
	// Stack Exchange's backoff field rests the engine even on success.
	so := searchServe(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, `{"items":[{"title":"T","link":"https://stackoverflow.com/q/1","tags":[]}],"backoff":30}`)
	})
	srvSO := searchNewServer(t, "SEARCH_URL_STACKOVERFLOW", so.URL)
	for i, want := range []string{"- stackoverflow: ok (1 results)", "- stackoverflow: resting (told to back off 0s ago)"} {
		if res := searchCall(context.Background(), srvSO, map[string]any{"query": "go", "engines": []string{"stackoverflow"}}); !strings.Contains(res.content[0].Text, want) {
			t.Errorf("call %d: %s", i, res.content[0].Text)
		}
	}
	hits.Add(-1)
	// Without back-off the engine is asked every time.
	srv0 := searchNewServer(t, "SEARCH_URL_BRAVE", ts.URL, "SEARCH_BACKOFF_MS", "0")
	for i := 0; i < 2; i++ {
		searchCall(context.Background(), srv0, map[string]any{"query": "golang", "engines": []string{"brave"}})
	}
	if n := hits.Load(); n != 3 {
		t.Errorf("with SEARCH_BACKOFF_MS=0: %d requests, want 3", n)
	}
}

// TestWebSearchSlowEngine: a stalled engine costs its timeout, not the call.
func TestWebSearchSlowEngine(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var finished atomic.Bool
	slow := searchServe(t, func(w http.ResponseWriter, r *http.Request) {
		<-release // until the test ends, whatever the client does
		finished.Store(true)
	})
	t.Cleanup(func() { close(release) }) // runs before slow.Close
	wiki := searchServe(t, searchFilePage(t, "testdata/websearch/wikipedia.json", 200, false))
	srv := searchNewServer(t, "SEARCH_URL_HACKERNEWS", slow.URL, "SEARCH_URL_WIKIPEDIA", wiki.URL, "SEARCH_TIMEOUT_MS", "300")
	res := searchCall(context.Background(), srv, map[string]any{"query": "golang", "engines": []string{"hackernews", "wikipedia"}})
	if finished.Load() {
		t.Fatal("the slow handler finished before the call returned")
	}
	text := res.content[0].Text
	if res.isError || !strings.Contains(text, "- hackernews: timed out (no answer within 300ms)") || !strings.Contains(text, "- wikipedia: ok (2 results)") {
		t.Errorf("got %s", text)
	}
}

// TestWebSearchCancel: cancelling the call stops every engine's request.
func TestWebSearchCancel(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 2)
	stopped := make(chan struct{}, 2)
	h := func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
		stopped <- struct{}{}
	}
	a, b := searchServe(t, h), searchServe(t, h)
	c := startServer(t, "-set", "SEARCH_URL_WIKIPEDIA="+a.URL, "-set", "search_url_github="+b.URL, "-set", "SEARCH_TIMEOUT_MS=60000")
	c.initialize("2025-06-18")
	c.send(`{"jsonrpc":"2.0","id":"s1","method":"tools/call","params":{"name":"WebSearch","arguments":{"query":"golang","engines":["wikipedia","github"]}}}`)
	for i := 0; i < 2; i++ {
		select {
		case <-entered:
		case <-time.After(watchdog):
			t.Fatal("engines were not asked")
		}
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"s1","reason":"test"}}`)
	for i := 0; i < 2; i++ {
		select {
		case <-stopped:
		case <-time.After(watchdog):
			t.Fatal("an engine request outlived the cancelled call")
		}
	}
}

func TestWebSearchURLKey(t *testing.T) {
	t.Parallel()
	same := [][2]string{
		{"http://www.Example.com:80/a/?utm_source=x&b=2&a=1#top", "https://example.com/a?a=1&b=2"},
		{"https://example.com:443/", "https://example.com"},
		{"https://example.com/p?fbclid=1&gclid=2&ref=hn", "https://example.com/p"},
		{"https://en.wikipedia.org/wiki/Go_%28programming_language%29", "https://en.wikipedia.org/wiki/Go_(programming_language)"},
	}
	for _, p := range same {
		if searchURLKey(p[0]) != searchURLKey(p[1]) {
			t.Errorf("%s and %s differ: %s vs %s", p[0], p[1], searchURLKey(p[0]), searchURLKey(p[1]))
		}
	}
	differ := [][2]string{{"https://example.com/a", "https://example.com/b"}, {"https://example.com/?q=1", "https://example.com/?q=2"}, {"https://example.com:8080/", "https://example.com/"}}
	for _, p := range differ {
		if searchURLKey(p[0]) == searchURLKey(p[1]) {
			t.Errorf("%s and %s should differ", p[0], p[1])
		}
	}
	unwrap := map[string]string{
		"//duckduckgo.com/l/?uddg=https%3A%2F%2Fgo.dev%2F&rut=x":                              "https://go.dev/",
		"https://www.bing.com/ck/a?!&&p=1&u=a1aHR0cHM6Ly9nby5kZXYv&ntb=1":                     "https://go.dev/",
		"https://r.search.yahoo.com/_ylt=A;_ylu=B/RV=2/RU=https%3a%2f%2fgo.dev%2f/RK=2/RS=x-": "https://go.dev/",
		"https://www.google.com/url?q=https://go.dev/&sa=U":                                   "https://go.dev/",
		"https://go.dev/": "https://go.dev/",
	}
	for in, want := range unwrap {
		if got := searchUnwrap(in); got != want {
			t.Errorf("unwrap %s: got %s", in, got)
		}
	}
	tidy := searchTidy([]searchHit{
		{"  A\n title ", "https://x.org/a?utm_source=1&id=2#:~:text=foo", "<b>kept</b> as text"},
		{"", "https://x.org/b#section", ""},
		{"ad", "https://duckduckgo.com/y.js?ad_domain=x.org", ""},
		{"relative", "/search?q=x", ""},
		{"js", "javascript:void(0)", ""},
	}, 10, false)
	if len(tidy) != 2 || tidy[0].url != "https://x.org/a?id=2" || tidy[0].title != "A title" || tidy[0].snippet != "<b>kept</b> as text" ||
		tidy[1].url != "https://x.org/b#section" || tidy[1].title != "x.org/b" {
		t.Errorf("tidy: %+v", tidy)
	}
}

func TestWebSearchMerge(t *testing.T) {
	t.Parallel()
	outs := []searchOutcome{
		{Name: "duckduckgo", hits: []searchHit{
			{"Example page ...", "http://www.Example.com:80/page/?utm_source=x#frag", "short"},
			{"B", "https://b.org/", "b"},
			{"C", "https://c.org/x", "c"},
			{"Example again", "https://example.com/page", "same page twice in one list"},
		}},
		{Name: "bing", hits: []searchHit{
			{"Example Page: the full title", "https://example.com/page", "a much longer snippet about the example page"},
			{"C", "https://c.org/x?fbclid=1", "https://c.org/x"},
		}},
		{Name: "brave", hits: []searchHit{
			{"D", "https://d.org/", "d"},
			{"Example", "https://www.example.com/page/", "mid"},
		}},
		{Name: "wikipedia", Status: "rate-limited"},
	}
	got := searchMerge(outs, 10)
	var order []string
	for _, r := range got {
		order = append(order, r.Title)
	}
	if strings.Join(order, "|") != "Example Page: the full title|C|D|B" {
		t.Fatalf("order: %v", order)
	}
	ex := got[0]
	if ex.URL != "https://example.com/page" || ex.Snippet != "a much longer snippet about the example page" ||
		strings.Join(ex.Engines, ",") != "duckduckgo,bing,brave" {
		t.Errorf("merged: %+v", ex)
	}
	if got[1].Snippet != "c" || strings.Join(got[1].Engines, ",") != "duckduckgo,bing" {
		t.Errorf("a bare URL is not a better snippet: %+v", got[1])
	}
	want := 1/61.0 + 1/61.0 + 1/62.0 + 2*searchAgreementBonus
	if d := ex.Score - want; d > 1e-4 || d < -1e-4 {
		t.Errorf("score %v, want %v", ex.Score, want)
	}
	if n := len(searchMerge(outs, 2)); n != 2 {
		t.Errorf("max 2: got %d", n)
	}
	if r := searchMerge(nil, 10); r == nil || len(r) != 0 {
		t.Errorf("no outcomes: %#v", r)
	}
}

// TestWebSearchTool drives the tool through the protocol: the reply, its
// structured content, bad input and every engine failing.
func TestWebSearchTool(t *testing.T) {
	t.Parallel()
	ddg := searchServe(t, searchFilePage(t, "testdata/websearch/duckduckgo.html", 200, false))
	bing := searchServe(t, searchFilePage(t, "testdata/websearch/bing.html", 200, false))
	broken := searchServe(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	c := startServer(t, "-set", "SEARCH_URL_DUCKDUCKGO="+ddg.URL, "-set", "SEARCH_URL_BING="+bing.URL, "-set", "SEARCH_URL_HACKERNEWS="+broken.URL,
		"-set", "SEARCH_URL_GITHUB="+broken.URL, "-set", "SEARCH_ENGINES=duckduckgo,bing,hackernews", "-set", "SEARCH_BACKOFF_MS=0")
	c.initialize("2025-06-18")
	list := c.request("tools/list", nil)
	found := false
	for _, tl := range list["result"].(map[string]any)["tools"].([]any) {
		m := tl.(map[string]any)
		if m["name"] == "WebSearch" {
			found = m["outputSchema"] != nil && strings.Contains(m["description"].(string), "Engines: duckduckgo, bing, hackernews.")
		}
	}
	if !found {
		t.Fatalf("WebSearch with outputSchema not listed: %v", list)
	}
	res := c.callTool("WebSearch", map[string]any{"query": "golang", "max_results": 3})
	text := resultText(res)
	wantText := `1. **The Go Programming Language**
   https://go.dev/
   Go is an open source programming language & tools.
   found by: duckduckgo, bing

2. **Go (programming language) - Wikipedia**
   https://en.wikipedia.org/wiki/Go_(programming_language)
   Go is a statically typed, compiled high-level programming language designed at Google.
   found by: bing

3. **context package - context - Go Packages**
   https://pkg.go.dev/context
   Package context defines the Context type.
   found by: duckduckgo

Engines:
- duckduckgo: ok (2 results)
- bing: ok (2 results)
- hackernews: error (HTTP 500)`
	if isError(res) || text != wantText {
		t.Errorf("reply:\n%s\nwant:\n%s", text, wantText)
	}
	sc, _ := res["structuredContent"].(map[string]any)
	results, _ := sc["results"].([]any)
	engines, _ := sc["engines"].([]any)
	if len(results) != 3 || len(engines) != 3 {
		t.Fatalf("structuredContent: %v", sc)
	}
	first := results[0].(map[string]any)
	if first["url"] != "https://go.dev/" || first["score"].(float64) <= 0 || len(first["engines"].([]any)) != 2 || first["snippet"] == nil || first["title"] == nil {
		t.Errorf("first structured result: %v", first)
	}
	if e := engines[2].(map[string]any); e["name"] != "hackernews" || e["status"] != "error" || e["count"].(float64) != 0 || e["detail"] != "HTTP 500" {
		t.Errorf("engine status: %v", e)
	}
	for _, bad := range []map[string]any{{"query": "   "}, {"query": strings.Repeat("x", 2001)}, {"query": "go", "engines": []string{"altavista"}}, {"query": "go", "max_results": 51}} {
		if res := c.callTool("WebSearch", bad); !isError(res) {
			t.Errorf("%v: not an error: %s", bad, resultText(res))
		}
	}
	res = c.callTool("WebSearch", map[string]any{"query": "golang", "engines": []string{"hackernews", "github"}})
	if !isError(res) || resultText(res) != "WebSearch: every engine failed:\n- hackernews: error (HTTP 500)\n- github: error (HTTP 500)" {
		t.Errorf("all failing: %s", resultText(res))
	}
}

// BenchmarkWebSearchFanout: eleven local engines, one answering after 2 s,
// the others after a 100 ms round trip each; a call takes about 2 s, not
// the sum of the engines' times (reported as sum-of-engines-s/op).
func BenchmarkWebSearchFanout(b *testing.B) {
	files := map[string]string{"duckduckgo": "duckduckgo.html", "brave": "brave.html", "mojeek": "mojeek.html", "startpage": "",
		"bing": "bing.html", "yahoo": "yahoo.html", "wikipedia": "wikipedia.json", "hackernews": "hackernews.json",
		"stackoverflow": "stackoverflow.json", "github": "github.json", "arxiv": "arxiv.xml"}
	var busy atomic.Int64 // nanoseconds the engines spent answering
	kv := []string{"SEARCH_TIMEOUT_MS", "5000", "SEARCH_ENGINES", "duckduckgo,brave,mojeek,startpage,bing,yahoo,wikipedia,hackernews,stackoverflow,github,arxiv"}
	for name, file := range files {
		var h http.HandlerFunc
		if name == "startpage" {
			home := searchFilePage(b, "testdata/websearch/startpage_home.html", 200, false)
			serp := searchFilePage(b, "testdata/websearch/startpage.html", 200, false)
			h = func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "GET" {
					home(w, r)
				} else {
					serp(w, r)
				}
			}
		} else {
			h = searchFilePage(b, filepath.Join("testdata", "websearch", file), 200, false)
		}
		slow := name == "github"
		ts := searchServe(b, func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			if slow {
				time.Sleep(2 * time.Second) // the slow engine under measurement
			} else {
				time.Sleep(100 * time.Millisecond) // a network round trip for the others
			}
			h(w, r)
			busy.Add(int64(time.Since(start)))
		})
		kv = append(kv, "SEARCH_URL_"+strings.ToUpper(name), ts.URL)
	}
	srv := searchNewServer(b, kv...)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res := searchCall(context.Background(), srv, map[string]any{"query": "golang"})
		if res.isError || strings.Count(res.content[0].Text, ": ok (") != 11 {
			b.Fatalf("not every engine answered: %s", res.content[0].Text)
		}
	}
	b.StopTimer()
	elapsed := b.Elapsed().Seconds() / float64(b.N)
	sum := time.Duration(busy.Load()).Seconds() / float64(b.N)
	b.ReportMetric(sum, "sum-of-engines-s/op")
	b.ReportMetric(sum/elapsed, "sum/elapsed")
}

// BenchmarkMerge merges 11 lists of 50 overlapping results; the baseline,
// measured in the same run, sorts the same 550 results by rank alone.
func BenchmarkMerge(b *testing.B) {
	var outs []searchOutcome
	for e := 0; e < 11; e++ {
		o := searchOutcome{Name: fmt.Sprintf("engine%d", e)}
		for r := 0; r < 50; r++ {
			u := fmt.Sprintf("https://www.site%d.example.com/path/%d/?utm_source=x&id=%d", (r+e*7)%90, r%5, r)
			o.hits = append(o.hits, searchHit{fmt.Sprintf("Title %d", r), u, strings.Repeat("snippet words ", 10+r%7)})
		}
		outs = append(outs, o)
	}
	type ranked struct {
		h    searchHit
		rank int
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(searchMerge(outs, 50)) != 50 {
			b.Fatal("short merge")
		}
	}
	b.StopTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		all := make([]ranked, 0, 550)
		for _, o := range outs {
			for r, h := range o.hits {
				all = append(all, ranked{h, r})
			}
		}
		sort.Slice(all, func(i, j int) bool { return all[i].rank < all[j].rank })
	}
	base := float64(time.Since(start).Nanoseconds()) / float64(b.N)
	b.ReportMetric(base, "baseline-ns/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/base, "x-baseline")
}

// TestWebSearchParsersSurviveGarbage feeds every parser every page, cut short
// at many points and with bytes flipped: no panic, only results or errors.
func TestWebSearchParsersSurviveGarbage(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("testdata/websearch/*")
	if dir := searchFixturesDir(); dir != "" {
		more, _ := filepath.Glob(filepath.Join(dir, "*.html"))
		files = append(files, more...)
	}
	q := &searchQuery{base: "https://example.com", text: "go", n: 50}
	for _, f := range files {
		body := searchReadFile(t, f)
		for cut := 0; cut < len(body); cut += max(len(body)/40, 1) {
			page := append([]byte(nil), body[:cut]...)
			for i := 7; i < len(page); i += 97 {
				page[i] ^= "<\"'>{}[]"[i%8]
			}
			for i := range searchEngines {
				e := &searchEngines[i]
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("%s on %s cut at %d: panic %v", e.name, f, cut, p)
						}
					}()
					hits, _, _ := e.read(q, page)
					searchMerge([]searchOutcome{{Name: e.name, hits: searchTidy(hits, 50, e.api)}}, 50)
				}()
			}
		}
	}
}
