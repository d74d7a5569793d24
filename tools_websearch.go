// tools_websearch.go holds WebSearch: many search engines asked at once,
// every answer classified, parsed, cleaned, merged and ranked, and every
// engine's fate reported. It uses tools_web.go's HTML tree for the HTML engines.
//
// Rules:
//   - an engine is one row of searchEngines: a request template and a parser;
//     the HTML engines' parsers are recipes of selectors;
//   - every answer is classified (status, captcha and consent markers) before
//     it is parsed; an engine that was rate-limited, blocked or shown a captcha
//     rests for SEARCH_BACKOFF_MS, for every session, instead of being asked;
//   - all engines run at once, each under SEARCH_TIMEOUT_MS, all under one
//     overall deadline; cancelling the call stops every request;
//   - bodies are capped at searchMaxBody; titles and snippets are plain text.
package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	searchMaxBody        = 4 << 20
	searchRRFK           = 60.0                 // reciprocal rank fusion: score = Σ 1/(k + rank)
	searchAgreementBonus = 1 / (2 * searchRRFK) // per extra engine that found a result: half a first place
)

var webSearchTool = toolDef{
	name:     "WebSearch",
	title:    "Search the web with many engines at once",
	describe: describeWebSearch,
	input: `{"type":"object","properties":{
		"query":{"type":"string","minLength":1,"maxLength":2000,"description":"What to search for, as you would type it into a search engine."},
		"max_results":{"type":"integer","minimum":1,"maximum":50,"description":"How many merged results to return (default 10, max 50)."},
		"engines":{"type":"array","maxItems":20,"items":{"type":"string","enum":["duckduckgo","brave","mojeek","startpage","bing","yahoo","wikipedia","hackernews","stackoverflow","github","arxiv","braveapi","tavily","serper","exa","google","searxng"]},"description":"Engines to ask (default: all enabled)."}},
		"required":["query"],"additionalProperties":false}`,
	output: `{"type":"object","properties":{
		"results":{"type":"array","items":{"type":"object","properties":{"title":{"type":"string"},"url":{"type":"string"},"snippet":{"type":"string"},
			"engines":{"type":"array","items":{"type":"string"}},"score":{"type":"number"}},"required":["title","url","snippet","engines","score"]}},
		"engines":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},
			"status":{"type":"string","enum":["ok","empty","rate-limited","captcha","blocked","error","timed out","resting"]},
			"count":{"type":"integer"},"detail":{"type":"string"}},"required":["name","status","count"]}}},"required":["results","engines"]}`,
	hints: toolHints{readOnly: true, openWorld: true},
	run:   runWebSearch,
}

func describeWebSearch(srv *server) string {
	var names []string
	engines, err := searchSelect(srv.cfg, nil)
	for _, e := range engines {
		names = append(names, e.name)
	}
	if err != nil {
		names = []string{err.Error()}
	}
	return fmt.Sprintf(`Searches the web with many engines at once and returns one merged list: title, URL, snippet and which engines found each result, then one line per engine saying how it fared (ok, empty, rate-limited, captcha, blocked, error, timed out, resting).

- Engines: %s. Results several engines agree on rank higher.
- Each engine gets %d ms; the call takes about as long as the slowest engine within that, never the sum.
- An engine that was rate-limited, blocked or shown a captcha rests for a while and is reported as resting.
- engines picks a few by name: ["wikipedia","arxiv"] for papers, ["stackoverflow","github","hackernews"] for code.

Example: {"query": "golang context cancellation", "max_results": 10}`, strings.Join(names, ", "), srv.cfg.int("SEARCH_TIMEOUT_MS"))
}

// searchHit is one result as an engine gave it.
type searchHit struct{ title, url, snippet string }

// searchOutcome is one engine's fate in one call.
type searchOutcome struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, empty, rate-limited, captcha, blocked, error, timed out, resting
	Count  int    `json:"count"`
	Detail string `json:"detail,omitempty"`
	hits   []searchHit
	rest   time.Duration // the engine asked not to be called again for this long (Stack Exchange's backoff)
}

// searchFail is a failure already classified, such as a captcha page.
type searchFail struct{ status, detail string }

func (f *searchFail) Error() string { return f.status + ": " + f.detail }

// searchQuery is what a request builder and a parser get.
type searchQuery struct {
	base, text string // base: scheme://host[:port] the engine's paths go under
	n          int    // results wanted
	cfg        *config
	st         *searchState
}

// searchEngine is one engine: a request template (see request) and a parser.
type searchEngine struct {
	name, base string
	keys       []string // configuration a keyed engine needs; it is off until all are set
	api        bool     // a JSON or XML API: telson names itself instead of posing as a browser
	path, body string   // a body makes a POST: JSON if it starts with {, else a form
	header     string   // "Name: value" lines
	max        int      // most results one request may ask for; 0: no limit below 50

	prep func(ctx context.Context, q *searchQuery, vars map[string]string) error      // fetches more placeholders first
	read func(q *searchQuery, body []byte) (hits []searchHit, listed bool, err error) // listed: a result list is there
}

// searchEngines is every engine; those without keys are the default set.
var searchEngines = []searchEngine{
	{name: "duckduckgo", base: "https://html.duckduckgo.com", path: "/html/", body: "q=$q&b=&kl=wt-wt",
		header: "Referer: $base/\nOrigin: $base\nSec-Fetch-Site: same-origin",
		read:   searchRecipe{list: "#links", item: "div.result", skip: "result--ad", link: "a.result__a", snippet: ".result__snippet"}.read},
	{name: "brave", base: "https://search.brave.com", path: "/search?q=$q&source=web",
		header: "Cookie: safesearch=moderate; useLocation=0; summarizer=0; country=us; ui_lang=en-us",
		read: searchRecipe{list: "#results", item: "div[data-type=web]", link: "a", title: ".search-snippet-title,.snippet-title",
			snippet: ".generic-snippet .content,.snippet-description", strip: "t-secondary"}.read},
	{name: "mojeek", base: "https://www.mojeek.com", path: "/search?q=$q&safe=0",
		read: searchRecipe{list: "ul.results-standard", item: "ul.results-standard li", link: "a.ob,h2 a", title: "h2 a,a.title", snippet: "p.s"}.read},
	{name: "startpage", base: "https://www.startpage.com", prep: searchStartpageToken, path: "/sp/search",
		body: "query=$q&cat=web&t=device&sc=$sc&with_date=&abd=1&abe=1&qsr=all&qadf=moderate&language=english&lui=english", read: parseStartpage,
		header: "Origin: $base\nReferer: $base/\nSec-Fetch-Site: same-origin\nCookie: preferences=date_timeEEEworldN1Ndisable_family_filterEEE0N1Nenable_post_methodEEE1N1NlanguageEEEenglishN1Nnum_of_resultsEEE10"},
	{name: "bing", base: "https://www.bing.com", path: "/search?q=$q&mkt=en-US", header: "Cookie: _EDGE_CD=m=en-us&u=en-us; _EDGE_S=mkt=en-us&ui=en-us",
		read: searchRecipe{list: "#b_results", item: "li.b_algo", link: "h2 a,a.tilk", title: "h2 a,.tptt",
			snippet: ".b_caption p,.b_snippet,.b_lineclamp2,.b_lineclamp3,p", strip: "algoSlug_icon"}.read},
	{name: "yahoo", base: "https://search.yahoo.com", path: "/search?p=$q&iscqry=", header: "Cookie: sB=v=1&vm=r&fl=1&vl=lang_en&pn=10&rw=new&userset=1",
		read: searchRecipe{list: "#web", item: "div.algo-sr", link: ".compTitle a", title: ".compTitle h3", snippet: ".compText"}.read},
	{name: "wikipedia", base: "https://en.wikipedia.org", api: true, path: "/w/api.php?action=query&list=search&srsearch=$q&srlimit=$n&format=json&utf8=1",
		read: searchJSON{"query.search", "$title", "$base/wiki/$title_", "$snippet"}.read},
	{name: "hackernews", base: "https://hn.algolia.com", api: true, path: "/api/v1/search?query=$q&tags=story&hitsPerPage=$n",
		read: searchJSON{"hits", "$title", "$url || https://news.ycombinator.com/item?id=$objectID",
			"$points points, $num_comments comments: https://news.ycombinator.com/item?id=$objectID $story_text || $points points, $num_comments comments: https://news.ycombinator.com/item?id=$objectID"}.read},
	{name: "stackoverflow", base: "https://api.stackexchange.com", api: true, path: "/2.3/search/advanced?order=desc&sort=relevance&q=$q&site=stackoverflow&pagesize=$n&page=1",
		read: searchJSON{"items", "$title", "$link", "$answer_count answers, score $score; tags: $tags"}.read},
	{name: "github", base: "https://api.github.com", api: true, path: "/search/repositories?q=$q&per_page=$n",
		header: "Accept: application/vnd.github+json\nX-GitHub-Api-Version: 2022-11-28\nAuthorization: Bearer $GITHUB_TOKEN",
		read:   searchJSON{"items", "$full_name", "$html_url", "$description ($stargazers_count stars, $language) || $description ($stargazers_count stars) || $stargazers_count stars"}.read},
	{name: "arxiv", base: "https://export.arxiv.org", api: true, path: "/api/query?search_query=all:$q&start=0&max_results=$n",
		header: "Accept: application/atom+xml", read: parseArxiv},
	{name: "braveapi", base: "https://api.search.brave.com", api: true, keys: []string{"BRAVE_API_KEY"}, max: 20,
		path: "/res/v1/web/search?q=$q&count=$n&text_decorations=false", header: "X-Subscription-Token: $BRAVE_API_KEY",
		read: searchJSON{"web.results", "$title", "$url", "$description"}.read},
	{name: "tavily", base: "https://api.tavily.com", api: true, keys: []string{"TAVILY_API_KEY"}, max: 20,
		path: "/search", body: `{"query":"$q","max_results":$n}`, header: "Authorization: Bearer $TAVILY_API_KEY",
		read: searchJSON{"results", "$title", "$url", "$content"}.read},
	{name: "serper", base: "https://google.serper.dev", api: true, keys: []string{"SERPER_API_KEY"},
		path: "/search", body: `{"q":"$q","num":$n}`, header: "X-API-KEY: $SERPER_API_KEY", read: searchJSON{"organic", "$title", "$link", "$snippet"}.read},
	{name: "exa", base: "https://api.exa.ai", api: true, keys: []string{"EXA_API_KEY"},
		path: "/search", body: `{"query":"$q","type":"auto","numResults":$n,"contents":{"highlights":{"maxCharacters":500}}}`, header: "x-api-key: $EXA_API_KEY",
		read: searchJSON{"results", "$title", "$url", "$highlights"}.read},
	{name: "google", base: "https://www.googleapis.com", api: true, keys: []string{"GOOGLE_API_KEY", "GOOGLE_CSE_ID"}, max: 10,
		path: "/customsearch/v1?key=$GOOGLE_API_KEY&cx=$GOOGLE_CSE_ID&q=$q&num=$n", read: searchJSON{"items", "$title", "$link", "$snippet"}.read},
	{name: "searxng", api: true, keys: []string{"SEARXNG_URL"}, path: "/search?q=$q&format=json&pageno=1&safesearch=0", // base: SEARXNG_URL
		read: searchJSON{"results", "$title", "$url", "$content"}.read},
}

var searchPlaceholder = regexp.MustCompile(`\$\w+`)

// searchExpand fills $name placeholders from get; of " || " alternatives, the first with all filled wins.
func searchExpand(t string, get func(string) string) (s string, ok bool) {
	alts := strings.Split(t, " || ")
	for k, alt := range alts {
		ok = true
		s = searchPlaceholder.ReplaceAllStringFunc(alt, func(p string) string {
			v := get(p[1:])
			ok = ok && v != ""
			return v
		})
		if ok || k == len(alts)-1 {
			break
		}
	}
	return s, ok
}

// Headers every request starts with; an engine's own header lines come after and win.
const (
	searchBrowserHeader = "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:152.0) Gecko/20100101 Firefox/152.0\nAccept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\n" +
		"Accept-Language: en-US,en;q=0.9\nSec-Fetch-Dest: document\nSec-Fetch-Mode: navigate\nSec-Fetch-Site: none\nSec-Fetch-User: ?1\n"
	searchAPIHeader = "User-Agent: telson/$version (+https://github.com/telsonhq/telson)\nAccept: application/json\n"
)

// request fills an engine's templates with $q, $n, $base and $CONFIG_KEY; a header line
// whose placeholders are empty is left out. net/http asks for gzip and decodes it.
func (e *searchEngine) request(ctx context.Context, q *searchQuery) (*http.Request, error) {
	vars := map[string]string{"q": q.text, "n": strconv.Itoa(min(q.n, cmp.Or(e.max, q.n))), "base": q.base, "version": q.st.version}
	if e.prep != nil {
		if err := e.prep(ctx, q, vars); err != nil {
			return nil, err
		}
	}
	fill := func(t string, esc func(string) string) (string, bool) {
		return searchExpand(t, func(name string) string { return esc(cmp.Or(vars[name], q.cfg.str(name))) })
	}
	method, header, esc := "GET", searchBrowserHeader+e.header, url.QueryEscape
	if e.api {
		header = searchAPIHeader + e.header
	}
	switch {
	case strings.HasPrefix(e.body, "{"):
		method, header, esc = "POST", header+"\nContent-Type: application/json", func(s string) string { b, _ := json.Marshal(s); return string(b[1 : len(b)-1]) }
	case e.body != "":
		method, header = "POST", header+"\nContent-Type: application/x-www-form-urlencoded"
	}
	path, _ := fill(e.path, url.QueryEscape)
	body, _ := fill(e.body, esc)
	req, err := http.NewRequestWithContext(ctx, method, q.base+path, strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	for _, line := range strings.Split(header, "\n") {
		if line, ok := fill(line, func(s string) string { return s }); ok && line != "" {
			k, v, _ := strings.Cut(line, ": ")
			req.Header.Set(k, v)
		}
	}
	return req, nil
}

// searchStartpageToken reads from Startpage's home page the sc token its search form posts.
func searchStartpageToken(ctx context.Context, q *searchQuery, vars map[string]string) error {
	home, err := (&searchEngine{path: "/"}).request(ctx, q)
	if err != nil {
		return err
	}
	body, err := q.st.get(home, false)
	if err != nil {
		return err
	}
	if sc := searchFirst(parseHTML(string(body)), "input[name=sc]"); sc != nil && sc.attr("value") != "" {
		vars["sc"] = sc.attr("value")
		return nil
	}
	return &searchFail{"blocked", "no sc token on the home page"}
}

// searchJSON reads the JSON list at path list with item templates ($field of each item, $base).
type searchJSON struct{ list, title, url, snippet string }

func (j searchJSON) read(q *searchQuery, body []byte) ([]searchHit, bool, error) {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, false, fmt.Errorf("bad JSON: %w", err)
	}
	items, _ := searchPath(v, j.list).([]any)
	var hits []searchHit
	for _, it := range items {
		field := func(name string) string {
			if name == "base" {
				return q.base
			}
			s := searchString(searchPath(it, strings.TrimSuffix(name, "_")))
			if strings.HasSuffix(name, "_") { // a title made a wiki path
				s = strings.ReplaceAll(s, " ", "_")
			}
			return s
		}
		fill := func(t string) string { s, _ := searchExpand(t, field); return s }
		hits = append(hits, searchHit{fill(j.title), fill(j.url), fill(j.snippet)})
	}
	return hits, items != nil, nil
}

// searchPath is the value at path (dot-separated keys) in decoded JSON.
func searchPath(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// searchString is a JSON value as text; a list of phrases is joined with " … ", of words with ", ".
func searchString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case []any:
		parts := make([]string, len(x))
		for i, p := range x {
			parts[i] = searchString(p)
		}
		if len(parts) > 0 && strings.Contains(parts[0], " ") {
			return strings.Join(parts, " … ")
		}
		return strings.Join(parts, ", ")
	}
	return ""
}

// parseStartpage reads the results data the page hands to its script, or else its HTML.
func parseStartpage(q *searchQuery, body []byte) ([]searchHit, bool, error) {
	_, data, _ := strings.Cut(string(body), "UIStartpage.AppSerpWeb")
	i := strings.IndexByte(data, '{')
	if i < 0 {
		return searchRecipe{list: ".w-gl", item: "div.result", link: "a.result-link", title: "h2", snippet: "p.description"}.read(q, body)
	}
	var v any
	if err := json.NewDecoder(strings.NewReader(data[i:])).Decode(&v); err != nil {
		return nil, false, fmt.Errorf("bad results data: %w", err)
	}
	text := func(r any, key string) string { return parseHTML(searchString(searchPath(r, key))).textContent() }
	var hits []searchHit
	mainline, _ := searchPath(v, "render.presenter.regions.mainline").([]any)
	for _, m := range mainline {
		results, _ := searchPath(m, "results").([]any)
		for _, r := range results {
			if searchPath(m, "display_type") != "web-google" {
				break
			}
			d := text(r, "description")
			if j := strings.Index(d, " ... "); j >= 0 && j < 20 { // a date: "2 Sep 2014 ... ", "5 days ago ... "
				d = d[j+5:]
			}
			hits = append(hits, searchHit{text(r, "title"), searchString(searchPath(r, "clickUrl")), d})
		}
	}
	return hits, true, nil
}

func parseArxiv(_ *searchQuery, body []byte) ([]searchHit, bool, error) {
	var v struct {
		XMLName xml.Name
		Entries []struct {
			Title   string `xml:"title"`
			ID      string `xml:"id"`
			Summary string `xml:"summary"`
		} `xml:"entry"`
	}
	if err := xml.Unmarshal(body, &v); err != nil {
		return nil, false, fmt.Errorf("bad Atom: %w", err)
	}
	var hits []searchHit
	for _, e := range v.Entries {
		hits = append(hits, searchHit{e.Title, strings.Replace(e.ID, "http://", "https://", 1), e.Summary})
	}
	return hits, v.XMLName.Local == "feed", nil
}

// searchRecipe reads an HTML result page with selectors (see searchAll).
type searchRecipe struct {
	list, item, link, title, snippet string // list: the result container, to tell "no results" from "not a result page"
	skip                             string // class of items that are ads
	strip                            string // class of elements left out of snippets (dates, icons)
}

func (r searchRecipe) read(_ *searchQuery, body []byte) ([]searchHit, bool, error) {
	doc := parseHTML(string(body))
	var hits []searchHit
	for _, it := range searchAll(doc, r.item) {
		a, t, s := searchFirst(it, r.link), searchFirst(it, r.title), searchFirst(it, r.snippet)
		if a == nil || it.hasClass(r.skip) {
			continue
		}
		h := searchHit{title: cmp.Or(t, a).textContent(), url: a.attr("href")}
		if s != nil {
			for _, x := range s.findAll(func(c *htmlNode) bool { return c.hasClass(r.strip) }) {
				x.children = nil // the tree is this parse's own
			}
			h.snippet = s.textContent()
		}
		hits = append(hits, h)
	}
	return hits, searchFirst(doc, r.list) != nil, nil
}

var searchSelectorPart = regexp.MustCompile(`[#.\[]?[^#.\[]+`) // tag, #id, .class or [attr=value]

// searchAll returns the nodes below n that sel matches: comma-separated alternatives in order, each a descendant chain.
func searchAll(n *htmlNode, sel string) []*htmlNode {
	var out []*htmlNode
	for _, alt := range strings.Split(sel, ",") {
		steps := strings.Fields(alt)
		nodes := []*htmlNode{n}
		for _, step := range steps {
			parts := searchSelectorPart.FindAllString(step, -1)
			var next []*htmlNode
			for _, p := range nodes {
				next = append(next, p.findAll(func(c *htmlNode) bool { return searchMatch(c, parts) })...)
			}
			nodes = next
		}
		if len(steps) > 0 {
			out = append(out, nodes...)
		}
	}
	return out
}

func searchFirst(n *htmlNode, sel string) *htmlNode {
	if all := searchAll(n, sel); len(all) > 0 {
		return all[0]
	}
	return nil
}

// searchMatch reports whether element n matches every part of one simple selector.
func searchMatch(n *htmlNode, parts []string) bool {
	for _, p := range parts {
		k, v, _ := strings.Cut(strings.Trim(p[1:], "]"), "=")
		if p[0] == '#' && n.attr("id") != p[1:] || p[0] == '.' && !n.hasClass(p[1:]) || p[0] == '[' && n.attr(k) != v ||
			isASCIILetter(p[0]) && n.tag != p {
			return false
		}
	}
	return n.tag != ""
}

// searchState is what WebSearch keeps across calls and sessions: an HTTP client and the resting engines.
type searchState struct {
	client  *http.Client
	version string // telson's, for the API engines' User-Agent

	mu      sync.Mutex // guards resting
	resting map[string]searchRest
}

type searchRest struct {
	since, until time.Time
	why          string // the status that sent the engine to rest
}

func newSearchState(version string) *searchState {
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Transport: http.DefaultTransport.(*http.Transport).Clone()} // its own idle connections
	return &searchState{client: client, resting: map[string]searchRest{}, version: version}
}

// Anti-bot markers: captcha marks are checked on every HTML answer, the words only on pages without results.
var (
	searchCaptchaMarks = []string{`id="challenge-form"`, "anomaly-modal", "<title>captcha", "altcha.js", "/sp/captcha",
		"__cf_chl_", "/cdn-cgi/challenge-platform/", "google.com/recaptcha", `id="b_captcha"`, `class="b_captcha"`, "captcha-wrap"}
	searchBotWords  = []string{"verify you are human", "unusual traffic", "automated queries", "are you a robot", "bots use duckduckgo too", "non-javascript site"}
	searchNoneWords = []string{"no results found", "no results for", "no pages found", "did not match any", "there are no results"}
)

// get sends req and reads the answer; one its final URL, status or markers show to fail is a *searchFail.
func (st *searchState) get(req *http.Request, api bool) ([]byte, error) {
	resp, err := st.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, searchMaxBody))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	low, code := searchLower(body), resp.StatusCode
	page := strings.ToLower(resp.Request.URL.Host + resp.Request.URL.Path)
	failed, why := code < 200 || code >= 300, fmt.Sprintf("HTTP %d", code)
	if failed && searchAPIMessage(body) != "" {
		why += ": " + searchAPIMessage(body)
	}
	htmlPage := !api || strings.HasPrefix(strings.TrimSpace(low), "<!doctype html") || strings.HasPrefix(strings.TrimSpace(low), "<html")
	switch {
	case strings.Contains(page, "captcha") || strings.Contains(page, "/sorry"):
		return nil, &searchFail{"captcha", "sent to " + resp.Request.URL.Path}
	case strings.Contains(page, "consent") || strings.Contains(page, "guce."):
		return nil, &searchFail{"blocked", "consent page"}
	case htmlPage && searchContains(low, searchCaptchaMarks):
		return nil, &searchFail{"captcha", "challenge page"}
	case code == 429 || code == 202 || code >= 400 && searchContains(low, []string{"rate limit", "throttle"}):
		return nil, &searchFail{"rate-limited", why}
	case code == 402 || code == 403:
		return nil, &searchFail{"blocked", why}
	case failed:
		return nil, &searchFail{"error", why}
	}
	return body, nil
}

// searchLower is the start of body in lower case, for markers.
func searchLower(body []byte) string { return strings.ToLower(string(body[:min(len(body), 512<<10)])) }

func searchContains(s string, words []string) bool {
	return slices.ContainsFunc(words, func(w string) bool { return strings.Contains(s, w) })
}

// searchAPIMessage digs an error message out of a JSON error answer.
func searchAPIMessage(body []byte) string {
	var v any
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &v) != nil {
		return ""
	}
	for depth := 0; depth < 3; depth++ {
		m, _ := v.(map[string]any)
		v = nil
		for _, k := range []string{"message", "error_message", "error", "detail"} {
			if s, _ := m[k].(string); s != "" {
				return searchCut(s, 160)
			}
			if x, ok := m[k].(map[string]any); ok {
				v = x
			}
		}
	}
	return ""
}

// ask asks one engine, unless it is not configured, resting or has a bad base URL, and reads its answer.
func (st *searchState) ask(ctx context.Context, e *searchEngine, q *searchQuery, timeout time.Duration) searchOutcome {
	o := searchOutcome{Name: e.name}
	st.mu.Lock()
	rest := st.resting[e.name]
	st.mu.Unlock()
	u, err := url.Parse(q.base)
	var body []byte
	switch {
	case !searchConfigured(q.cfg, e):
		err = &searchFail{"error", "not configured: set " + strings.Join(e.keys, " and ")}
	case time.Now().Before(rest.until):
		err = &searchFail{"resting", rest.why + " " + searchAgo(time.Since(rest.since))}
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		err = &searchFail{"error", fmt.Sprintf("bad base URL %q", q.base)}
	default:
		var req *http.Request
		if req, err = e.request(ctx, q); err == nil {
			body, err = st.get(req, e.api)
		}
	}
	if err != nil {
		var sf *searchFail
		var ue *url.Error
		o.Status, o.Detail = "error", err.Error()
		switch {
		case errors.As(err, &sf):
			o.Status, o.Detail = sf.status, sf.detail
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			o.Status, o.Detail = "timed out", fmt.Sprintf("no answer within %v", timeout)
		case errors.As(err, &ue):
			o.Detail = ue.Err.Error()
		}
		return o
	}
	hits, listed, err := e.read(q, body)
	hits = searchTidy(hits, q.n, e.api)
	var bo struct{ Backoff float64 }
	if e.api && json.Unmarshal(body, &bo) == nil && bo.Backoff > 0 {
		o.rest = time.Duration(bo.Backoff * float64(time.Second))
	}
	switch low := searchLower(body); {
	case err != nil:
		o.Status, o.Detail = "error", err.Error()
	case len(hits) > 0:
		o.Status, o.Count, o.hits = "ok", len(hits), hits
	case searchContains(low, searchBotWords):
		o.Status, o.Detail = "blocked", "bot check page"
	case listed || searchContains(low, searchNoneWords):
		o.Status = "empty"
	default:
		o.Status, o.Detail = "error", strings.TrimSuffix("unrecognised answer (no result list) "+searchAPIMessage(body), " ")
	}
	return o
}

// searchTidy unwraps redirect links, drops ads and non-web links, and makes titles and snippets plain text.
func searchTidy(hits []searchHit, n int, api bool) []searchHit {
	text := func(s string, max int) string {
		if api && strings.ContainsAny(s, "<&") {
			s = parseHTML(s).textContent()
		}
		return searchCut(strings.Join(strings.Fields(s), " "), max)
	}
	var out []searchHit
	for _, h := range hits {
		u, err := url.Parse(searchUnwrap(strings.TrimSpace(h.url)))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Query().Get("ad_domain") != "" ||
			searchContains(strings.ToLower(u.Host+u.Path), []string{"duckduckgo.com/y.js", "duckduckgo.com/l/", "bing.com/aclick", "bing.com/ck/a", "r.search.yahoo.com/"}) {
			continue
		}
		if q := u.Query(); searchDropTracking(q) {
			u.RawQuery = q.Encode()
		}
		if strings.HasPrefix(u.Fragment, ":~:") { // a text fragment
			u.Fragment, u.RawFragment = "", ""
		}
		h.url = u.String()
		h.title, h.snippet = text(h.title, 300), text(h.snippet, 500)
		if h.title == "" {
			h.title = u.Host + u.Path
		}
		if out = append(out, h); len(out) == n {
			break
		}
	}
	return out
}

func searchCut(s string, max int) string {
	if r := []rune(s); len(r) > max {
		return strings.TrimSpace(string(r[:max-1])) + "…"
	}
	return s
}

// searchUnwrap turns a click-tracking link (DuckDuckGo, Bing ck/a, Yahoo /RU=, Google /url) into its target.
func searchUnwrap(href string) string {
	if _, ru, found := strings.Cut(href, "/RU="); found {
		ru, _, _ = strings.Cut(ru, "/RK=")
		ru, _, _ = strings.Cut(ru, "/RS=")
		if s, err := url.PathUnescape(ru); err == nil {
			return s
		}
	}
	u, err := url.Parse(href)
	if err != nil {
		return href
	}
	q := u.Query()
	switch {
	case q.Get("uddg") != "":
		return q.Get("uddg")
	case strings.HasSuffix(u.Path, "/ck/a") && strings.HasPrefix(q.Get("u"), "a1"):
		if b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(q.Get("u")[2:], "=")); err == nil {
			return string(b)
		}
	case u.Path == "/url" && strings.HasPrefix(q.Get("q"), "http"):
		return q.Get("q")
	}
	return href
}

var searchTrackingParams = map[string]bool{"fbclid": true, "gclid": true, "gclsrc": true, "dclid": true, "msclkid": true, "yclid": true,
	"mc_cid": true, "mc_eid": true, "_ga": true, "_gl": true, "igshid": true, "ref": true, "ref_src": true, "spm": true}

// searchURLKey folds scheme, host case, www., default ports, trailing slash, fragment, tracking and parameter order.
func searchURLKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	host := strings.TrimPrefix(strings.ToLower(u.Hostname()), "www.")
	if p := u.Port(); p != "" && p != "80" && p != "443" {
		host += ":" + p
	}
	q := u.Query()
	searchDropTracking(q)
	return host + strings.TrimSuffix(u.Path, "/") + "?" + q.Encode()
}

// searchDropTracking deletes q's tracking parameters and reports whether there were any.
func searchDropTracking(q url.Values) bool {
	n := len(q)
	maps.DeleteFunc(q, func(k string, _ []string) bool {
		return strings.HasPrefix(k, "utm_") || searchTrackingParams[strings.ToLower(k)]
	})
	return len(q) < n
}

// searchResult is one merged result.
type searchResult struct {
	Title   string   `json:"title"`
	URL     string   `json:"url"`
	Snippet string   `json:"snippet"`
	Engines []string `json:"engines"`
	Score   float64  `json:"score"`
	best    int      // best rank any engine gave it
}

// searchMerge merges the lists by URL, ranked by reciprocal rank fusion plus a bonus per agreeing engine.
func searchMerge(outs []searchOutcome, max int) []searchResult {
	truncated := func(s string) bool { return strings.HasSuffix(s, "...") || strings.HasSuffix(s, "…") }
	useful := func(snippet, title string) bool { // says more than the title or a bare link
		return snippet != "" && snippet != title && !strings.HasPrefix(snippet, "http")
	}
	byKey := map[string]*searchResult{}
	var all []*searchResult
	for _, o := range outs {
		for i, h := range o.hits {
			key := searchURLKey(h.url)
			r := byKey[key]
			if r == nil {
				r = &searchResult{URL: h.url, best: i + 1}
				byKey[key] = r
				all = append(all, r)
			} else if r.Engines[len(r.Engines)-1] == o.Name {
				continue // the same page twice in one engine's list
			}
			r.Engines = append(r.Engines, o.Name)
			r.Score += 1 / (searchRRFK + float64(i+1))
			r.best = min(r.best, i+1)
			if strings.HasPrefix(h.url, "https:") && !strings.HasPrefix(r.URL, "https:") {
				r.URL = h.url
			}
			if truncated(r.Title) && !truncated(h.title) || truncated(r.Title) == truncated(h.title) && len(h.title) > len(r.Title) {
				r.Title = h.title
			}
			if useful(h.snippet, h.title) && (!useful(r.Snippet, r.Title) || len(h.snippet) > len(r.Snippet)) {
				r.Snippet = h.snippet
			}
		}
	}
	for _, r := range all {
		r.Score += float64(len(r.Engines)-1) * searchAgreementBonus
	}
	slices.SortFunc(all, func(a, b *searchResult) int {
		return cmp.Or(cmp.Compare(b.Score, a.Score), cmp.Compare(a.best, b.best), strings.Compare(a.URL, b.URL))
	})
	out := make([]searchResult, min(len(all), max))
	for i := range out {
		all[i].Score = math.Round(all[i].Score*1e5) / 1e5
		out[i] = *all[i]
	}
	return out
}

// searchConfigured reports whether a keyed engine has its keys; keyless ones always do.
func searchConfigured(cfg *config, e *searchEngine) bool {
	return !slices.ContainsFunc(e.keys, func(k string) bool { return strings.TrimSpace(cfg.str(k)) == "" })
}

// searchSelect picks the engines a call asks: names, else SEARCH_ENGINES, else every configured engine.
func searchSelect(cfg *config, names []string) ([]*searchEngine, error) {
	if len(names) == 0 && strings.TrimSpace(cfg.str("SEARCH_ENGINES")) != "" {
		names = strings.Split(cfg.str("SEARCH_ENGINES"), ",")
	}
	var out []*searchEngine
	var known []string
	for i := range searchEngines {
		if known = append(known, searchEngines[i].name); len(names) == 0 && searchConfigured(cfg, &searchEngines[i]) {
			out = append(out, &searchEngines[i])
		}
	}
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		switch i := slices.Index(known, n); {
		case n == "" || slices.ContainsFunc(out, func(e *searchEngine) bool { return e.name == n }):
		case i < 0:
			return nil, fmt.Errorf("unknown engine %q (known: %s)", n, strings.Join(known, ", "))
		default:
			out = append(out, &searchEngines[i])
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no engines selected")
	}
	return out, nil
}

// search asks every engine at once and returns their outcomes in engine order.
func (st *searchState) search(ctx context.Context, cfg *config, text string, engines []*searchEngine, n int) []searchOutcome {
	timeout := time.Duration(max(cfg.int("SEARCH_TIMEOUT_MS"), 1)) * time.Millisecond
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Second) // the overall deadline; engines time out first
	defer cancel()
	type answer struct {
		i int
		o searchOutcome
	}
	outs := make([]searchOutcome, len(engines))
	ch := make(chan answer, len(engines))
	now := time.Now()
	for i, e := range engines {
		outs[i] = searchOutcome{Name: e.name, Status: "timed out", Detail: fmt.Sprintf("no answer within %v", timeout)}
		base := strings.TrimRight(cmp.Or(cfg.str("SEARCH_URL_"+strings.ToUpper(e.name)), e.base, cfg.str("SEARXNG_URL")), "/")
		q := &searchQuery{base: base, text: text, n: n, cfg: cfg, st: st}
		go func() { // exits when the engine has answered or its timeout has ended
			ectx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			defer func() { // a parser's panic must not take the server down
				if p := recover(); p != nil {
					ch <- answer{i, searchOutcome{Name: e.name, Status: "error", Detail: fmt.Sprintf("parser panic: %v", p)}}
				}
			}()
			ch <- answer{i, st.ask(ectx, e, q, timeout)}
		}()
	}
	for waiting := len(engines); waiting > 0; waiting-- {
		select {
		case a := <-ch:
			outs[a.i] = a.o
		case <-ctx.Done():
			waiting = 1 // the rest keep their "timed out"
		}
	}
	backoff := time.Duration(cfg.int("SEARCH_BACKOFF_MS")) * time.Millisecond
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, o := range outs {
		if backoff > 0 && (o.Status == "rate-limited" || o.Status == "blocked" || o.Status == "captcha") {
			st.resting[o.Name] = searchRest{since: now, until: time.Now().Add(backoff), why: o.Status}
		} else if o.rest > 0 {
			st.resting[o.Name] = searchRest{since: now, until: time.Now().Add(o.rest), why: "told to back off"}
		}
	}
	return outs
}

func searchAgo(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	}
	return fmt.Sprintf("%dh ago", int(d.Hours()))
}

// runWebSearch replies with the numbered merged list, then one line per engine.
func runWebSearch(ctx context.Context, c *toolCall) toolResult {
	var a struct {
		Query      string   `json:"query"`
		MaxResults int      `json:"max_results"`
		Engines    []string `json:"engines"`
	}
	if err := json.Unmarshal(c.args, &a); err != nil {
		return errorResult("WebSearch: %v", err)
	}
	query, srv := strings.TrimSpace(a.Query), c.s.srv
	if query == "" { // the schema's maxLength holds the 2,000 characters
		return errorResult("WebSearch: the query is blank; say what to search for")
	}
	engines, err := searchSelect(srv.cfg, a.Engines)
	if err != nil {
		return errorResult("WebSearch: %v", err)
	}
	outs := srv.search.search(ctx, srv.cfg, query, engines, min(max(a.MaxResults, 10), 50))
	results := searchMerge(outs, cmp.Or(a.MaxResults, 10))
	var b strings.Builder
	for i, r := range results {
		fmt.Fprintf(&b, "%d. **%s**\n   %s\n", i+1, r.Title, r.URL)
		if r.Snippet != "" {
			fmt.Fprintf(&b, "   %s\n", r.Snippet)
		}
		fmt.Fprintf(&b, "   found by: %s\n\n", strings.Join(r.Engines, ", "))
	}
	if len(results) == 0 {
		b.WriteString("No results.\n\n")
	}
	fates := make([]string, len(outs))
	for i, o := range outs {
		fates[i] = "- " + o.Name + ": " + o.Status
		if o.Status == "ok" {
			fates[i] += fmt.Sprintf(" (%d results)", o.Count)
		} else if o.Detail != "" {
			fates[i] += " (" + o.Detail + ")"
		}
	}
	res := textResult(b.String() + "Engines:\n" + strings.Join(fates, "\n"))
	if !slices.ContainsFunc(outs, func(o searchOutcome) bool { return o.Status == "ok" || o.Status == "empty" }) {
		res = errorResult("WebSearch: every engine failed:\n%s", strings.Join(fates, "\n"))
	}
	res.structured = map[string]any{"results": results, "engines": outs}
	return res
}
