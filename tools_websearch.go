// tools_websearch.go holds WebSearch: many search engines asked at once,
// every answer classified, parsed, cleaned, merged and ranked, and every
// engine's fate reported. It uses tools_web.go's HTML tree for the HTML engines.
//
// Rules:
//   - an engine is one row of searchEngines: a request builder and a parser;
//     the HTML engines' parsers are recipes of selectors;
//   - every answer is classified (status, captcha and consent markers) before
//     it is parsed; an engine that was rate-limited, blocked or shown a captcha
//     rests for SEARCH_BACKOFF_MS, for every session, instead of being asked;
//   - all engines run at once, each under SEARCH_TIMEOUT_MS, all under one
//     overall deadline; cancelling the call stops every request;
//   - bodies are capped at searchMaxBody; titles and snippets are plain text.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	searchMaxBody        = 4 << 20
	searchRRFK           = 60.0                 // reciprocal rank fusion: score = Σ 1/(k + rank)
	searchAgreementBonus = 1 / (2 * searchRRFK) // per extra engine that found a result: half a first place
	searchBrowserUA      = "Mozilla/5.0 (X11; Linux x86_64; rv:152.0) Gecko/20100101 Firefox/152.0"
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
		"results":{"type":"array","items":{"type":"object","properties":{
			"title":{"type":"string"},"url":{"type":"string"},"snippet":{"type":"string"},
			"engines":{"type":"array","items":{"type":"string"}},"score":{"type":"number"}},
			"required":["title","url","snippet","engines","score"]}},
		"engines":{"type":"array","items":{"type":"object","properties":{
			"name":{"type":"string"},
			"status":{"type":"string","enum":["ok","empty","rate-limited","captcha","blocked","error","timed out","resting"]},
			"count":{"type":"integer"},"detail":{"type":"string"}},
			"required":["name","status","count"]}}},
		"required":["results","engines"]}`,
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
}

// searchFail is a failure already classified, such as a captcha on Startpage's home page.
type searchFail struct{ status, detail string }

func (f *searchFail) Error() string { return f.status + ": " + f.detail }

// searchQuery is what a request builder and a parser get.
type searchQuery struct {
	base, text string // base: scheme://host[:port] the engine's paths go under
	n          int    // results wanted
	cfg        *config
	st         *searchState
}

// searchEngine is one engine: how to ask it and how to read its answer.
type searchEngine struct {
	name, base string
	keys       []string // configuration a keyed engine needs; it is off until all are set
	api        bool     // a JSON or XML API: telson names itself instead of posing as a browser
	build      func(ctx context.Context, q *searchQuery) (*http.Request, error)
	parse      func(q *searchQuery, body []byte) (hits []searchHit, listed bool, err error) // listed: a result list is there
}

// searchRecipe reads an HTML result page with selectors (see searchAll).
type searchRecipe struct {
	list, item, link, title, snippet string // list: the result container, to tell "no results" from "not a result page"
	skip                             string // class of items that are ads
	strip                            string // class of elements left out of snippets (dates, icons)
}

func (r searchRecipe) parse(_ *searchQuery, body []byte) ([]searchHit, bool, error) {
	doc := parseHTML(string(body))
	var hits []searchHit
	for _, it := range searchAll(doc, r.item) {
		a := searchFirst(it, r.link)
		if a == nil || (r.skip != "" && it.hasClass(r.skip)) {
			continue
		}
		t := a
		if x := searchFirst(it, r.title); x != nil {
			t = x
		}
		hits = append(hits, searchHit{t.textContent(), a.attr("href"), searchStrip(searchFirst(it, r.snippet), r.strip)})
	}
	return hits, searchFirst(doc, r.list) != nil, nil
}

var startpageRecipe = searchRecipe{list: ".w-gl", item: "div.result", link: "a.result-link", title: "h2", snippet: "p.description"}

// searchEngines is every engine; those without keys are the default set.
var searchEngines = []searchEngine{
	{name: "duckduckgo", base: "https://html.duckduckgo.com",
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchPostForm(ctx, q.base+"/html/", url.Values{"q": {q.text}, "b": {""}, "kl": {"wt-wt"}},
				"Referer", q.base+"/", "Origin", q.base, "Sec-Fetch-Site", "same-origin")
		},
		parse: searchRecipe{list: "#links", item: "div.result", skip: "result--ad", link: "a.result__a", snippet: ".result__snippet"}.parse},
	{name: "brave", base: "https://search.brave.com",
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchGet(ctx, q.base+"/search", url.Values{"q": {q.text}, "source": {"web"}},
				"Cookie", "safesearch=moderate; useLocation=0; summarizer=0; country=us; ui_lang=en-us")
		},
		parse: searchRecipe{list: "#results", item: "div[data-type=web]", link: "a", title: ".search-snippet-title,.snippet-title",
			snippet: ".generic-snippet .content,.snippet-description", strip: "t-secondary"}.parse},
	{name: "mojeek", base: "https://www.mojeek.com",
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchGet(ctx, q.base+"/search", url.Values{"q": {q.text}, "safe": {"0"}})
		},
		parse: searchRecipe{list: "ul.results-standard", item: "ul.results-standard li", link: "a.ob,h2 a", title: "h2 a,a.title", snippet: "p.s"}.parse},
	{name: "startpage", base: "https://www.startpage.com", build: buildStartpage, parse: parseStartpage},
	{name: "bing", base: "https://www.bing.com",
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchGet(ctx, q.base+"/search", url.Values{"q": {q.text}, "mkt": {"en-US"}},
				"Cookie", "_EDGE_CD=m=en-us&u=en-us; _EDGE_S=mkt=en-us&ui=en-us")
		},
		parse: searchRecipe{list: "#b_results", item: "li.b_algo", link: "h2 a,a.tilk", title: "h2 a,.tptt",
			snippet: ".b_caption p,.b_snippet,.b_lineclamp2,.b_lineclamp3,p", strip: "algoSlug_icon"}.parse},
	{name: "yahoo", base: "https://search.yahoo.com",
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchGet(ctx, q.base+"/search", url.Values{"p": {q.text}, "iscqry": {""}},
				"Cookie", "sB=v=1&vm=r&fl=1&vl=lang_en&pn=10&rw=new&userset=1")
		},
		parse: searchRecipe{list: "#web", item: "div.algo-sr", link: ".compTitle a", title: ".compTitle h3", snippet: ".compText"}.parse},
	{name: "wikipedia", base: "https://en.wikipedia.org", api: true,
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchGet(ctx, q.base+"/w/api.php", url.Values{"action": {"query"}, "list": {"search"}, "srsearch": {q.text},
				"srlimit": {strconv.Itoa(q.n)}, "format": {"json"}, "utf8": {"1"}})
		},
		parse: func(q *searchQuery, b []byte) ([]searchHit, bool, error) {
			var v struct {
				Query *struct {
					Search []struct{ Title, Snippet string }
				}
			}
			err := searchJSON(b, &v)
			if err != nil || v.Query == nil {
				return nil, false, err
			}
			var hits []searchHit
			esc := strings.NewReplacer(" ", "_", "%", "%25", "?", "%3F", "#", "%23")
			for _, r := range v.Query.Search {
				hits = append(hits, searchHit{r.Title, q.base + "/wiki/" + esc.Replace(r.Title), r.Snippet})
			}
			return hits, true, nil
		}},
	{name: "hackernews", base: "https://hn.algolia.com", api: true,
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchGet(ctx, q.base+"/api/v1/search", url.Values{"query": {q.text}, "tags": {"story"}, "hitsPerPage": {strconv.Itoa(q.n)}})
		},
		parse: func(_ *searchQuery, b []byte) ([]searchHit, bool, error) {
			var v struct {
				Hits []struct {
					Title, URL, ObjectID string
					Text                 string `json:"story_text"`
					Points               int
					Comments             int `json:"num_comments"`
				}
			}
			err := searchJSON(b, &v)
			var hits []searchHit
			for _, h := range v.Hits {
				item := "https://news.ycombinator.com/item?id=" + h.ObjectID
				if h.URL == "" {
					h.URL = item
				}
				hits = append(hits, searchHit{h.Title, h.URL, strings.TrimSpace(fmt.Sprintf("%d points, %d comments: %s %s", h.Points, h.Comments, item, h.Text))})
			}
			return hits, v.Hits != nil, err
		}},
	{name: "stackoverflow", base: "https://api.stackexchange.com", api: true,
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchGet(ctx, q.base+"/2.3/search/advanced", url.Values{"order": {"desc"}, "sort": {"relevance"}, "q": {q.text},
				"site": {"stackoverflow"}, "pagesize": {strconv.Itoa(q.n)}, "page": {"1"}})
		},
		parse: func(_ *searchQuery, b []byte) ([]searchHit, bool, error) {
			var v struct {
				Items []struct {
					Title, Link string
					Tags        []string
					Score       int
					Answers     int  `json:"answer_count"`
					Answered    bool `json:"is_answered"`
				}
				ErrorName string `json:"error_name"`
			}
			err := searchJSON(b, &v)
			if err == nil && v.ErrorName != "" {
				err = errors.New(v.ErrorName)
			}
			var hits []searchHit
			for _, it := range v.Items {
				done := ""
				if it.Answered {
					done = ", answered"
				}
				hits = append(hits, searchHit{it.Title, it.Link, fmt.Sprintf("score %d, %d answers%s; tags: %s", it.Score, it.Answers, done, strings.Join(it.Tags, ", "))})
			}
			return hits, v.Items != nil, err
		}},
	{name: "github", base: "https://api.github.com", api: true,
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			auth := ""
			if t := q.cfg.str("GITHUB_TOKEN"); t != "" {
				auth = "Bearer " + t
			}
			return searchGet(ctx, q.base+"/search/repositories", url.Values{"q": {q.text}, "per_page": {strconv.Itoa(q.n)}},
				"Accept", "application/vnd.github+json", "X-GitHub-Api-Version", "2022-11-28", "Authorization", auth)
		},
		parse: func(_ *searchQuery, b []byte) ([]searchHit, bool, error) {
			var v struct {
				Items []struct {
					Name        string `json:"full_name"`
					URL         string `json:"html_url"`
					Description string
					Language    string
					Stars       int `json:"stargazers_count"`
				}
			}
			err := searchJSON(b, &v)
			var hits []searchHit
			for _, it := range v.Items {
				if it.Language != "" {
					it.Language = ", " + it.Language
				}
				hits = append(hits, searchHit{it.Name, it.URL, strings.TrimSpace(fmt.Sprintf("%s (%d stars%s)", it.Description, it.Stars, it.Language))})
			}
			return hits, v.Items != nil, err
		}},
	{name: "arxiv", base: "https://export.arxiv.org", api: true,
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			var terms []string
			for _, w := range strings.Fields(q.text) {
				if w = strings.Trim(w, `"'()`); w != "" {
					terms = append(terms, "all:"+w)
				}
			}
			return searchGet(ctx, q.base+"/api/query", url.Values{"search_query": {strings.Join(terms, " AND ")}, "start": {"0"},
				"max_results": {strconv.Itoa(q.n)}}, "Accept", "application/atom+xml")
		},
		parse: func(_ *searchQuery, b []byte) ([]searchHit, bool, error) {
			var v struct {
				XMLName xml.Name
				Entries []struct {
					Title   string `xml:"title"`
					ID      string `xml:"id"`
					Summary string `xml:"summary"`
				} `xml:"entry"`
			}
			if err := xml.Unmarshal(b, &v); err != nil {
				return nil, false, fmt.Errorf("bad Atom: %w", err)
			}
			var hits []searchHit
			for _, e := range v.Entries {
				hits = append(hits, searchHit{e.Title, strings.Replace(e.ID, "http://", "https://", 1), e.Summary})
			}
			return hits, v.XMLName.Local == "feed", nil
		}},
	{name: "braveapi", base: "https://api.search.brave.com", api: true, keys: []string{"BRAVE_API_KEY"},
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchGet(ctx, q.base+"/res/v1/web/search", url.Values{"q": {q.text}, "count": {strconv.Itoa(min(q.n, 20))}, "text_decorations": {"false"}},
				"X-Subscription-Token", q.cfg.str("BRAVE_API_KEY"))
		},
		parse: searchJSONList("web.results", "title", "url", "description")},
	{name: "tavily", base: "https://api.tavily.com", api: true, keys: []string{"TAVILY_API_KEY"},
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchPostJSON(ctx, q.base+"/search", map[string]any{"query": q.text, "max_results": min(q.n, 20)},
				"Authorization", "Bearer "+q.cfg.str("TAVILY_API_KEY"))
		},
		parse: searchJSONList("results", "title", "url", "content")},
	{name: "serper", base: "https://google.serper.dev", api: true, keys: []string{"SERPER_API_KEY"},
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchPostJSON(ctx, q.base+"/search", map[string]any{"q": q.text, "num": q.n}, "X-API-KEY", q.cfg.str("SERPER_API_KEY"))
		},
		parse: searchJSONList("organic", "title", "link", "snippet")},
	{name: "exa", base: "https://api.exa.ai", api: true, keys: []string{"EXA_API_KEY"},
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchPostJSON(ctx, q.base+"/search", map[string]any{"query": q.text, "type": "auto", "numResults": q.n,
				"contents": map[string]any{"highlights": map[string]any{"maxCharacters": 500}}}, "x-api-key", q.cfg.str("EXA_API_KEY"))
		},
		parse: searchJSONList("results", "title", "url", "highlights")},
	{name: "google", base: "https://www.googleapis.com", api: true, keys: []string{"GOOGLE_API_KEY", "GOOGLE_CSE_ID"},
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchGet(ctx, q.base+"/customsearch/v1", url.Values{"key": {q.cfg.str("GOOGLE_API_KEY")}, "cx": {q.cfg.str("GOOGLE_CSE_ID")},
				"q": {q.text}, "num": {strconv.Itoa(min(q.n, 10))}})
		},
		parse: searchJSONList("items", "title", "link", "snippet")},
	{name: "searxng", api: true, keys: []string{"SEARXNG_URL"}, // base: SEARXNG_URL
		build: func(ctx context.Context, q *searchQuery) (*http.Request, error) {
			return searchGet(ctx, q.base+"/search", url.Values{"q": {q.text}, "format": {"json"}, "pageno": {"1"}, "safesearch": {"0"}})
		},
		parse: searchJSONList("results", "title", "url", "content")},
}

// buildStartpage fetches the home page for its sc token, then posts the search.
func buildStartpage(ctx context.Context, q *searchQuery) (*http.Request, error) {
	home, err := searchGet(ctx, q.base+"/", nil)
	if err != nil {
		return nil, err
	}
	body, err := q.st.get(home, false)
	if err != nil {
		return nil, err
	}
	sc := searchFirst(parseHTML(string(body)), "input[name=sc]")
	if sc == nil || sc.attr("value") == "" {
		return nil, &searchFail{"blocked", "no sc token on the home page"}
	}
	form := url.Values{"query": {q.text}, "cat": {"web"}, "t": {"device"}, "sc": {sc.attr("value")}, "with_date": {""}, "abd": {"1"},
		"abe": {"1"}, "qsr": {"all"}, "qadf": {"moderate"}, "language": {"english"}, "lui": {"english"}}
	return searchPostForm(ctx, q.base+"/sp/search", form, "Origin", q.base, "Referer", q.base+"/", "Sec-Fetch-Site", "same-origin",
		"Cookie", "preferences=date_timeEEEworldN1Ndisable_family_filterEEE0N1Nenable_post_methodEEE1N1NlanguageEEEenglishN1Nnum_of_resultsEEE10")
}

// parseStartpage reads the results data the page hands to its script, or else its HTML.
func parseStartpage(q *searchQuery, body []byte) ([]searchHit, bool, error) {
	s := string(body)
	i := strings.Index(s, "UIStartpage.AppSerpWeb")
	if i < 0 || strings.IndexByte(s[i:], '{') < 0 {
		return startpageRecipe.parse(q, body)
	}
	var v struct {
		Render struct {
			Presenter struct {
				Regions struct {
					Mainline []struct {
						Type    string `json:"display_type"`
						Results []struct{ ClickURL, Title, Description string }
					}
				}
			}
		}
	}
	if err := json.NewDecoder(strings.NewReader(s[i+strings.IndexByte(s[i:], '{'):])).Decode(&v); err != nil {
		return nil, false, fmt.Errorf("bad results data: %w", err)
	}
	var hits []searchHit
	for _, m := range v.Render.Presenter.Regions.Mainline {
		for _, r := range m.Results {
			d := parseHTML(r.Description).textContent()
			if j := strings.Index(d, " ... "); j >= 0 && j < 20 { // a date: "2 Sep 2014 ... ", "5 days ago ... "
				d = d[j+5:]
			}
			if m.Type == "web-google" {
				hits = append(hits, searchHit{parseHTML(r.Title).textContent(), r.ClickURL, d})
			}
		}
	}
	return hits, true, nil
}

// searchJSONList reads the list at path (dot-separated) of a JSON answer,
// taking title, url and snippet from the named fields of each item.
func searchJSONList(path, title, link, snippet string) func(*searchQuery, []byte) ([]searchHit, bool, error) {
	return func(_ *searchQuery, b []byte) ([]searchHit, bool, error) {
		var v any
		if err := searchJSON(b, &v); err != nil {
			return nil, false, err
		}
		for _, k := range strings.Split(path, ".") {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		items, _ := v.([]any)
		var hits []searchHit
		for _, it := range items {
			m, _ := it.(map[string]any)
			hits = append(hits, searchHit{searchString(m[title]), searchString(m[link]), searchString(m[snippet])})
		}
		return hits, items != nil, nil
	}
}

func searchString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		var parts []string
		for _, p := range x {
			if s, ok := p.(string); ok {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, " … ")
	}
	return ""
}

func searchJSON(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("bad JSON: %w", err)
	}
	return nil
}

func searchGet(ctx context.Context, u string, v url.Values, hdr ...string) (*http.Request, error) {
	if v != nil {
		u += "?" + v.Encode()
	}
	return searchRequest(ctx, "GET", u, "", "", hdr)
}

func searchPostForm(ctx context.Context, u string, v url.Values, hdr ...string) (*http.Request, error) {
	return searchRequest(ctx, "POST", u, v.Encode(), "application/x-www-form-urlencoded", hdr)
}

func searchPostJSON(ctx context.Context, u string, v any, hdr ...string) (*http.Request, error) {
	b, _ := json.Marshal(v)
	return searchRequest(ctx, "POST", u, string(b), "application/json", hdr)
}

// searchRequest builds a request; hdr holds header names and values in turn, empty values skipped.
func searchRequest(ctx context.Context, method, u, body, ctype string, hdr []string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] != "" {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	return req, nil
}

// searchAll returns the nodes below n that sel matches. sel is a small CSS
// subset: comma-separated alternatives, tried in order, each a descendant
// chain of simple selectors tag#id.class[attr=value].
func searchAll(n *htmlNode, sel string) []*htmlNode {
	var out []*htmlNode
	for _, alt := range strings.Split(sel, ",") {
		steps := strings.Fields(alt)
		if len(steps) == 0 {
			continue
		}
		nodes := []*htmlNode{n}
		for _, step := range steps {
			var next []*htmlNode
			for _, p := range nodes {
				next = append(next, p.findAll(func(c *htmlNode) bool { return searchMatch(c, step) })...)
			}
			nodes = next
		}
		out = append(out, nodes...)
	}
	return out
}

func searchFirst(n *htmlNode, sel string) *htmlNode {
	if all := searchAll(n, sel); len(all) > 0 {
		return all[0]
	}
	return nil
}

// searchMatch reports whether element n matches one simple selector.
func searchMatch(n *htmlNode, sel string) bool {
	if n.tag == "" {
		return false
	}
	i := strings.IndexAny(sel, "#.[")
	if i < 0 {
		i = len(sel)
	}
	if sel[:i] != "" && sel[:i] != n.tag {
		return false
	}
	for rest := sel[i:]; rest != ""; {
		j := strings.IndexAny(rest[1:], "#.[") + 1
		if j == 0 {
			j = len(rest)
		}
		part := rest[:j]
		rest = rest[j:]
		k, v, _ := strings.Cut(strings.Trim(part[1:], "]"), "=")
		if part[0] == '#' && n.attr("id") != part[1:] || part[0] == '.' && !n.hasClass(part[1:]) || part[0] == '[' && n.attr(k) != v {
			return false
		}
	}
	return true
}

// searchStrip is n's text without the elements of class strip.
func searchStrip(n *htmlNode, strip string) string {
	if n == nil {
		return ""
	}
	if strip != "" {
		for _, x := range n.findAll(func(c *htmlNode) bool { return c.hasClass(strip) }) {
			x.children = nil // the tree is this parse's own
		}
	}
	return n.textContent()
}

// searchState is what WebSearch keeps across calls and sessions: one HTTP
// client (keep-alive, cookies) and the engines that are resting.
type searchState struct {
	client *http.Client
	apiUA  string

	mu      sync.Mutex // guards resting
	resting map[string]searchRest
}

type searchRest struct {
	since, until time.Time
	why          string // the status that sent the engine to rest
}

func newSearchState(version string) *searchState {
	jar, _ := cookiejar.New(nil)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &searchState{client: &http.Client{Jar: jar, Transport: tr}, resting: map[string]searchRest{},
		apiUA: "telson/" + version + " (+https://github.com/telsonhq/telson)"}
}

// get sends req as a browser (or, for APIs, as telson) would and reads at
// most searchMaxBody of the answer; an answer classified as a failure is a *searchFail.
func (st *searchState) get(req *http.Request, api bool) ([]byte, error) {
	h := req.Header
	if api {
		h.Set("User-Agent", st.apiUA)
		if h.Get("Accept") == "" {
			h.Set("Accept", "application/json")
		}
	} else {
		h.Set("User-Agent", searchBrowserUA)
		h.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
		h.Set("Sec-Fetch-Dest", "document")
		h.Set("Sec-Fetch-Mode", "navigate")
		h.Set("Sec-Fetch-User", "?1")
		if h.Get("Sec-Fetch-Site") == "" {
			h.Set("Sec-Fetch-Site", "none")
		}
	}
	h.Set("Accept-Language", "en-US,en;q=0.9") // Accept-Encoding is left to net/http: gzip, decoded for us
	resp, err := st.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, searchMaxBody))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(body) > 2 && body[0] == 0x1f && body[1] == 0x8b { // gzip the transport did not undo
		if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
			if body, err = io.ReadAll(io.LimitReader(zr, searchMaxBody)); err != nil {
				return nil, fmt.Errorf("gunzip: %w", err)
			}
		}
	}
	if status, detail := searchClassify(resp, body, api); status != "" {
		return nil, &searchFail{status, detail}
	}
	return body, nil
}

// Markers of anti-bot pages: strong ones are checked on every HTML answer,
// weak ones (and "no results" words) only when a page gave no results.
var (
	searchCaptchaMarks = []string{`id="challenge-form"`, "anomaly-modal", "<title>captcha", "altcha.js", "/sp/captcha",
		"__cf_chl_", "/cdn-cgi/challenge-platform/", "google.com/recaptcha", `id="b_captcha"`, `class="b_captcha"`, "captcha-wrap"}
	searchBotWords  = []string{"verify you are human", "unusual traffic", "automated queries", "are you a robot", "bots use duckduckgo too", "non-javascript site"}
	searchNoneWords = []string{"no results found", "no results for", "no pages found", "did not match any", "there are no results"}
)

// searchClassify names a failed answer by its final URL, its status and its
// markers; "" means the answer is to be parsed.
func searchClassify(resp *http.Response, body []byte, api bool) (status, detail string) {
	low := strings.ToLower(string(body[:min(len(body), 512<<10)]))
	page := strings.ToLower(resp.Request.URL.Host + resp.Request.URL.Path)
	code := resp.StatusCode
	http := fmt.Sprintf("HTTP %d", code)
	if m := searchAPIMessage(body); m != "" {
		http += ": " + m
	}
	trimmed := strings.TrimSpace(low)
	htmlPage := !api || strings.HasPrefix(trimmed, "<!doctype html") || strings.HasPrefix(trimmed, "<html")
	switch {
	case strings.Contains(page, "captcha") || strings.Contains(page, "/sorry"):
		return "captcha", "sent to " + resp.Request.URL.Path
	case strings.Contains(page, "consent") || strings.Contains(page, "guce."):
		return "blocked", "consent page"
	case htmlPage && searchContains(low, searchCaptchaMarks):
		return "captcha", "challenge page"
	case code == 429 || code == 202:
		return "rate-limited", http
	case code >= 400 && (strings.Contains(low, "rate limit") || strings.Contains(low, "throttle")):
		return "rate-limited", http
	case code == 402 || code == 403:
		return "blocked", http
	case code < 200 || code >= 300:
		return "error", http
	}
	return "", ""
}

func searchContains(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
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
			switch x := m[k].(type) {
			case string:
				if x != "" {
					return searchCut(x, 160)
				}
			case map[string]any:
				v = x
			}
		}
	}
	return ""
}

// ask asks one engine and reads its answer.
func (st *searchState) ask(ctx context.Context, e *searchEngine, q *searchQuery, timeout time.Duration) searchOutcome {
	o := searchOutcome{Name: e.name}
	req, err := e.build(ctx, q)
	var body []byte
	if err == nil {
		body, err = st.get(req, e.api)
	}
	var sf *searchFail
	var ue *url.Error
	switch {
	case errors.As(err, &sf):
		o.Status, o.Detail = sf.status, sf.detail
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		o.Status, o.Detail = "timed out", fmt.Sprintf("no answer within %v", timeout)
	case err != nil && errors.As(err, &ue):
		o.Status, o.Detail = "error", ue.Err.Error()
	case err != nil:
		o.Status, o.Detail = "error", err.Error()
	}
	if err != nil {
		return o
	}
	hits, listed, err := e.parse(q, body)
	hits = searchTidy(hits, q.n, e.api)
	low := strings.ToLower(string(body[:min(len(body), 512<<10)]))
	switch {
	case err != nil:
		o.Status, o.Detail = "error", err.Error()
	case len(hits) > 0:
		o.Status, o.Count, o.hits = "ok", len(hits), hits
	case searchContains(low, searchBotWords):
		o.Status, o.Detail = "blocked", "bot check page"
	case listed || searchContains(low, searchNoneWords):
		o.Status = "empty"
	default:
		o.Status, o.Detail = "error", "unrecognised answer (no result list)"
	}
	return o
}

// searchTidy unwraps redirect links, drops ads and what is not a web page,
// and makes titles and snippets plain, bounded text.
func searchTidy(hits []searchHit, n int, api bool) []searchHit {
	var out []searchHit
	for _, h := range hits {
		h.url = searchUnwrap(strings.TrimSpace(h.url))
		u, err := url.Parse(h.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || searchIsAd(u) {
			continue
		}
		h.title, h.snippet = searchText(h.title, 300, api), searchText(h.snippet, 500, api)
		if h.title == "" {
			h.title = u.Host + u.Path
		}
		if out = append(out, h); len(out) == n {
			break
		}
	}
	return out
}

func searchText(s string, max int, markup bool) string {
	if markup && strings.ContainsAny(s, "<&") {
		s = parseHTML(s).textContent()
	}
	return searchCut(strings.Join(strings.Fields(s), " "), max)
}

func searchCut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	return strings.TrimSpace(string(r[:max-1])) + "…"
}

func searchIsAd(u *url.URL) bool {
	p := strings.ToLower(u.Host + u.Path)
	return u.Query().Get("ad_domain") != "" || searchContains(p, []string{"duckduckgo.com/y.js", "duckduckgo.com/l/", "bing.com/aclick", "bing.com/ck/a", "r.search.yahoo.com/"})
}

// searchUnwrap turns an engine's click-tracking link into its target:
// DuckDuckGo uddg=, Bing ck/a u=a1<base64url>, Yahoo /RU=…/RK=, Google /url?q=.
func searchUnwrap(href string) string {
	if i := strings.Index(href, "/RU="); i >= 0 {
		ru := href[i+4:]
		for _, end := range []string{"/RK=", "/RS="} {
			if j := strings.Index(ru, end); j >= 0 {
				ru = ru[:j]
			}
		}
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

// searchURLKey folds what does not change the page a URL names: scheme,
// host case, www., default ports, trailing slash, fragment, tracking
// parameters and parameter order.
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
	for k := range q {
		if strings.HasPrefix(k, "utm_") || searchTrackingParams[strings.ToLower(k)] {
			delete(q, k)
		}
	}
	return host + strings.TrimSuffix(u.Path, "/") + "?" + q.Encode()
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

// searchMerge merges the engines' lists by URL and ranks them by reciprocal
// rank fusion plus a bonus for every extra engine that agrees.
func searchMerge(outs []searchOutcome, max int) []searchResult {
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
			if searchTruncated(r.Title) && !searchTruncated(h.title) || searchTruncated(r.Title) == searchTruncated(h.title) && len(h.title) > len(r.Title) {
				r.Title = h.title
			}
			if searchUseful(h) && (!searchUseful(searchHit{r.Title, r.URL, r.Snippet}) || len(h.snippet) > len(r.Snippet)) {
				r.Snippet = h.snippet
			}
		}
	}
	for _, r := range all {
		r.Score += float64(len(r.Engines)-1) * searchAgreementBonus
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Score != b.Score {
			return a.Score > b.Score
		}
		if len(a.Engines) != len(b.Engines) {
			return len(a.Engines) > len(b.Engines)
		}
		if a.best != b.best {
			return a.best < b.best
		}
		return a.URL < b.URL
	})
	out := make([]searchResult, 0, min(len(all), max))
	for _, r := range all[:min(len(all), max)] {
		r.Score = math.Round(r.Score*1e5) / 1e5
		out = append(out, *r)
	}
	return out
}

func searchTruncated(s string) bool {
	return strings.HasSuffix(s, "...") || strings.HasSuffix(s, "…")
}

// searchUseful: a snippet that says more than the title or a bare link.
func searchUseful(h searchHit) bool {
	return h.snippet != "" && h.snippet != h.title && !strings.HasPrefix(h.snippet, "http")
}

// searchConfigured reports whether a keyed engine has its keys; keyless ones always do.
func searchConfigured(cfg *config, e *searchEngine) bool {
	for _, k := range e.keys {
		if strings.TrimSpace(cfg.str(k)) == "" {
			return false
		}
	}
	return true
}

// searchSelect picks the engines a call asks: names, else SEARCH_ENGINES,
// else every configured engine.
func searchSelect(cfg *config, names []string) ([]*searchEngine, error) {
	if len(names) == 0 && strings.TrimSpace(cfg.str("SEARCH_ENGINES")) != "" {
		names = strings.Split(cfg.str("SEARCH_ENGINES"), ",")
	}
	var out []*searchEngine
	for i := range searchEngines {
		if len(names) == 0 && searchConfigured(cfg, &searchEngines[i]) {
			out = append(out, &searchEngines[i])
		}
	}
	known := make([]string, len(searchEngines))
	for i, e := range searchEngines {
		known[i] = e.name
	}
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		i := -1
		for j, k := range known {
			if k == n {
				i = j
			}
		}
		switch {
		case n == "":
		case i < 0:
			return nil, fmt.Errorf("unknown engine %q (known: %s)", n, strings.Join(known, ", "))
		case !searchHas(out, n):
			out = append(out, &searchEngines[i])
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no engines selected")
	}
	return out, nil
}

func searchHas(es []*searchEngine, name string) bool {
	for _, e := range es {
		if e.name == name {
			return true
		}
	}
	return false
}

// search asks every engine at once and returns their outcomes in engine order.
func (st *searchState) search(ctx context.Context, cfg *config, text string, engines []*searchEngine, n int) []searchOutcome {
	timeout := time.Duration(max(cfg.int("SEARCH_TIMEOUT_MS"), 1)) * time.Millisecond
	backoff := time.Duration(cfg.int("SEARCH_BACKOFF_MS")) * time.Millisecond
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Second) // the overall deadline; engines time out first
	defer cancel()
	type answer struct {
		i int
		o searchOutcome
	}
	outs := make([]searchOutcome, len(engines))
	ch := make(chan answer, len(engines))
	waiting := 0
	now := time.Now()
	for i, e := range engines {
		outs[i] = searchOutcome{Name: e.name, Status: "timed out", Detail: fmt.Sprintf("no answer within %v", timeout)}
		base := strings.TrimRight(cfg.str("SEARCH_URL_"+strings.ToUpper(e.name)), "/")
		if base == "" {
			base = e.base
		}
		if base == "" && len(e.keys) > 0 {
			base = strings.TrimRight(cfg.str(e.keys[0]), "/")
		}
		st.mu.Lock()
		rest, resting := st.resting[e.name]
		st.mu.Unlock()
		u, err := url.Parse(base)
		switch {
		case !searchConfigured(cfg, e):
			outs[i].Status, outs[i].Detail = "error", "not configured: set "+strings.Join(e.keys, " and ")
		case resting && now.Before(rest.until):
			outs[i].Status, outs[i].Detail = "resting", rest.why+" "+searchAgo(now.Sub(rest.since))
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			outs[i].Status, outs[i].Detail = "error", fmt.Sprintf("bad base URL %q", base)
		default:
			waiting++
			q := &searchQuery{base: base, text: text, n: n, cfg: cfg, st: st}
			go func(i int, e *searchEngine) { // exits when the engine has answered or its timeout has ended
				ectx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				ch <- answer{i, st.ask(ectx, e, q, timeout)}
			}(i, e)
		}
	}
	for ; waiting > 0; waiting-- {
		select {
		case a := <-ch:
			outs[a.i] = a.o
		case <-ctx.Done():
			waiting = 1 // the rest keep their "timed out"
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, o := range outs {
		if backoff > 0 && (o.Status == "rate-limited" || o.Status == "blocked" || o.Status == "captcha") {
			st.resting[o.Name] = searchRest{since: now, until: time.Now().Add(backoff), why: o.Status}
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

func runWebSearch(ctx context.Context, c *toolCall) toolResult {
	var a struct {
		Query      string   `json:"query"`
		MaxResults int      `json:"max_results"`
		Engines    []string `json:"engines"`
	}
	if err := json.Unmarshal(c.args, &a); err != nil {
		return errorResult("WebSearch: %v", err)
	}
	query := strings.TrimSpace(a.Query)
	switch {
	case query == "":
		return errorResult("WebSearch: the query is blank; say what to search for")
	case len([]rune(query)) > 2000:
		return errorResult("WebSearch: the query is longer than 2000 characters; shorten it")
	}
	if a.MaxResults <= 0 {
		a.MaxResults = 10
	}
	srv := c.s.srv
	engines, err := searchSelect(srv.cfg, a.Engines)
	if err != nil {
		return errorResult("WebSearch: %v", err)
	}
	outs := srv.search.search(ctx, srv.cfg, query, engines, min(max(a.MaxResults, 10), 50))
	return searchReply(searchMerge(outs, a.MaxResults), outs)
}

// searchReply is the numbered list, then one line per engine.
func searchReply(results []searchResult, outs []searchOutcome) toolResult {
	var b, fates strings.Builder
	for i, r := range results {
		fmt.Fprintf(&b, "%d. **%s**\n   %s\n", i+1, r.Title, r.URL)
		if r.Snippet != "" {
			fmt.Fprintf(&b, "   %s\n", r.Snippet)
		}
		fmt.Fprintf(&b, "   found by: %s\n\n", strings.Join(r.Engines, ", "))
	}
	failed := 0
	for _, o := range outs {
		fate := o.Status
		switch {
		case o.Status == "ok":
			fate = fmt.Sprintf("ok (%d results)", o.Count)
		case o.Detail != "":
			fate += " (" + o.Detail + ")"
		}
		if o.Status != "ok" && o.Status != "empty" {
			failed++
		}
		fmt.Fprintf(&fates, "- %s: %s\n", o.Name, fate)
	}
	structured := map[string]any{"results": results, "engines": outs}
	if failed == len(outs) {
		res := errorResult("WebSearch: every engine failed:\n%s", strings.TrimRight(fates.String(), "\n"))
		res.structured = structured
		return res
	}
	if len(results) == 0 {
		b.WriteString("No results.\n\n")
	}
	res := textResult(b.String() + "Engines:\n" + strings.TrimRight(fates.String(), "\n"))
	res.structured = structured
	return res
}
