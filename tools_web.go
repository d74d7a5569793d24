// tools_web.go holds the web tools: ReadDocs (a page read through headless
// Chromium over the DevTools protocol, with a net/http fallback) and WebSearch
// (many engines at once, merged), and the HTML handling both share: a small
// tokenizer and tree builder.
//
// Rules (WebSearch has its own, in its section):
//   - ReadDocs reads http and https URLs only;
//   - every page and every engine reply is untrusted: sizes are capped,
//     nesting is bounded, reading takes time linear in its size, nothing
//     panics on malformed markup;
//   - the browser is one process group, started lazily, reused, and killed
//     with the server; it has no port: telson drives it over a socket pair it
//     inherits (--remote-debugging-pipe); when telson is root it runs as nobody,
//     with Chromium's sandbox where nobody can have it. Only a browser the user
//     names (CHROME_URL) is driven over a port, with our RFC 6455 websocket client.
package main

import (
	"bufio"
	"cmp"
	"context"
	crand "crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
)

// htmlNode is an element or a text node of a parsed page. The root has tag "#root".
type htmlNode struct {
	tag      string // lowercase element name; "" for a text node
	text     string // a text node's decoded text
	attrs    []htmlAttr
	parent   *htmlNode
	children []*htmlNode

	// The converter's, set once (measure, scoreParas): the text below, its
	// part outside links, its commas, its paragraphs' text; n's place in document
	// order and its subtree's end (holds); a block's score; its class words
	// naming content and furniture; its id made from its heading; a content
	// block of mdMinContent characters below it; in a figure or beside a
	// caption; hidden by the page (a tab panel never is: a reader shows it
	// with a click).
	size, prose, commas, paras, pre, end       int32
	score                                      float64
	good, bad, own, content, captioned, hidden bool
}

type htmlAttr struct{ key, val string }

// wordSet returns the set of the words in s.
func wordSet(s string) map[string]bool {
	set := map[string]bool{}
	for _, w := range strings.Fields(s) {
		set[w] = true
	}
	return set
}

const (
	maxHTMLDepth = 256     // deeper elements become children of the deepest kept one
	maxHTMLNodes = 1 << 19 // nodes and attributes of a page; the markup after them is left out
	htmlSpace    = " \t\r\n\f"
)

var (
	// htmlMarkup matches what opens markup: '<' then a letter, "/" and a letter, '!' or '?'.
	htmlMarkup = regexp.MustCompile(`^<(/?[a-zA-Z]|[!?])`)
	htmlVoid   = wordSet(`area base br col embed hr img input link meta param source track wbr
		frame keygen`)
	// htmlRawText elements hold text up to their end tag, markup and all.
	htmlRawText = wordSet("script style textarea title xmp iframe noembed noframes plaintext")
	// htmlClosesP are start tags that end an open paragraph (htmlP) unless
	// an element of htmlPScope is nearer.
	htmlClosesP = wordSet(`address article aside blockquote details div dl fieldset figure footer
		form h1 h2 h3 h4 h5 h6 header hr main nav ol p pre section table ul`)
	htmlP      = wordSet("p")
	htmlPScope = wordSet("div section article main table ul ol li blockquote td th button")
	// htmlImpliedEnd: a start tag ends the nearest open element of the first
	// set unless one of the second is nearer.
	htmlImpliedEnd = map[string][2]map[string]bool{
		"li": {wordSet("li"), wordSet("ul ol menu table")},
		"tr": {wordSet("tr"), wordSet("table")},
		"td": {wordSet("td th"), wordSet("tr table")},
		"th": {wordSet("td th"), wordSet("tr table")},
		"a":  {wordSet("a"), nil}, // links do not nest
	}
)

// parseHTML builds a tree from src the forgiving way browsers do, in
// simplified form: implied end tags for p, li, tr, td, th and a; a heading's
// start or end tag ends any open heading; other stray end tags are ignored; unclosed
// elements end with their parent; comments, doctypes and processing
// instructions are dropped.
func parseHTML(src string) *htmlNode {
	root := &htmlNode{tag: "#root"}
	stack := []*htmlNode{root}
	open := map[string][]int{} // the places on the stack of the open elements, by tag
	// nearest returns the place of the nearest open element named in names, 0 for none.
	nearest := func(names map[string]bool) int {
		at := 0
		for name := range names {
			if o := open[name]; len(o) > 0 {
				at = max(at, o[len(o)-1])
			}
		}
		return at
	}
	// closeTo pops the nearest open element named in names and those above
	// it, unless one named in stop is nearer: in time linear in the page.
	closeTo := func(names, stop map[string]bool) {
		if i := nearest(names); i > nearest(stop) {
			for _, n := range stack[i:] {
				open[n.tag] = open[n.tag][:len(open[n.tag])-1]
			}
			stack = stack[:i]
		}
	}
	// Text gathers in pending (a comment between two runs joins them) and
	// becomes a node when markup that builds the tree comes: linear, whatever the input.
	var pending strings.Builder
	nodes := 0
	add := func(n *htmlNode) {
		p := stack[len(stack)-1]
		n.parent = p
		p.children = append(p.children, n)
		nodes += 1 + len(n.attrs)
	}
	flush := func() {
		if pending.Len() > 0 {
			add(&htmlNode{text: pending.String()})
			pending.Reset()
		}
	}
	for pos := 0; pos < len(src) && nodes < maxHTMLNodes; {
		rest := src[pos:]
		switch {
		case rest[0] != '<' || !htmlMarkup.MatchString(rest):
			// Text runs to the next '<'; a '<' that opens no markup is text.
			end := strings.IndexByte(rest[1:], '<') + 1
			if end == 0 {
				end = len(rest)
			}
			pos += end
			pending.WriteString(html.UnescapeString(rest[:end]))
		case rest[1] == '!' || rest[1] == '?':
			end := ">"
			if strings.HasPrefix(rest, "<!--") {
				end = "-->"
			}
			_, after, _ := strings.Cut(rest[2:], end)
			pos = len(src) - len(after)
		case rest[1] == '/':
			flush()
			name, after, _ := strings.Cut(rest[2:], ">")
			if i := strings.IndexAny(name, htmlSpace+"/"); i >= 0 {
				name = name[:i]
			}
			name = strings.ToLower(name)
			names := map[string]bool{name: true}
			if mdHeadings[name] {
				names = mdHeadings // any heading's end tag ends the open heading
			}
			pos = len(src) - len(after)
			closeTo(names, nil)
		default: // a start tag
			flush()
			n, takes, next := htmlStartTag(src, pos)
			pos = next
			if e, ok := htmlImpliedEnd[n.tag]; ok {
				closeTo(e[0], e[1])
			} else if htmlClosesP[n.tag] {
				closeTo(htmlP, htmlPScope)
			}
			if mdHeadings[n.tag] {
				closeTo(mdHeadings, nil) // headings do not nest
			}
			add(n)
			if takes && len(stack) < maxHTMLDepth {
				open[n.tag] = append(open[n.tag], len(stack))
				stack = append(stack, n)
			}
		}
	}
	flush()
	return root
}

// htmlStartTag reads the start tag at s[i] (and a raw-text element's text);
// open: it takes children.
func htmlStartTag(s string, i int) (n *htmlNode, open bool, end int) {
	// span returns the bytes from i that are (or are not) in set; i moves past them.
	span := func(set string, in bool) string {
		j := i
		for i < len(s) && strings.ContainsRune(set, rune(s[i])) == in {
			i++
		}
		return s[j:i]
	}
	i++
	n = &htmlNode{tag: strings.ToLower(span(htmlSpace+"/>", false))}
	// Attributes are apart by white space or '/'; a '/' just before the '>' closes the element.
	sep := span(htmlSpace+"/", true)
	for ; i < len(s) && s[i] != '>'; sep = span(htmlSpace+"/", true) {
		key := span(htmlSpace+"/>=", false) // "" before a stray '='
		span(htmlSpace, true)
		val := ""
		if i < len(s) && s[i] == '=' {
			i++
			span(htmlSpace, true)
			if i < len(s) && (s[i] == '"' || s[i] == '\'') {
				i++
				val = span(s[i-1:i], false)
				i = min(i+1, len(s))
			} else {
				val = span(htmlSpace+">", false)
			}
		}
		n.attrs = append(n.attrs, htmlAttr{strings.ToLower(key), html.UnescapeString(val)})
	}
	i = min(i+1, len(s)) // past the '>'
	selfClosing := strings.HasSuffix(sep, "/")
	if selfClosing || !htmlRawText[n.tag] {
		return n, !selfClosing && !htmlVoid[n.tag], i
	}
	j, closer := i, "</"+n.tag
	for j < len(s) && !strings.EqualFold(s[j:min(j+len(closer), len(s))], closer) {
		j++
	}
	if raw := s[i:j]; raw != "" {
		if n.tag == "title" {
			raw = html.UnescapeString(raw)
		}
		n.children = []*htmlNode{{text: raw, parent: n}}
	}
	_, after, _ := strings.Cut(s[j:], ">")
	return n, false, len(s) - len(after)
}

func (n *htmlNode) attr(key string) string {
	for _, a := range n.attrs {
		if a.key == key {
			return a.val
		}
	}
	return ""
}

// find returns the first node below n (depth first) that match accepts, or nil.
func (n *htmlNode) find(match func(*htmlNode) bool) *htmlNode {
	for _, c := range n.children {
		if match(c) {
			return c
		} else if d := c.find(match); d != nil {
			return d
		}
	}
	return nil
}

// findAll returns the nodes below n that match accepts, in document order, not looking inside them.
func (n *htmlNode) findAll(match func(*htmlNode) bool) []*htmlNode {
	var out []*htmlNode
	for _, c := range n.children {
		if match(c) {
			out = append(out, c)
		} else {
			out = append(out, c.findAll(match)...)
		}
	}
	return out
}

// textContent is the text below n with runs of white space folded to one space.
func (n *htmlNode) textContent() string {
	return strings.Join(strings.Fields(rawText(n)), " ")
}

// rawText is the text below n as it stands, with <br> and the end of p, div
// and li as a newline.
func rawText(n *htmlNode) string {
	var b strings.Builder
	var walk func(*htmlNode)
	walk = func(n *htmlNode) {
		for _, c := range n.children {
			switch {
			case c.tag == "":
				b.WriteString(c.text)
			case c.tag == "br":
				b.WriteByte('\n')
			case !mdDropTags[c.tag]:
				walk(c)
				// A block ends its line, once (a line's <br> ends it already).
				if (c.tag == "p" || c.tag == "div" || c.tag == "li") &&
					!strings.HasSuffix(b.String(), "\n") {
					b.WriteByte('\n')
				}
			}
		}
	}
	walk(n)
	return b.String()
}

// ---- HTML to markdown, text or html ------------------------------------------
//
// The converter reads the main content only, in one walk that writes
// markdown, text or html (mdFormat): what it leaves out is left out of all
// three. Paragraphs score their parent, grandparent and great-grandparent
// (length, commas, few links); class and id words (whole words only) and
// main/article add to or take from a block's score; the best block is kept
// with its siblings that read as content. When
// no block clearly wins, or the winner holds far less text than the page (docs
// with a sidebar, a forum thread, a list), the whole page is read, less its
// furniture. Output stops once the caller's limit is reached.
//
// Furniture is decided by structure first: tags and roles (nav, footer,
// aside, tab lists), link density, comment threads (avatars, reply links),
// hidden text (the hidden attribute, inline styles, the page's own style
// rules; a tab panel is never hidden: a reader shows it with a click), then
// by class words; but for tags and roles that are never content, neither
// drops the block that holds most of the page's text and all its
// paragraphs. A document's sections (a heading whose id is made from its
// text, as generators make them, and what follows it) keep their link lists,
// footnotes and asides, and such an id is never read as a class word.

var (
	mdEscape = strings.NewReplacer("*", `\*`, "`", "\\`")
	// html's text and attribute values; a page's text never holds the heading mark
	htmlEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;",
		mdHeading, "")
	mdFormats = map[string]mdFormat{"markdown": {mdEscape, "  \n", "* * *"},
		"text": {mdNoEscape, "\n", ""}, "html": {htmlEscape, "<br>\n", "<hr>"}}
	mdEscapeInLink = strings.NewReplacer("*", `\*`, "`", "\\`", "[", `\[`, "]", `\]`)
	mdURLEscape    = strings.NewReplacer("(", "%28", ")", "%29", " ", "%20")
	mdCellEscape   = strings.NewReplacer("  \n", " ", "\n", " ", "|", `\|`)
	mdTextCell     = strings.NewReplacer("\n", " ", "\t", " ")
	mdNoEscape     = strings.NewReplacer()
	// a line's start that reads as a heading, quote or list marker, split before its last character
	mdLineStart   = regexp.MustCompile(`^(#{0,5}|\d{0,9})([#>+.)-])( |$)`)
	mdSpaces      = regexp.MustCompile(`[ \t\r\n\f]+`)
	mdBackticks   = regexp.MustCompile("`+")
	mdHeadingMark = regexp.MustCompile(mdHeading + "[1-6]")
	mdURLSchemes  = wordSet("http https mailto") // html's links and images
	// a code block's language in a class: language-ts, lang-ts, highlight-ts, sourceCode ts
	mdLanguage = regexp.MustCompile(`(?:^|\s)(?:(?:language|lang|highlight)-|sourceCode\s+)(\S+)`)
	// what hides an element: no display, no visibility, faint (opacity, a
	// filter's), tiny (font-size, a scale), blurred, off-screen, clipped to
	// nothing (a height of 0 and hidden overflow, a clip-path, a clip), or
	// white on white (a colour alone says nothing: the background may come
	// from a stylesheet not read)
	mdHiddenStyle = regexp.MustCompile(`(?i)display *: *none|visibility *: *hidden|` +
		`(?:^|[;\s])(?:opacity *: *|opacity\( *)(?:0?\.0\d*|0)\b|` +
		`font-size *: *(?:0[a-z%]*|[0-3](?:\.\d+)?px) *(?:[;!]|$)|scale\( *0?\.?0*[\s,)]|` +
		`blur\( *(?:\d\d|[4-9])|(?:left|top|text-indent|margin-left|margin-top) *: *-\d{4}|` +
		`(?:^|[;\s])(?:max-)?height *: *0[a-z%]* *(?:[;!]|$).*overflow *: *(?:hidden|clip)|` +
		`overflow *: *(?:hidden|clip).*(?:^|[;\s])(?:max-)?height *: *0[a-z%]* *(?:[;!]|$)|` +
		`clip-path *: *(?:inset\( *(?:[5-9]\d|100)%|circle\( *0)|clip *: *rect\( *0[a-z]*[ ,]+0|` +
		`(?:^|;) *color *: *` + mdWhite + `.*background(?:-color)? *: *` + mdWhite + `|` +
		`background(?:-color)? *: *` + mdWhite + `.*(?:^|;) *color *: *` + mdWhite)
	// an @media rule true of a desktop screen (1280 pixels wide, or more)
	mdDesktop = regexp.MustCompile(`^@media *(?:only +)?(?:screen|all)? *(?:and *)?` +
		`(?:\( *min-width *: *(?:\d{1,3}|1[01]\d\d|12[0-7]\d|1280)px *\) *(?:and *)?)*\{`)
	// a compound selector's parts: a type, *, a class, an id
	mdSimpleSel = regexp.MustCompile(`[.#]?[\w-]+|\*`)
	// a tab set's pane (sphinx-inline-tabs, Bootstrap, MkDocs, sphinx-design, VitePress), which a
	// reader shows with a click
	mdPane = regexp.MustCompile(`(?:^|\s)(?:tab-content|tab-pane|tabpanel|tabbed-block|sd-tab-content|language-\S+ vp-adaptive-theme)(?:\s|$)`)
	// a style rule (its selectors, its declarations), an @media rule or the like around rules,
	// and a class or an id in a selector
	mdCSSRule      = regexp.MustCompile(`([^{}]*)\{([^{}]*)\}`)
	mdAtRule       = regexp.MustCompile(`@[^{}]*\{(?:[^{}]*\{[^{}]*\})*[^{}]*\}`)
	mdSelectorWord = regexp.MustCompile(`[.#](?:[\w-]|\\.)+`)
	mdEmphasis     = map[string]string{"strong": "**", "b": "**", "em": "*", "i": "*", "del": "~~",
		"s": "~~", "strike": "~~"}

	mdDropTags = wordSet(`head script style noscript svg template iframe object embed canvas
		input textarea select button link meta datalist`)
	mdBlockTags = wordSet(`address article aside blockquote body caption center dd details dialog
		div dl dt fieldset figcaption figure footer form h1 h2 h3 h4 h5 h6 header hgroup hr html
		label li main nav ol p pre section summary table td th tr ul`)
	mdInlineTags = wordSet("a b strong em i del s strike code kbd samp tt var img br script")
	mdCodeTags   = wordSet("code kbd samp tt var")
	mdMainTags   = wordSet("article main")     // they hold a page's article
	mdNestTags   = wordSet("ul ol blockquote") // lists and quotes nest up to mdNestMax deep
	mdNoiseRoles = wordSet(`navigation banner contentinfo complementary menu menubar search
		dialog alertdialog tablist`)
	mdHeadings   = wordSet("h1 h2 h3 h4 h5 h6")
	mdSelfBlocks = wordSet("h1 h2 h3 h4 h5 h6 hr pre table li") // element renders them its own way
	mdNoLanguage = wordSet("default none text plaintext")
	mdParaTags   = wordSet("p pre td dd")
	mdListTags   = wordSet("div ul ol section") // link lists among them are furniture
	// a cell holding one is for layout
	mdLayoutCells = wordSet("pre table blockquote h1 h2 h3 h4 h5 h6")
	// Words of class and id values naming content, and naming furniture:
	// whole, or before a tail that makes a compound (relatedposts,
	// commentlist), not inside a longer word (commented).
	mdGoodWord = regexp.MustCompile(`^(?:article|body|content|entry|main|post|story|text|blog|` +
		`prose|markdown)` + mdWordTail)
	mdBadWord = regexp.MustCompile(`^(?:ads?|advert|advertisement|author|banner|breadcrumb|` +
		`byline|caption|comments?|consent|cookies?|copyright|credits?|cta|disqus|footer|gdpr|` +
		`masthead|menu|meta|modal|nav|navbar|license|licence|navigation|newsletter|pager|` +
		`pagination|popup|promo|recommended|related|share|sharing|side|sidebar|social|sponsor|` +
		`subscribe|subscription|tags|toolbar)` + mdWordTail)
)

const (
	mdMinPara       = 25     // characters that make a paragraph
	mdMinContent    = 1000   // characters of a block named as content that keep it
	mdEmphasisDepth = 2      // emphasis in emphasis this deep is not marked
	mdWordWeight    = 25.0   // a class word's weight
	mdMinWin        = 20.0   // a main block scores at least this
	mdNestMax       = 10     // deeper lists and quotes come flat
	mdItemDepth     = 2      // levels from an item's text up to its list
	mdMaxCaption    = 300    // characters of a caption; a longer one is text
	mdLangDepth     = 3      // levels from a code block up to the wrapper naming its language
	mdHeading       = "\x02" // and the level start a heading's line until dropEmptyHeadings
	mdWhite         = `(?:#fff(?:fff)?\b|white\b|rgb\(255, ?255, ?255\))`
	mdWordTail      = `(?:area|bar|block|box|container|content|holder|info|inner|items?|links?|` +
		`list|module|panel|posts?|section|widget|wrap|wrapper|zone)?$`
)

// mdFormat is what the converter writes in a format: markdown, text or html.
type mdFormat struct {
	esc    *strings.Replacer // escapes text (more inside markdown's links)
	br, hr string            // a line break, a thematic break
}

// mdConv turns a parsed page into markdown, text (no markup) or html (the
// elements and attributes it reads): one walk, one judgment for all three.
type mdConv struct {
	mdFormat
	html      bool // the format: html, text, else markdown
	text      bool
	base      *url.URL
	h1        int                   // level-1 headings kept
	all       bool                  // keep furniture: it is all the page has
	page      int32                 // text of the page's main area, less links
	pageParas int32                 // text of the paragraphs in the page
	nest      int                   // depth of lists and quotes being rendered
	nodes     int32                 // nodes measured
	emphasis  int                   // depth of emphasis being rendered
	limit     int                   // characters after which output stops
	made      int                   // characters of text rendered so far
	cands     []*htmlNode           // nodes with a score, in document order
	doc       *htmlNode             // the document: around the headings that have ids
	outDoc    bool                  // the last heading met opens no section of it
	tabs      []*htmlNode           // the tabs labelling the tab panels to come
	hiddenCSS map[string][][]string // the selectors that hide, by their last class or id
	shownCSS  map[string]bool       // classes and ids they show
	unseen    map[string]bool       // texts not to read, their spaces collapsed
}

// mdPage is a converted page; size: characters of the page's text in it; cut: output stopped
// at the limit.
type mdPage struct {
	title, text string
	size        int
	cut         bool
}

// htmlByTag returns a matcher of the elements named tag.
func htmlByTag(tag string) func(*htmlNode) bool {
	return func(n *htmlNode) bool { return n.tag == tag }
}

// convertHTML returns the page's title and main content in format (a key of mdFormats),
// links made absolute, stopping after about limit characters, less the texts unseen.
func convertHTML(src, pageURL, format string, limit int, unseen ...string) mdPage {
	root := parseHTML(src)
	m := &mdConv{mdFormat: mdFormats[format], html: format == "html", text: format == "text",
		limit: limit, unseen: wordSet("")}
	for _, t := range unseen {
		m.unseen[t] = t != ""
	}
	m.base, _ = url.Parse(pageURL)
	if b := root.find(htmlByTag("base")); b != nil && m.base != nil {
		if u, err := m.base.Parse(b.attr("href")); err == nil {
			m.base = u
		}
	}
	m.readStyles(root)
	m.measure(root)
	body := cmp.Or(root.find(htmlByTag("body")), root)
	isMain := func(n *htmlNode) bool { return n.tag == "main" || n.attr("role") == "main" }
	loose := cmp.Or(body.find(isMain), body) // the page's main area, or its body
	if loose.size == 0 {
		loose = body
	}
	m.page = loose.prose
	for _, h := range body.findAll(func(n *htmlNode) bool { return n.own }) {
		m.doc = cmp.Or(m.doc, h.parent)
		for !m.doc.holds(h) {
			m.doc = m.doc.parent
		}
	}
	top := cmp.Or(m.mainContent(body, loose), loose)
	text := ""
	for _, content := range []*htmlNode{top, loose, body, body} {
		m.made, m.outDoc, m.tabs, m.h1 = 0, false, nil, 0 // each attempt starts afresh
		if text = m.block(content, false); text != "" {
			break
		}
		m.all = content == body // everything looked like furniture: read it whole
	}
	text = m.dropEmptyHeadings(text)
	title := cmp.Or(root.find(htmlByTag("title")), &htmlNode{}).textContent()
	if title != "" && m.h1 == 0 {
		// A page without its own heading starts with its title.
		text = m.wrap(m.esc.Replace(cutRunes(title, maxTitle)), "h1", "# ", "") + "\n\n" + text
	}
	return mdPage{title, text, m.made, m.made > m.limit}
}

// dropEmptyHeadings drops the headings marked with mdHeading and their level
// (those outside the document's sections) with nothing under them: the next
// heading is of their level or higher, or the text ends (a thematic break is
// nothing); a text of headings only is kept. The marks go.
func (m *mdConv) dropEmptyHeadings(s string) string {
	blocks := strings.Split(s, "\n\n")
	var kept []string
	next, text := 0, false // the level of what follows: a heading's, 7 for text, 0 for nothing
	h1 := 0                // level-1 headings dropped
	for i := len(blocks) - 1; i >= 0; i-- {
		h, heading := strings.CutPrefix(blocks[i], mdHeading)
		level := 7
		if heading = heading && h != ""; heading {
			level = int(h[0] - '0')
		}
		if heading && level >= next {
			if level == 1 {
				h1++
			}
			continue
		}
		kept = append(kept, blocks[i])
		if blocks[i] != m.hr {
			next = level
		}
		text = text || !heading
	}
	if text {
		slices.Reverse(kept)
		s = strings.Join(kept, "\n\n")
		m.h1 -= h1
	}
	return mdHeadingMark.ReplaceAllString(s, "")
}

// measure sets what the converter reads of n and the nodes below it (see
// htmlNode), once, so that converting costs time linear in the page (an
// e-mail link is text). What the page hides is marked hidden, as the
// browser marks what it computes hidden, and measures nothing.
func (m *mdConv) measure(n *htmlNode) {
	m.nodes++
	n.pre, n.end = m.nodes, m.nodes+1
	if n.tag == "" {
		if m.unseen[strings.Join(strings.Fields(n.text), " ")] {
			n.text = ""
		}
		n.size = int32(len(strings.TrimSpace(n.text)))
		n.prose = n.size
		n.commas = int32(strings.Count(n.text, ","))
		return
	}
	n.hidden = n.attr("role") != "tabpanel" && !mdPane.MatchString(n.attr("class")) && (m.hides(n) ||
		slices.ContainsFunc(n.attrs, func(a htmlAttr) bool { return a.key == "hidden" }))
	if mdDropTags[n.tag] || n.hidden {
		return
	}
	n.captioned = n.parent != nil && n.parent.captioned || n.tag == "figure" ||
		slices.ContainsFunc(n.children, htmlByTag("figcaption"))
	for _, c := range n.children {
		m.measure(c)
		n.size += c.size
		n.prose += c.prose
		n.commas += c.commas
		n.content = n.content || c.content ||
			(c.good && !c.bad || mdMainTags[c.tag]) && c.prose >= mdMinContent
	}
	n.end = m.nodes + 1
	if n.tag == "a" && !strings.HasPrefix(n.attr("href"), "mailto:") {
		n.prose = 0
	}
	// n's id is made from its heading: n is a heading whose id holds its
	// text, or a section whose id holds the text of the heading it opens
	// with (Sphinx, MyST, pandoc). A heading longer than a caption is not one.
	h := n
	if i := slices.IndexFunc(n.children, func(c *htmlNode) bool { return c.size > 0 }); i >= 0 &&
		!mdHeadings[n.tag] {
		h = n.children[i]
	}
	id := n.attr("id")
	if id != "" && mdHeadings[h.tag] && h.size < mdMaxCaption {
		slug := mdSlug(rawText(h))
		n.own = slug != "" && strings.Contains(mdSlug(id), slug)
	}
	// Words of its class, id and item type (schema.org/Comment) name content
	// and furniture; an id made from n's own heading names neither.
	if n.own {
		id = ""
	}
	hints := strings.ToLower(n.attr("class") + " " + id + " " + n.attr("itemtype"))
	for _, w := range strings.FieldsFunc(hints, notWordRune) {
		n.good = n.good || mdGoodWord.MatchString(w)
		n.bad = n.bad || mdBadWord.MatchString(w)
	}
}

// holds reports that d is n or below it (both measured).
func (n *htmlNode) holds(d *htmlNode) bool {
	return n != nil && n.pre <= d.pre && d.pre < n.end
}

// docPart reports that n is in a section of the document.
func (m *mdConv) docPart(n *htmlNode) bool {
	return !m.outDoc && m.doc.holds(n)
}

// mdSlug is s lowercase, its letters and digits only.
func mdSlug(s string) string {
	return strings.ToLower(strings.Join(strings.FieldsFunc(s, notWordRune), ""))
}

// notWordRune reports a rune that is no letter or digit.
func notWordRune(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }

// mainContent returns the best block, or the parent whose children read as
// content, or nil when no block clearly wins or it holds far less text than loose.
func (m *mdConv) mainContent(body, loose *htmlNode) *htmlNode {
	m.pageParas = m.scoreParas(body)
	var top *htmlNode
	best := mdMinWin
	for _, n := range m.cands {
		if w := m.weight(n); w > best {
			top = n
			best = w
		}
	}
	if top == nil {
		return nil
	}
	// Climb while a parent adds more paragraph text than other text: its
	// children then read as content, and its furniture is skipped later.
	for top.parent != nil && top.parent.tag != "body" {
		p := top.parent
		paras := p.paras - top.paras
		if other := p.size - top.size - paras; paras*2 <= other && p.size > top.size {
			break
		}
		top = p
	}
	// The article around the text holds its headline, deck and lead photo.
	for a := top.parent; a != nil; a = a.parent {
		if mdMainTags[a.tag] {
			top = a
			break
		}
	}
	// So does a parent holding nothing else shown but headings and headers.
	other := func(c *htmlNode) bool {
		return c != top && c.size > 0 && !mdHeadings[c.tag] && c.tag != "header" && !m.skip(c)
	}
	for top.parent != nil && top.parent.tag != "body" &&
		!slices.ContainsFunc(top.parent.children, other) {
		top = top.parent
	}
	if top.prose*3 < loose.prose {
		return nil
	}
	return top
}

// scoreParas adds each paragraph's score to its parent, grandparent and
// great-grandparent, and returns the text of the paragraphs below n.
func (m *mdConv) scoreParas(n *htmlNode) (paras int32) {
	ownText := func(c *htmlNode) bool { return c.tag == "" && c.size >= mdMinPara }
	for _, c := range n.children {
		if c.tag == "" || m.skip(c) {
			continue
		}
		// a paragraph: p, pre, a cell, an item, or a block with text of its own
		isPara := mdParaTags[c.tag] ||
			mdBlockTags[c.tag] && !mdHeadings[c.tag] && slices.ContainsFunc(c.children, ownText)
		if isPara && c.prose >= mdMinPara {
			// by its commas and length
			v := 1 + float64(c.commas) + min(float64(c.prose)/100, 3)
			for a, d := c.parent, 1.0; a != nil && d <= 3; a, d = a.parent, d+1 {
				if a.score == 0 {
					m.cands = append(m.cands, a)
				}
				a.score += v / d
			}
			paras += c.prose
		}
		paras += m.scoreParas(c)
	}
	n.paras = paras
	return paras
}

// weight is a block's score with its class words and role, less its share of link text.
func (m *mdConv) weight(n *htmlNode) float64 {
	w := n.score
	if n.good || mdMainTags[n.tag] || n.attr("role") == "main" {
		w += mdWordWeight
	}
	if n.bad {
		w -= mdWordWeight
	}
	return w * (1 - float64(n.size-n.prose)/float64(max(n.size, 1)))
}

// hides reports an element the page hides: aria-hidden, its inline style
// (mdHiddenStyle), a class for screen readers only, or a style element's rule
// for its type, one of its classes or its id, unless a rule shows another of
// them.
func (m *mdConv) hides(n *htmlNode) bool {
	if n.attr("aria-hidden") == "true" ||
		mdHiddenStyle.MatchString(n.attr("style")) {
		return true
	}
	hidden := false
	for _, k := range strings.Fields(n.attr("class") + " #" + n.attr("id")) {
		if m.shownCSS[k] {
			return false
		}
		hidden = hidden || slices.ContainsFunc(m.hiddenCSS[k], n.matches)
	}
	return hidden
}

// matches reports whether n matches sel, compounds and child combinators (>), the
// nearest ancestor taken for a descendant one.
func (n *htmlNode) matches(sel []string) bool {
	is := func(n *htmlNode, compound string) bool {
		for _, p := range mdSimpleSel.FindAllString(compound, -1) {
			class := slices.Contains(strings.Fields(n.attr("class")), p[1:])
			if p[0] == '.' && !class || p[0] == '#' && n.attr("id") != p[1:] ||
				!strings.ContainsAny(p[:1], ".#*") && !strings.EqualFold(p, n.tag) {
				return false
			}
		}
		return true
	}
	if !is(n, sel[len(sel)-1]) {
		return false
	}
	for i := len(sel) - 2; i >= 0; i-- {
		child := sel[i] == ">"
		if child {
			i--
		}
		for n = n.parent; n != nil && i >= 0 && !is(n, sel[i]); n = n.parent {
			if child {
				return false
			}
		}
		if n == nil || i < 0 {
			return false
		}
	}
	return true
}

// readStyles reads the page's style elements: hiddenCSS gets the selectors
// of their rules that hide, outside at-rules but @media true of a desktop
// screen, by the first class (without the dot, so that .c and #i match) or id
// of their last compound, when they hold only types, classes, ids and
// combinators for descendants and children; shownCSS the classes and ids of any
// rule that sets another display.
func (m *mdConv) readStyles(root *htmlNode) {
	// the classes of text for screen readers only hide too
	m.hiddenCSS = map[string][][]string{}
	for _, c := range strings.Fields("sr-only visually-hidden screen-reader-text") {
		m.hiddenCSS[c] = [][]string{{"." + c}}
	}
	m.shownCSS = map[string]bool{}
	for _, st := range root.findAll(htmlByTag("style")) {
		css := rawText(st)
		for _, r := range mdCSSRule.FindAllStringSubmatch(css, -1) {
			if strings.Contains(r[2], "display") && !mdHiddenStyle.MatchString(r[2]) {
				for _, t := range mdSelectorWord.FindAllString(r[1], -1) {
					m.shownCSS[strings.TrimPrefix(strings.ReplaceAll(t, `\`, ""), ".")] = true
				}
			}
		}
		css = mdAtRule.ReplaceAllStringFunc(css, func(at string) string {
			if mdDesktop.MatchString(at) {
				return at[strings.IndexByte(at, '{')+1 : len(at)-1]
			}
			return ""
		})
		for _, r := range mdCSSRule.FindAllStringSubmatch(css, -1) {
			if !mdHiddenStyle.MatchString(r[2]) {
				continue
			}
			for _, sel := range strings.Split(r[1], ",") {
				parts := strings.Fields(strings.ReplaceAll(sel, ">", " > "))
				if len(parts) == 0 || strings.ContainsAny(sel, "[:+~()\\") {
					continue
				}
				k := mdSelectorWord.FindString(parts[len(parts)-1])
				if k = strings.TrimPrefix(k, "."); k != "" {
					m.hiddenCSS[k] = append(m.hiddenCSS[k], parts)
				}
			}
		}
	}
}

// holdsPage reports that n holds most of the page's text and all its
// paragraphs. While paragraphs are being counted, the share of text alone decides.
func (m *mdConv) holdsPage(n *htmlNode) bool {
	return n.prose*2 > m.page && n.paras+mdMinPara > m.pageParas
}

// most reports that n, or the block named as furniture that n is an item
// of, holds the page (live commentary in comment blocks; comments under an
// article, even a short one, are no such block).
func (m *mdConv) most(n *htmlNode) bool {
	for up := 0; n != nil && up <= mdItemDepth; up, n = up+1, n.parent {
		if n.bad && !n.good && m.holdsPage(n) {
			return true
		}
	}
	return false
}

// skip reports an element left out: never shown, hidden, or page furniture
// by tag, role, class words or link density.
func (m *mdConv) skip(n *htmlNode) bool {
	switch {
	case mdDropTags[n.tag] || n.tag == "nav" || n.tag == "footer" || n.tag == "address",
		n.hidden,
		n.tag == "figcaption" && n.size <= mdMaxCaption,
		mdNoiseRoles[n.attr("role")]:
		return true
	case m.all, m.holdsPage(n):
		// Teasers, asides and furniture go, never the block that holds the
		// page (an article in an aside, as its share icons are).
		return false
	case n.tag == "form" && n.size < 500,
		// an aside, or a paragraph that is a link (a teaser), outside the document
		(n.tag == "aside" || n.tag == "p" && n.size > 0 && n.prose*10 <= n.size) && !m.docPart(n):
		return true
	case n.bad && !m.most(n):
		// Furniture words around the article (share-zone, js-code-nav) do not
		// drop it, nor a block that holds most of the page (live commentary).
		return !n.content
	}
	// Link lists are furniture, but in a section of a document: tables of
	// contents, "see also", lists of plugins.
	return mdListTags[n.tag] && n.prose*2 < n.size && n.prose < 100 && !m.docPart(n)
}

// block renders n's children as markdown blocks separated by blank lines; in
// a tight container (a list item) a list follows its neighbour directly.
func (m *mdConv) block(n *htmlNode, tight bool) string {
	var out, inl strings.Builder
	prevList := false
	add := func(s string, list bool) {
		if s == "" {
			return
		}
		sep := "\n\n"
		// html's lists and quotes are closed by tags: what they hold is never a block of its own
		if tight && (list || prevList) || m.html && m.nest > 0 {
			sep = "\n"
		}
		if out.Len() > 0 {
			out.WriteString(sep)
		}
		out.WriteString(s)
		prevList = list
	}
	para := func() { // the inline text so far, a paragraph unless blank
		p := m.para(inl.String(), m.br)
		if !tight {
			p = m.wrap(p, "p", "", "")
		}
		add(p, false)
		inl.Reset()
	}
	var walk func(p *htmlNode)
	walk = func(p *htmlNode) {
		lang := "" // of a wrapper naming its code block's language (VitePress)
		if strings.Contains(p.attr("class"), "language-") {
			lang = mdLang(p)
		}
		for _, c := range p.children {
			if mdHeadings[c.tag] {
				m.outDoc = !c.own && !p.own && c.tag != "h1"
			} else if c.attr("role") == "tablist" {
				m.tabs = c.findAll(func(t *htmlNode) bool { return t.attr("role") == "tab" })
			}
			switch {
			case m.made > m.limit:
				return
			// left out, and so is the corner label of a code block's wrapper
			case m.skip(c), lang != "" && c.size < mdMinPara && c.textContent() == lang:
			case mdBlockTags[c.tag]:
				para()
				if c.attr("role") == "tabpanel" && len(m.tabs) > 0 {
					// each panel under its tab's label, in bold
					label := m.wrap(m.esc.Replace(m.tabs[0].textContent()), "strong", "**", "**")
					add(m.wrap(label, "p", "", ""), false)
					m.tabs = m.tabs[1:]
				}
				if tight || !m.container(c) {
					add(m.element(c), c.tag == "ul" || c.tag == "ol")
				} else { // in place, not copied once per level of nesting
					walk(c)
					para()
				}
			case c.tag == "" || mdInlineTags[c.tag]:
				m.inline(&inl, c)
			default:
				walk(c)
			}
		}
	}
	walk(n)
	para()
	return out.String()
}

// container reports a block element rendered as its children are.
func (m *mdConv) container(n *htmlNode) bool {
	if mdNestTags[n.tag] {
		return m.nest >= mdNestMax
	}
	return !mdSelfBlocks[n.tag]
}

// element renders one block element.
func (m *mdConv) element(n *htmlNode) string {
	switch {
	case mdHeadings[n.tag]:
		mark := "######"[:n.tag[1]-'0'] + " "
		s := m.wrap(m.para(m.inlineChildren(n), " "), n.tag, mark, "")
		if s != "" && n.tag == "h1" {
			m.h1++
		}
		if !m.docPart(n) {
			s = mdMark(s, mdHeading+n.tag[1:], "")
		}
		return s
	case n.tag == "hr":
		return m.hr
	case n.tag == "pre":
		return m.pre(n)
	case n.tag == "table":
		return m.table(n)
	case mdNestTags[n.tag] && m.nest < mdNestMax:
		m.nest++
		defer func() { m.nest-- }()
		if n.tag != "blockquote" {
			return m.list(n)
		}
		s := m.block(n, false)
		switch {
		case s == "":
		case m.html:
			s = "<blockquote>\n" + s + "\n</blockquote>"
		case m.text:
			s = "  " + indent(s, 2)
		default:
			s = "> " + strings.ReplaceAll(strings.ReplaceAll(s, "\n", "\n> "), "> \n", ">\n")
			s = strings.TrimSuffix(s, "> ") // nothing quoted
		}
		return s
	}
	return m.block(n, n.tag == "li")
}

// wrap puts the format's markup around s: markdown's before and after, or html's tag.
func (m *mdConv) wrap(s, tag, before, after string) string {
	if m.html {
		before, after = "<"+tag+">", "</"+tag+">"
	} else if m.text {
		before, after = "", ""
	}
	return mdMark(s, before, after)
}

// mdMark puts markup around s, outside its white space; not around nothing.
func mdMark(s, before, after string) string {
	t := strings.TrimSpace(s)
	if t == "" {
		return s
	}
	i := strings.Index(s, t)
	return s[:i] + before + t + after + s[i+len(t):]
}

// inline renders an inline node into b: text, emphasis, links, images,
// code, breaks. What is rendered is copied once per link or emphasis around
// it, so neither nests deep: links do not nest (see parseHTML), and
// emphasis mdEmphasisDepth deep is not marked.
func (m *mdConv) inline(b *strings.Builder, n *htmlNode) {
	mk := mdEmphasis[n.tag]
	switch {
	case n.tag == "":
		m.made += int(n.size)
		b.WriteString(m.esc.Replace(n.text))
	case m.skip(n):
	case n.tag == "br":
		b.WriteString("\x01")
	case n.tag == "img":
		b.WriteString(m.image(n))
	case mdCodeTags[n.tag]:
		b.WriteString(m.code(n))
	case n.tag == "a":
		b.WriteString(m.link(n))
	case mk != "" && m.emphasis < mdEmphasisDepth:
		m.emphasis++
		b.WriteString(m.wrap(m.inlineChildren(n), n.tag, mk, mk))
		m.emphasis--
	default:
		space := "" // around a block
		if mdBlockTags[n.tag] {
			space = " "
		}
		b.WriteString(space)
		for _, c := range n.children {
			m.inline(b, c)
		}
		b.WriteString(space)
	}
}

// image renders an image with its description; in a figure or beside a
// caption (a photo with its caption and credit) the description is left
// out, as the caption is.
func (m *mdConv) image(n *htmlNode) string {
	alt := strings.Join(strings.Fields(n.attr("alt")), " ")
	if n.parent.captioned {
		alt = ""
	}
	// data-src: a lazy image's real source
	for _, src := range []string{n.attr("src"), n.attr("data-src")} {
		switch {
		case src == "" || strings.HasPrefix(src, "data:") || m.text:
		case !m.html:
			return "![" + mdEscapeInLink.Replace(alt) + "](" + m.abs(src) + ")"
		case m.attrURL(src) != "":
			return `<img src="` + m.attrURL(src) + `" alt="` + m.esc.Replace(alt) + `">`
		}
	}
	return m.esc.Replace(alt)
}

func (m *mdConv) code(n *htmlNode) string {
	s := strings.ReplaceAll(rawText(n), "\n", " ")
	m.made += len(s)
	if strings.TrimSpace(s) == "" || m.text {
		return s
	} else if m.html {
		return "<code>" + m.esc.Replace(s) + "</code>"
	} else if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	f := fence(s, 1)
	return f + s + f
}

func (m *mdConv) link(n *htmlNode) string {
	esc := m.esc
	if esc == mdEscape {
		m.esc = mdEscapeInLink
	}
	s := m.inlineChildren(n)
	m.esc = esc
	href := strings.TrimSpace(n.attr("href"))
	// A link without words is a permalink (¶, #, an icon glyph, a zero-width
	// space); one to "#" is a control (back to top).
	switch {
	case strings.TrimFunc(s, notWordRune) == "" || href == "#":
		return ""
	case href == "" || strings.HasPrefix(strings.ToLower(href), "javascript:") || m.text:
	case !m.html:
		return mdMark(s, "[", "]("+m.abs(href)+")")
	case m.attrURL(href) != "":
		return mdMark(s, `<a href="`+m.attrURL(href)+`">`, "</a>")
	}
	return s
}

// attrURL returns ref made absolute as an html attribute's value: "" unless it is http, https
// or mailto.
func (m *mdConv) attrURL(ref string) string {
	u, err := url.Parse(m.abs(ref))
	if err != nil || !mdURLSchemes[u.Scheme] {
		return ""
	}
	return htmlEscape.Replace(u.String())
}

func (m *mdConv) inlineChildren(n *htmlNode) string {
	var b strings.Builder
	for _, c := range n.children {
		m.inline(&b, c)
	}
	return b.String()
}

// para folds white space as a browser does, turns breaks into br and, in
// markdown, escapes what would read as a heading, quote or list marker.
func (m *mdConv) para(s, br string) string {
	s = strings.ReplaceAll(mdSpaces.ReplaceAllString(s, " "), "\u00a0", " ")
	lines := strings.Split(strings.Trim(s, " \x01"), "\x01")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
		if !m.html && !m.text {
			lines[i] = mdLineStart.ReplaceAllString(lines[i], `$1\$2$3`) // ##\# \> 1\.
		}
	}
	return strings.Join(lines, br)
}

func (m *mdConv) abs(ref string) string {
	if m.base == nil {
		return ref
	}
	if u, err := m.base.Parse(strings.TrimSpace(ref)); err == nil {
		ref = mdURLEscape.Replace(u.String())
	}
	return ref
}

// fence returns a run of backticks longer than any in s, at least least long.
func fence(s string, least int) string {
	longest := 0
	for _, run := range mdBackticks.FindAllString(s, -1) {
		longest = max(longest, len(run))
	}
	return strings.Repeat("`", max(least, longest+1))
}

// pre renders a code block, with the language that it, its code or a
// wrapper around it names.
func (m *mdConv) pre(n *htmlNode) string {
	s := strings.TrimRight(strings.TrimPrefix(rawText(n), "\n"), "\n ")
	m.made += len(s)
	lang := ""
	a := cmp.Or(n.find(htmlByTag("code")), n)
	for up := 0; a != nil && lang == "" && up <= mdLangDepth; up++ {
		lang = mdLang(a)
		a = a.parent
	}
	switch {
	case strings.TrimSpace(s) == "" || m.text:
	case !m.html:
		f := fence(s, 3)
		return f + lang + "\n" + s + "\n" + f
	default:
		lang = mdMark(m.esc.Replace(lang), ` class="language-`, `"`)
		return "<pre><code" + lang + ">" + m.esc.Replace(s) + "</code></pre>"
	}
	return s
}

// mdLang returns the language n's class or data-lang names; default, none
// and text name none.
func mdLang(n *htmlNode) string {
	l := mdLanguage.FindStringSubmatch(n.attr("class") + " lang-" + n.attr("data-lang"))
	if l == nil || mdNoLanguage[l[1]] {
		return ""
	}
	return l[1]
}

// list renders a list: its items marked "- " or numbered (text too), or html's ul or ol.
func (m *mdConv) list(n *htmlNode) string {
	num, _ := strconv.Atoi(n.attr("start"))
	num = max(num, 1)
	open := n.tag
	if num > 1 {
		open += ` start="` + strconv.Itoa(num) + `"`
	}
	var items []string
	for _, c := range n.children {
		if c.tag == "" || m.skip(c) {
			continue
		}
		marker := "- "
		if n.tag == "ol" && c.tag == "li" {
			marker = strconv.Itoa(num) + ". "
			num++
		}
		pad := len(marker)
		if m.html { // closed by tags: nothing indented (a code block stays as it is)
			marker, pad = "<li>", 0
		}
		switch body := m.block(c, true); {
		case body == "":
		case c.tag != "li" && len(items) > 0: // a list in a list belongs to the item before
			items[len(items)-1] += "\n" + indent(body, min(pad, 2))
		default:
			items = append(items, marker+indent(body, pad))
		}
	}
	if m.html && len(items) > 0 {
		return "<" + open + ">\n" + strings.Join(items, "</li>\n") + "</li>\n</" + n.tag + ">"
	}
	return strings.Join(items, "\n")
}

// indent indents every line but the first by w spaces, leaving blank lines empty.
func indent(s string, w int) string {
	pad := strings.Repeat(" ", w)
	return strings.ReplaceAll(strings.ReplaceAll(s, "\n", "\n"+pad), "\n"+pad+"\n", "\n\n")
}

// table renders a data table; a layout table (one cell, or cells holding
// blocks) comes as blocks. Only the header row is padded to the widest row.
// Text gives a row a line, its cells apart by tabs.
func (m *mdConv) table(n *htmlNode) string {
	esc, sep, open, close, pad := mdCellEscape, " | ", "| ", " |", ""
	if m.text {
		esc, sep, open, close = mdTextCell, "\t", "", ""
	} else if m.html {
		esc, sep, open, close, pad = mdNoEscape, "", "<tr>", "</tr>", "<td></td>"
	}
	isCell := func(c *htmlNode) bool { return c.tag == "td" || c.tag == "th" }
	if len(n.findAll(isCell)) < 2 ||
		n.find(func(d *htmlNode) bool { return mdLayoutCells[d.tag] }) != nil {
		return m.block(n, false)
	}
	var rows [][]string
	cols := 0
	for _, tr := range n.findAll(htmlByTag("tr")) {
		var row []string
		for _, c := range tr.children {
			if isCell(c) && !m.skip(c) && m.made <= m.limit {
				cell := esc.Replace(m.block(c, m.html))
				if m.html {
					cell = "<" + c.tag + ">" + cell + "</" + c.tag + ">"
				}
				row = append(row, cell)
				for span, _ := strconv.Atoi(c.attr("colspan")); span > 1 && span < 100; span-- {
					row = append(row, pad)
				}
			}
		}
		if len(row) > 0 {
			rows = append(rows, row)
			cols = max(cols, len(row))
		}
	}
	if len(rows) == 0 {
		return m.block(n, false)
	}
	var b strings.Builder
	if c := n.find(htmlByTag("caption")); c != nil {
		b.WriteString(strings.TrimPrefix(m.wrap(m.block(c, m.html), "caption", "", "")+"\n\n", "\n\n"))
	}
	rows[0] = append(rows[0], make([]string, cols-len(rows[0]))...)
	for i, row := range rows {
		b.WriteString(open + strings.Join(row, sep) + close + "\n")
		if i == 0 && esc == mdCellEscape {
			b.WriteString("|" + strings.Repeat(" --- |", cols) + "\n")
		}
	}
	if m.html {
		return "<table>\n" + b.String() + "</table>"
	}
	return strings.TrimRight(b.String(), "\n")
}

// ---- websocket client (RFC 6455) ------------------------------------------

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// Opcodes (RFC 6455 section 5.2) and close codes (section 7.4.1).
const (
	wsOpContinuation = 0
	wsOpText         = 1
	wsOpBinary       = 2
	wsOpClose        = 8
	wsOpPing         = 9
	wsOpPong         = 10

	wsCloseProtocol = 1002
	wsCloseNoCode   = 1005
)

// errWSClosed is returned by readMessage once a close frame has arrived.
var errWSClosed = errors.New("websocket: closed")

// wsConn is a client websocket: one goroutine calls readMessage, any may write.
type wsConn struct {
	net.Conn
	br     *bufio.Reader
	maxMsg int

	closeSent atomic.Bool // no frame goes after a close frame
}

// wsFrameHeader is a frame header (RFC 6455 section 5.2), without the mask a
// client's frame carries next.
type wsFrameHeader struct {
	fin    bool
	rsv    byte
	op     byte
	masked bool
	length uint64
}

// wsDial opens a websocket to a ws:// URL (the handshake: RFC 6455 section 4.1), at the
// host the URL names.
func wsDial(ctx context.Context, rawURL string, maxMsg int) (*wsConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "ws" {
		return nil, fmt.Errorf("websocket dial: %q is not a ws:// URL", rawURL)
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("websocket dial: %w", err)
	}
	ws := &wsConn{Conn: conn, br: bufio.NewReaderSize(conn, 64<<10), maxMsg: maxMsg}
	key := wsKey()
	dl, _ := ctx.Deadline()
	conn.SetDeadline(dl) // none when ctx has none
	_, err = conn.Write(wsHandshake(u, key))
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(ws.br, nil)
	}
	if err == nil {
		err = wsAccepted(resp, key)
	}
	conn.SetDeadline(time.Time{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("websocket handshake: %w", err)
	}
	return ws, nil
}

// wsKey is a new Sec-WebSocket-Key: 16 bytes from crypto/rand, which, unlike a test's reader,
// any goroutine may read; the key must differ, not be secret.
func wsKey() string {
	nonce := make([]byte, 16)
	crand.Read(nonce)
	return base64.StdEncoding.EncodeToString(nonce)
}

// wsHandshake is the client's opening handshake. It sends no Origin header and offers no
// extensions: Chromium refuses the first and would compress with the second.
func wsHandshake(u *url.URL, key string) []byte {
	return []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"+
		"Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
		u.RequestURI(), u.Host, key))
}

// wsAccepted says what is wrong with the server's answer to the handshake with key; nil when
// it accepted.
func wsAccepted(resp *http.Response, key string) error {
	sum := sha1.Sum([]byte(key + wsGUID))
	switch {
	case resp.StatusCode != http.StatusSwitchingProtocols:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	case !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket"):
		return errors.New("no Upgrade: websocket header")
	case resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]):
		return errors.New("wrong Sec-WebSocket-Accept")
	case resp.Header.Get("Sec-WebSocket-Extensions") != "":
		return fmt.Errorf("extensions not asked for: %s",
			resp.Header.Get("Sec-WebSocket-Extensions"))
	}
	return nil
}

// wsReadHeader reads a frame header (RFC 6455 section 5.2).
func wsReadHeader(r io.Reader) (h wsFrameHeader, err error) {
	var p [8]byte
	if _, err = io.ReadFull(r, p[:2]); err != nil {
		return h, err
	}
	h.fin = p[0]&0x80 != 0
	h.rsv = p[0] >> 4 & 7
	h.op = p[0] & 0x0f
	h.masked = p[1]&0x80 != 0
	h.length = uint64(p[1] & 0x7f)
	if h.length == 126 {
		_, err = io.ReadFull(r, p[:2])
		h.length = uint64(binary.BigEndian.Uint16(p[:2]))
	} else if h.length == 127 {
		_, err = io.ReadFull(r, p[:8])
		h.length = binary.BigEndian.Uint64(p[:8]) // a length over the cap is refused by the reader
	}
	return h, err
}

// writeFrame sends one frame in one Write: a net.Conn writes each call whole, so frames
// written at once never interleave, and no lock is needed. A browser that stops reading fails
// the write.
func (ws *wsConn) writeFrame(op byte, p []byte) error {
	if ws.closeSent.Load() {
		return errWSClosed
	}
	if op == wsOpClose {
		ws.closeSent.Store(true)
	}
	ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := ws.Write(wsFrame(op, p)); err != nil {
		return fmt.Errorf("websocket write: %w", err)
	}
	return nil
}

// wsFrame is p as one masked frame with FIN set (RFC 6455 section 5.2): FIN and op, then the
// mask bit and the length in 7, 16 or 64 bits, then the mask, then p masked.
func wsFrame(op byte, p []byte) []byte {
	buf := append(make([]byte, 0, 14+len(p)), 0x80|op)
	switch n := len(p); {
	case n < 126:
		buf = append(buf, 0x80|byte(n))
	case n <= 0xffff:
		buf = binary.BigEndian.AppendUint16(append(buf, 0x80|126), uint16(n))
	default:
		buf = binary.BigEndian.AppendUint64(append(buf, 0x80|127), uint64(n))
	}
	var mask [4]byte
	crand.Read(mask[:]) // a mask need not be secret here: no page script shares the connection
	buf = append(buf, mask[:]...)
	for i, c := range p {
		buf = append(buf, c^mask[i&3])
	}
	return buf
}

// check refuses a frame that may not come now, with a close frame that says why.
func (ws *wsConn) check(h wsFrameHeader, inMsg bool) error {
	isData := h.op == wsOpText || h.op == wsOpBinary
	isControl := h.op >= wsOpClose && h.op <= wsOpPong
	problem := ""
	switch {
	case h.rsv != 0:
		problem = "reserved bits set (no extension was agreed)"
	case h.masked:
		problem = "masked frame from the server"
	case isControl && (!h.fin || h.length > 125):
		problem = "fragmented or long control frame"
	case h.op == wsOpContinuation && !inMsg:
		problem = "continuation frame outside a message"
	case isData && inMsg:
		problem = "new message inside a fragmented one"
	case !isData && !isControl && h.op != wsOpContinuation:
		problem = fmt.Sprintf("unknown opcode %d", h.op)
	case h.length >= 1<<63:
		problem = "a length with its top bit set"
	}
	if problem == "" {
		return nil
	}
	ws.writeFrame(wsOpClose, binary.BigEndian.AppendUint16(nil, wsCloseProtocol))
	return errors.New("websocket: " + problem)
}

// readMessage returns the next data message, reassembled, answering control
// frames. One longer than maxMsg is skipped, not held, and read as an error
// for the call it answers (cdpTooLong).
func (ws *wsConn) readMessage() ([]byte, error) {
	var msg []byte
	inMsg, long := false, false
	for {
		h, err := wsReadHeader(ws.br)
		if err != nil {
			return nil, fmt.Errorf("websocket read: %w", err)
		}
		if err := ws.check(h, inMsg); err != nil {
			return nil, err
		}
		n := len(msg)
		isData := h.op < wsOpClose
		long = long || isData && h.length > uint64(ws.maxMsg-n)
		keep := h.length // of the payload: all, or of a message too long, what its start lacks
		if long && isData {
			keep = min(keep, uint64(max(cdpHead-n, 0)))
		}
		msg = slices.Grow(msg, int(keep))[:n+int(keep)]
		_, err = io.ReadFull(ws.br, msg[n:])
		if err == nil {
			_, err = io.CopyN(io.Discard, ws.br, int64(h.length-keep))
		}
		if err != nil {
			return nil, fmt.Errorf("websocket read: %w", err)
		}
		// A control frame, maybe between fragments, is not part of msg.
		if p := msg[n:]; h.op >= wsOpClose {
			msg = msg[:n]
			if h.op == wsOpPing {
				ws.writeFrame(wsOpPong, p)
			} else if h.op == wsOpClose {
				// The code echoed, unless we sent ours first.
				ws.writeFrame(wsOpClose, p[:min(len(p), 2)])
				code := wsCloseNoCode
				if len(p) >= 2 {
					code = int(binary.BigEndian.Uint16(p))
				}
				return nil, fmt.Errorf("%w by peer (%d %s)", errWSClosed, code, p[min(len(p), 2):])
			}
			continue
		}
		inMsg = true
		if h.fin && long {
			return cdpTooLong(msg, ws.maxMsg), nil
		} else if h.fin {
			return msg, nil
		}
	}
}

// ---- DevTools protocol client ----------------------------------------------

// cdpConn carries DevTools messages, one JSON text each: the pipe to the
// browser telson started, or a websocket to one the user named (CHROME_URL).
// One goroutine reads; any may write.
type cdpConn interface {
	readMessage() ([]byte, error)
	writeMessage(p []byte) error
	Close() error
}

func (ws *wsConn) writeMessage(p []byte) error { return ws.writeFrame(wsOpText, p) }

// cdpPipe is the socket Chromium has as its fds 3 and 4 (--remote-debugging-pipe):
// each message is JSON ended by a NUL byte. A socket, not two pipes: another
// process of the user's can open a pipe through /proc/PID/fd, not a socket.
type cdpPipe struct {
	*os.File
	br     *bufio.Reader
	maxMsg int
}

// readMessage returns the next message. One longer than maxMsg bytes is
// skipped, not held, and read as an error for the call it answers (cdpTooLong).
func (p *cdpPipe) readMessage() ([]byte, error) {
	var msg []byte
	long := false
	for {
		part, err := p.br.ReadSlice(0)
		long = long || len(msg)+len(part) > p.maxMsg+1
		msg = append(msg, part...)
		if long {
			msg = slices.Clone(msg[:min(len(msg), cdpHead)])
		}
		switch {
		case err == bufio.ErrBufferFull:
		case err != nil:
			return nil, fmt.Errorf("cdp pipe read: %w", err)
		case long:
			return cdpTooLong(msg, p.maxMsg), nil
		default:
			return msg[:len(msg)-1], nil
		}
	}
}

// cdpHead is how much is kept of a message too long: its start names the call it answers.
const cdpHead = 64

// cdpTooLong is what a message longer than max bytes is read as: an error for
// the call whose id starts it, as Chromium writes replies (an event has none,
// and is dropped).
func cdpTooLong(head []byte, max int) []byte {
	var id int64
	fmt.Sscanf(string(head), `{"id":%d`, &id)
	return fmt.Appendf(nil, `{"id":%d,"error":{"message":"reply longer than %d bytes"}}`, id, max)
}

// writeMessage sends m in one Write, which the file does whole before the next.
func (p *cdpPipe) writeMessage(m []byte) error {
	// A browser that stops reading fails the write.
	p.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := p.Write(append(m, 0)); err != nil {
		return fmt.Errorf("cdp pipe write: %w", err)
	}
	return nil
}

// socketPair returns the two ends of a new socket, closed on exec; made under
// ForkLock, as package net makes sockets, so no child started meanwhile gets them.
func socketPair() (ours, theirs *os.File, err error) {
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	syscall.SetNonblock(fds[0], true) // pollable: writes time out, Close ends a read
	return os.NewFile(uintptr(fds[0]), "cdp"), os.NewFile(uintptr(fds[1]), "cdp-browser"), nil
}

// cdpMessage is a command or an event; a reply is decoded by the call it answers.
type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
}

// cdpClient sends DevTools commands; it routes replies by id and events by session.
type cdpClient struct {
	conn cdpConn
	done chan struct{} // closed when the reader stops; err then says why

	mu      sync.Mutex // guards the fields below
	nextID  int64
	pending map[int64]chan []byte // the calls waiting for their replies
	subs    map[string]cdpHandler
	err     error
}

// cdpHandler hears a session's events.
type cdpHandler func(method string, params json.RawMessage)

func newCDPClient(conn cdpConn) *cdpClient {
	c := &cdpClient{conn: conn, done: make(chan struct{}), pending: map[int64]chan []byte{},
		subs: map[string]cdpHandler{}}
	go c.readLoop() // exits when the connection closes or fails
	return c
}

func (c *cdpClient) readLoop() {
	data, err := c.conn.readMessage()
	for ; err == nil; data, err = c.conn.readMessage() {
		var m cdpMessage
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		c.mu.Lock()
		ch, fn := c.pending[m.ID], c.subs[m.SessionID]
		delete(c.pending, m.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- data
		} else if m.ID == 0 && fn != nil {
			fn(m.Method, m.Params) // subscribers only record and signal: they never block
		}
	}
	c.mu.Lock()
	c.err = fmt.Errorf("cdp: connection lost: %w", err)
	c.mu.Unlock()
	close(c.done)
	c.conn.Close()
}

// cdpLostWait bounds how long a failed write waits for the reader to see the connection end.
const cdpLostWait = time.Second

// call sends a command (on a session when session is not "") and decodes its result.
func (c *cdpClient) call(ctx context.Context, session, method string, params, result any) error {
	m := cdpMessage{SessionID: session, Method: method}
	if params != nil {
		m.Params, _ = json.Marshal(params)
	}
	ch := make(chan []byte, 1)
	c.mu.Lock()
	err := c.err
	c.nextID++
	m.ID = c.nextID
	c.pending[m.ID] = ch
	c.mu.Unlock()
	defer func() { // the reply may never come
		c.mu.Lock()
		delete(c.pending, m.ID)
		c.mu.Unlock()
	}()
	if err != nil {
		return err
	}
	data, _ := json.Marshal(m)
	if err := c.conn.writeMessage(data); err != nil {
		// The other end is gone, which the reader learns too: waiting for it lets the
		// caller see the connection lost (a dead browser is started again).
		select {
		case <-c.done:
		case <-time.After(cdpLostWait):
		}
		return fmt.Errorf("cdp %s: %w", method, err)
	}
	select {
	case data := <-ch: // decoded once, into result: a reply may be tens of megabytes
		r := struct {
			Result any
			Error  *struct{ Message string }
		}{Result: result}
		err := json.Unmarshal(data, &r)
		if r.Error != nil {
			return fmt.Errorf("cdp %s: %s", method, r.Error.Message)
		}
		return err
	case <-c.done:
		return c.err // set before done was closed
	case <-ctx.Done():
		return fmt.Errorf("cdp %s: %w", method, ctx.Err())
	}
}

// subscribe routes a session's events to fn (nil: drops them).
func (c *cdpClient) subscribe(session string, fn cdpHandler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs[session] = fn; fn == nil {
		delete(c.subs, session)
	}
}

// ---- the browser ----------------------------------------------------------

// errNoBrowser means ReadDocs has no browser to use and reads over plain HTTP.
var errNoBrowser = errors.New("no browser")

// browserHolder is the server's one browser, started (or attached to) on first use and again
// when its connection ended.
type browserHolder struct {
	tabs chan struct{} // a slot per open tab: pages are heavy on two cores
	// turn is taken, as a lock that waits with a deadline, while a call starts, attaches to or
	// stops the browser (at most browserStart): the calls that need it wait for it, and
	// nothing else does
	turn chan struct{}
	b    *browser // guarded by turn
}

// browserStart bounds a browser's start or attach, and how long close waits for one.
const browserStart = 15 * time.Second

// browser is a Chromium telson started (proc is set), or one the user runs and named in
// CHROME_URL, of which telson closes only the tabs it opened.
type browser struct {
	proc   *child          // the leader of the browser's process group
	marker string          // its run marker
	dir    string          // the profile, also the browser's home and temporary directory
	cdp    *cdpClient      // done when the browser died
	spare  chan browserTab // a tab for the next read (the last one's); nil in the user's browser
}

// chromeNames are the browsers looked for when CHROME_PATH is not set.
var chromeNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable",
	"chrome", "chrome-headless-shell", "/usr/lib/chromium/chromium-headless-shell",
	"/opt/google/chrome/chrome", "/snap/bin/chromium",
	"/Applications/Chromium.app/Contents/MacOS/Chromium",
	"/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"}

// findChrome returns the browser to run: CHROME_PATH when it is set, else the
// first of chromeNames found; "" when there is none.
func findChrome(set *settings) string {
	names := chromeNames
	if p := set.ChromePath; p != "" {
		names = []string{p} // no other browser in its place
	}
	for _, p := range names {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	return ""
}

// get returns the browser, starting or attaching to one when there is none or it died.
func (h *browserHolder) get(ctx context.Context, srv *server) (*browser, error) {
	select {
	case h.turn <- struct{}{}:
		defer func() { <-h.turn }()
	case <-ctx.Done():
		return nil, fmt.Errorf("readdocs: waiting for the browser: %w", ctx.Err())
	}
	if h.b != nil {
		if !h.b.dead() {
			return h.b, nil
		}
		srv.log.Warn("readdocs: the browser is gone; opening another", "err", h.b.cdp.err)
		h.b.stop()
	}
	set := srv.set
	ctx, cancel := context.WithTimeout(ctx, browserStart)
	defer cancel()
	var err error
	h.b = nil
	if !set.ReadDocsBrowser {
		return nil, fmt.Errorf("%w: READDOCS_BROWSER is off", errNoBrowser)
	}
	if set.ChromeURL != "" {
		h.b, err = attachBrowser(ctx, set)
		return h.b, err
	}
	switch path := findChrome(set); {
	case path == "" && set.ChromePath != "":
		err = fmt.Errorf("CHROME_PATH %s is not an executable file", set.ChromePath)
	case path == "":
		err = fmt.Errorf("%w: no Chromium found; set CHROME_PATH", errNoBrowser)
	default:
		h.b, err = startBrowser(ctx, srv, path, false)
		if chromeSandboxOff(set.env.uid, err) {
			h.b, err = startBrowser(ctx, srv, path, true)
		}
		if err != nil {
			srv.log.Warn("readdocs", "err", err)
			err = fmt.Errorf("%w: browser start: %v", errNoBrowser, err)
		}
	}
	return h.b, err
}

// chromeSandboxOff is the one decision that turns Chromium's own sandbox off (--no-sandbox):
// only when telson is root (uid 0) and the browser did not start with it: as nobody, its
// sandbox needs user namespaces, which this system may not give.
func chromeSandboxOff(uid int, startErr error) bool {
	return uid == 0 && startErr != nil
}

// close stops the browser. A start still under way after browserStart is left to the server's
// end, which kills every process it started.
func (h *browserHolder) close() {
	select {
	case h.turn <- struct{}{}:
		defer func() { <-h.turn }()
	case <-time.After(browserStart):
		return
	}
	if h.b != nil {
		h.b.stop()
		h.b = nil
	}
}

// maxTempDir is the longest TMPDIR the profile is made in. The profile is
// Chromium's TMPDIR too, where it makes a socket
// (<profile>/.org.chromium.Chromium.XXXXXX/SingletonSocket, 73 bytes past
// TMPDIR), and a socket's path has at most 103 bytes (macOS; 107 on Linux):
// with a longer TMPDIR (macOS's /var/folders/…/T/ has 49 bytes) Chromium
// does not start. /tmp is then used: it is sticky, and MkdirTemp makes the
// profile 0700 under a name nobody can take first.
const maxTempDir = 24

// chromeFlags are the flags the browser telson starts gets, besides its profile's.
var chromeFlags = []string{"--headless", "--disable-dev-shm-usage", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-extensions",
	"--mute-audio", "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
	"--blink-settings=imagesEnabled=false",  // a reader needs no image: none is fetched
	"--disable-blink-features=SharedWorker", // it outlives the page, and the tab's rules
	"--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup,Translate,MediaRouter," +
		"OptimizationHints,AutofillServerCommunication,BackForwardCache", // a page left is gone
	"--remote-debugging-pipe"}

// startBrowser runs Chromium with a fresh profile, driven over a socket it inherits as its
// descriptors 3 and 4 (--remote-debugging-pipe): it opens no port, so no other process can
// reach it. Chromium writes nothing outside its profile (its home, config, cache and temporary
// directory), which is removed when it stops, and downloads nothing (connect). When telson is
// root, Chromium runs as nobody, which owns the profile.
func startBrowser(ctx context.Context, srv *server, path string, noSandbox bool) (*browser,
	error) {
	root := srv.set.env.uid == 0
	dir, err := os.MkdirTemp(profileBase(srv.set.env.tmp), "telson-chromium-")
	if err == nil && root {
		err = os.Chown(dir, nobody, nobody)
	}
	if err != nil {
		return nil, err
	}
	srv.procs.removeAtExit(dir) // even when telson is killed
	ours, theirs, err := socketPair()
	b := &browser{dir: dir, marker: srv.procs.scope(srv.procs.id),
		spare: make(chan browserTab, 1)}
	stderr := new(tailWriter)
	if err == nil {
		b.proc, err = srv.procs.start(chromeSpec(path, dir, b.marker, root, noSandbox, theirs,
			stderr))
		theirs.Close() // the browser's alone: when it dies, our reads end
	}
	if err != nil {
		ours.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b.open(ctx, srv, path, ours, stderr)
}

// open drives b, the browser startBrowser started from path, over ours, its end of the socket;
// stderr holds the browser's last words.
func (b *browser) open(ctx context.Context, srv *server, path string, ours *os.File,
	stderr *tailWriter) (*browser, error) {
	pipe := &cdpPipe{File: ours, br: bufio.NewReaderSize(ours, 64<<10),
		maxMsg: srv.set.WSMaxMessage}
	if err := b.connect(ctx, pipe); err != nil { // stopped: stderr is complete
		return nil, fmt.Errorf("%s: %w; its last words: %q", path, err, *stderr)
	}
	srv.log.Info(fmt.Sprintf("readdocs: started Chromium pid %d (%s)", b.proc.cmd.Process.Pid,
		path))
	return b, nil
}

// profileBase is where the browser's profile is made: TMPDIR, unless it is longer than
// maxTempDir, then /tmp.
func profileBase(tmp string) string {
	if tmp == "" || len(tmp) > maxTempDir {
		return "/tmp"
	}
	return tmp
}

// nobody is the user the browser runs as when telson is root.
const nobody = 65534

// chromeSpec is the browser to start: path with the profile dir as its user data, home,
// config, cache and temporary directory, socket as its descriptors 3 and 4, stderr to stderr;
// as nobody when telson is root, so that a page that breaks out of its renderer is not root.
func chromeSpec(path, dir, marker string, root, noSandbox bool, socket *os.File,
	stderr io.Writer) procSpec {
	argv := append([]string{path, "--user-data-dir=" + dir}, chromeFlags...)
	if noSandbox {
		argv = append(argv, "--no-sandbox")
	}
	spec := procSpec{argv: append(argv, "about:blank"), marker: marker, stderr: stderr,
		env:   []string{"HOME=" + dir, "XDG_CONFIG_HOME=" + dir, "XDG_CACHE_HOME=" + dir, "TMPDIR=" + dir},
		files: []*os.File{socket, socket}}
	if root {
		spec.cred = &syscall.Credential{Uid: nobody, Gid: nobody}
	}
	return spec
}

// attachBrowser connects to the browser the user runs and named in CHROME_URL, its ws:// URL.
func attachBrowser(ctx context.Context, set *settings) (*browser, error) {
	ws, err := wsDial(ctx, set.ChromeURL, set.WSMaxMessage)
	b := &browser{}
	if err == nil {
		err = b.connect(ctx, ws)
	}
	if err != nil {
		return nil, fmt.Errorf("CHROME_URL %s: %w", set.ChromeURL, err)
	}
	return b, nil
}

// connect drives the browser over conn, refusing downloads for as long as
// it is connected; on failure it stops the browser.
func (b *browser) connect(ctx context.Context, conn cdpConn) error {
	b.cdp = newCDPClient(conn)
	deny := map[string]any{"behavior": "deny"}
	err := b.cdp.call(ctx, "", "Browser.setDownloadBehavior", deny, nil)
	if err != nil {
		b.stop()
	}
	return err
}

// tailWriter keeps the last 300 bytes written to it: why a browser did not start.
type tailWriter []byte

func (w *tailWriter) Write(p []byte) (int, error) {
	*w = lastBytes(append(*w, p...), 300)
	return len(p), nil
}

// dead reports a browser whose connection has ended: it ends with the process.
func (b *browser) dead() bool {
	select {
	case <-b.cdp.done:
		return true
	default:
		return false
	}
}

// stop ends the browser telson started through the one kill path and removes its profile; of
// the user's browser, it ends the connection.
func (b *browser) stop() {
	if b.proc == nil {
		b.cdp.conn.Close()
		return
	}
	stopRun(b.marker) // the marker finds the leader until it dies: Wait reaps it
	b.proc.cmd.Wait()
	os.RemoveAll(b.dir)
}

// ---- ReadDocs ---------------------------------------------------------------

var readDocsTool = toolDef{
	name:  "ReadDocs",
	title: "Read a web page",
	description: `Reads a web page (documentation, an article, any http or https URL) in headless
Chromium and returns its main content: menus, sidebars, related links, comments, share
and cookie blocks are left out; tables and code blocks are kept; links are absolute. Content
that JavaScript builds is included; text a person cannot see is not.

- format: markdown (default), text (the same content without markup; a table row a line, its
  cells apart by tabs) or html (the same content's HTML, escaped: headings, paragraphs, lists,
  code, tables, links and images; no scripts, styles or attributes but href, src and alt).
- wait_ms: extra time for pages that keep changing (default 0, max 30000).
- Long pages come in parts of max_length characters (default 30000); the reply ends with the
  start_index of the next part.
- HTTP errors (404, 500) come with the page's content; unreachable hosts, TLS errors and
  downloads are errors. Without Chromium the page is read over plain HTTP, and the reply says so.

Example: {"url": "https://go.dev/doc/effective_go", "max_length": 20000}`,
	input: `{"type":"object","properties":{
		"url":{"type":"string","minLength":1,"maxLength":65536,"description":"The http or https URL to read."},
		"format":{"type":"string","enum":["markdown","text","html"],
			"description":"Output format: text, html, or markdown (default markdown)."},
		"wait_ms":{"type":"integer","minimum":0,"maximum":30000,
			"description":"Extra milliseconds to wait before reading (default 0)."},
		"max_length":{"type":"integer","minimum":1,"maximum":1000000,
			"description":"Most characters of content to return (default 30000)."},
		"start_index":{"type":"integer","minimum":0,
			"description":"Character of the content to start at, for the next part (default 0)."}},
		"required":["url"]}`,
	output: `{"type":"object","properties":{
		"url":{"type":"string"},
		"final_url":{"type":"string","description":"the URL after redirects"},
		"title":{"type":"string"},
		"status":{"type":"integer","description":"HTTP status of the page; 0 when unknown"},
		"format":{"type":"string","enum":["markdown","text","html"]},
		"content":{"type":"string","description":"this part of the content"},
		"truncated":{"type":"boolean","description":"more content follows this part"},
		"next_start_index":{"type":"integer","description":"start_index of the next part"},
		"total_length":{"type":"integer",
			"description":"characters of content in all parts; when truncated, at least this many"},
		"message":{"type":"string","description":"where the next part starts, or that none is"},
		"via":{"type":"string","enum":["chromium","http"]},
		"notes":{"type":"array","items":{"type":"string"}}},
		"required":["url","final_url","title","status","format","content","truncated",
			"total_length","via"]}`,
	hints: toolHints{readOnly: true, idempotent: true, openWorld: true},
	run:   runReadDocs,
}

type readDocsArgs struct {
	URL        string `json:"url"`
	Format     string `json:"format"`
	WaitMS     int    `json:"wait_ms"`
	MaxLength  int    `json:"max_length"`
	StartIndex int    `json:"start_index"`
}

type readDocsOut struct {
	URL            string   `json:"url"`
	FinalURL       string   `json:"final_url"`
	Title          string   `json:"title"`
	Status         int      `json:"status"`
	Format         string   `json:"format"`
	Content        string   `json:"content"`
	Truncated      bool     `json:"truncated"`
	NextStartIndex int      `json:"next_start_index,omitempty"`
	TotalLength    int      `json:"total_length"`
	Via            string   `json:"via"`
	Notes          []string `json:"notes,omitempty"`
	Message        string   `json:"message,omitempty"`

	body   string   // the page as read: outerHTML, innerText, or the response body
	source string   // the main document's HTML as the server sent it ("" when unknown)
	unseen []string // the texts the rendering judged hidden (nil: unknown)
	isText bool     // body is text already (innerText, or not HTML)
}

// pageCap bounds what is taken from a page: characters from the browser, bytes over HTTP.
const pageCap = 10 << 20

// pageJSON bounds the page as the browser sends it, so that telson holds
// little of it at once: a message may be longer (WS_MAX_MESSAGE_BYTES) by
// the URL (2 MB at most) and the title.
const pageJSON = 24 << 20

// maxTitle bounds the title in runes: a page may set any document.title.
const maxTitle = 300

func runReadDocs(ctx context.Context, c *toolCall) toolResult {
	a := readDocsArgs{Format: "markdown", MaxLength: 30000}
	json.Unmarshal(c.args, &a) // schema-checked
	o, err := c.s.srv.readPage(ctx, a)
	if err != nil {
		return errorResult("%s", stripControls(err.Error()))
	}
	o.URL = a.URL
	o.Format = a.Format
	content, cut := o.convert(a)
	// What the page says may hold control characters (terminal escapes):
	// page text never needs them but tab and newline.
	runes := []rune(stripControls(content))
	o.Title = cutRunes(stripControls(o.Title), maxTitle)
	o.FinalURL = stripControls(o.FinalURL)
	o.TotalLength = len(runes)
	start := min(a.StartIndex, o.TotalLength)
	end := min(o.TotalLength, start+a.MaxLength)
	o.Truncated = end < o.TotalLength || cut
	o.Content = string(runes[start:end])
	total := strconv.Itoa(o.TotalLength)
	if cut {
		total = "at least " + total
	}
	switch {
	case a.StartIndex > 0 && a.StartIndex >= o.TotalLength:
		o.Message = fmt.Sprintf("No more content: the page has %s characters.", total)
	case o.Truncated:
		o.NextStartIndex = end
		o.Message = fmt.Sprintf(c.s.srv.served("More content: the page has %s characters; "+
			"call ReadDocs with start_index %d for the next part."), total, end)
	}
	text := cmp.Or(o.Title, "(no title)") + "\n" + o.FinalURL + "\n"
	if o.Status >= 400 {
		text += fmt.Sprintf("HTTP status %d\n", o.Status)
	}
	for i, n := range o.Notes {
		o.Notes[i] = stripControls(n) // the moved-to URL is the page's
		text += "Note: " + o.Notes[i] + "\n"
	}
	text += "\n" + o.Content
	if o.Message != "" {
		text += "\n\n" + o.Message
	}
	return structuredResult(text, o)
}

// convert returns the content in the format asked, stopping after the part asked for (cut: it
// stopped there), and sets the title from the page.
func (o *readDocsOut) convert(a readDocsArgs) (content string, cut bool) {
	if o.isText && a.Format == "html" {
		return "<pre>" + htmlEscape.Replace(o.body) + "</pre>", false
	} else if o.isText {
		return o.body, false
	}
	// Twice the part asked for: counting text as it is rendered may run ahead of the output.
	limit := 2 * (a.StartIndex + a.MaxLength)
	pg := convertHTML(o.body, o.FinalURL, a.Format, limit)
	// Scripts that removed the article lose to the HTML as sent, whose text is
	// shorter than it (one not twice as long as the text read cannot win),
	// less every text the rendering judged hidden.
	if o.source != "" && !pg.cut && len(o.source) > 2*pg.size {
		src := convertHTML(o.source, o.FinalURL, a.Format, limit, o.unseen...)
		if src.size > 2*pg.size {
			pg = src
		}
	}
	o.Title = cmp.Or(o.Title, pg.title)
	return pg.text, pg.cut
}

// readPage reads the page through Chromium, or over plain HTTP when there is no browser.
func (srv *server) readPage(ctx context.Context, a readDocsArgs) (*readDocsOut, error) {
	u, err := url.Parse(a.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("only http and https URLs can be read, not %q", a.URL)
	}
	extra := time.Duration(a.WaitMS) * time.Millisecond
	var pg *readDocsOut
	for try := 0; try < 2; try++ { // twice when the browser died under the first read
		var b *browser
		b, err = srv.browser.get(ctx, srv)
		if err == nil {
			pg, err = b.read(ctx, srv, u.String(), extra)
		}
		if err == nil || b == nil || !b.dead() || ctx.Err() != nil {
			break
		}
	}
	if !errors.Is(err, errNoBrowser) {
		return pg, err
	}
	ctx, cancel := context.WithTimeout(ctx, srv.set.ReadDocsTimeout+extra)
	defer cancel()
	why := strings.TrimPrefix(err.Error(), errNoBrowser.Error()+": ")
	pg, err = fetchPlain(ctx, u.String())
	if err == nil {
		note := "Read without a browser (" + why + "): content that scripts build may be missing."
		pg.Notes = append(pg.Notes, note)
	}
	return pg, err
}

// Reading waits for DOMContentLoaded (and briefly for load), then for
// readSettle without requests to the page's own site (at most
// READDOCS_IDLE_MS; see holds and settle):
// the content is there by then, and what other hosts load (ads, trackers,
// widgets) never holds it.
const readSettle = 40 * time.Millisecond

// sitePatterns are the parameters of Network.setBlockedURLs that let a page fetch from site
// and from nowhere else, and no font (a reader needs none), in the browser, without a round
// trip a request: the first pattern that matches decides. Navigations are not matched: the
// tab pauses those (admits). Nor are a WebSocket and what a worker asks (newTab).
func sitePatterns(site string) json.RawMessage {
	host := "{*.}?" + site           // and its subdomains
	if strings.Contains(site, ":") { // an IPv6 address
		host = "[" + strings.ReplaceAll(site, ":", `\\:`) + "]"
	}
	return json.RawMessage(fmt.Sprintf(`{"urlPatterns": [
		{"urlPattern": "*://*:*/*.woff2", "block": true},
		{"urlPattern": "*://*:*/*.ttf", "block": true},
		{"urlPattern": "*://*:*/*.woff", "block": true},
		{"urlPattern": "*://*:*/*.otf", "block": true},
		{"urlPattern": "*://%s:*/*", "block": false}, {"urlPattern": "*://*:*/*", "block": true}]}`,
		host))
}

// siteOf returns a URL's origin and site (its host's last two labels, or its
// IP address): the page may move only within its origin, and fetch only from
// its site, whose requests alone hold the read.
func siteOf(rawURL string) (origin, site string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", ""
	}
	site = u.Hostname()
	if net.ParseIP(site) == nil {
		labels := strings.Split(site, ".")
		site = strings.Join(labels[max(0, len(labels)-2):], ".")
	}
	return u.Scheme + "://" + u.Host, site
}

// tabState is what a tab's events have said; the reader goroutine writes it.
type tabState struct {
	ctx     context.Context // the read's: the answer to an event is waited for until it ends
	cdp     *cdpClient
	tab     browserTab
	changed chan struct{} // a token after every change

	mu        sync.Mutex      // guards the fields below
	site      string          // the page's own site: the URL asked for's, or a redirect's
	loader    string          // the main frame's current document
	dcl       time.Time       // when it fired DOMContentLoaded; zero until then
	loaded    bool            // it fired load
	inflight  map[string]bool // request ids that hold the read
	lastNet   time.Time       // when one of them last started or ended
	docID     string          // request id of the page's own response
	docOrigin string          // and its origin
	moved     string          // where the page tried to go, refused: by script, or by a redirect
	unstyled  bool            // a stylesheet was blocked or failed
}

// tabEvent is the part of a tab's events that tabState reads.
type tabEvent struct {
	Name, LoaderID, RequestID, FrameID string
	Type                               string
	Request, Initiator                 struct{ URL, Type string }
	Response                           struct {
		URL    string
		Status int
	}
}

// event records what a tab's event says and answers it when it waits for
// an answer: dialogs are dismissed, paused documents refused or let through.
func (ts *tabState) event(method string, params json.RawMessage) {
	var e tabEvent
	json.Unmarshal(params, &e)
	reply := ""
	args := map[string]any{"requestId": e.RequestID}
	ts.mu.Lock()
	switch method {
	case "Page.javascriptDialogOpening":
		reply = "Page.handleJavaScriptDialog"
		args = map[string]any{"accept": false}
	case "Fetch.requestPaused":
		reply = "Fetch.continueRequest"
		if !ts.admits(e) {
			reply = "Fetch.failRequest"
			args["errorReason"] = "Aborted"
		}
	case "Page.lifecycleEvent":
		ts.lifecycle(e)
	case "Network.requestWillBeSent":
		if ts.holds(e) {
			ts.inflight[e.RequestID] = true
			ts.lastNet = time.Now()
		}
	case "Network.responseReceived":
		ts.unstyled = ts.unstyled || e.Type == "Stylesheet" && e.Response.Status >= 400
		if e.Type == "Document" && ts.docID == "" { // the tab's own: it refuses frames
			ts.docID = e.RequestID
			ts.docOrigin, _ = siteOf(e.Response.URL)
		}
	case "Network.loadingFinished", "Network.loadingFailed":
		ts.unstyled = ts.unstyled || method == "Network.loadingFailed" && e.Type == "Stylesheet"
		if ts.inflight[e.RequestID] {
			delete(ts.inflight, e.RequestID)
			ts.lastNet = time.Now()
		}
	}
	ts.mu.Unlock()
	select {
	case ts.changed <- struct{}{}:
	default:
	}
	if reply != "" {
		// The goroutine exits when Chrome answers, the connection drops or the read ends.
		go ts.cdp.call(ts.ctx, ts.tab.sid, reply, args, nil)
	}
}

// lifecycle follows the main frame's document: a new one (a redirect by
// script or refresh) is waited for anew.
func (ts *tabState) lifecycle(e tabEvent) {
	switch {
	case e.FrameID != ts.tab.targetID:
	case e.Name == "init":
		ts.loader, ts.dcl, ts.loaded = e.LoaderID, time.Time{}, false
	case e.Name == "DOMContentLoaded" && e.LoaderID == ts.loader:
		ts.dcl = time.Now()
		ts.lastNet = ts.dcl // the settle counts from here at the earliest
	case e.Name == "load":
		// Scripts often fetch content on load: a settle from it too.
		ts.loaded, ts.lastNet = true, time.Now()
	}
}

// holds says whether a request keeps the read waiting: one the page makes
// and that ends (another site's ends at once: sitePatterns blocks it). Not
// what the browser asks for by itself (a favicon, a manifest, a worker's
// script, whose end the tab may never hear), nor what a reader does not need
// (images, fonts, media), nor streams.
func (ts *tabState) holds(e tabEvent) bool {
	switch e.Type {
	case "Image", "Font", "Media", "EventSource", "WebSocket":
		return false
	}
	return e.Type == "Document" || e.Initiator.Type != "other"
}

// admits says whether a document request the tab paused goes on: the page
// asked for and the server's redirects of it within its site (one to
// another site is refused, and read follows it), then moves of the page
// within its origin; no frame (a read never reads one), and no script moves
// the read to another origin. Everything else the page fetches is decided by
// sitePatterns: its own site's, stylesheets included (how a person sees it);
// another site's never (a CDN's stylesheet would hold the page's scripts and
// its parsing, and the text it may colour is then not judged by colour).
func (ts *tabState) admits(e tabEvent) bool {
	origin, site := siteOf(e.Request.URL)
	switch {
	case e.FrameID != ts.tab.targetID:
		return false
	case origin == ts.docOrigin || ts.docOrigin == "" && site == ts.site:
		return true
	}
	ts.moved = e.Request.URL
	return false
}

// waitReady waits until the page is parsed, loaded (at most twice readSettle
// after it was parsed: a settle from load costs one) and nothing it asked of
// its own site is still coming (at most idleCap after it was parsed), or ctx ends.
// Not parsed, it is ready once its HTML has all come and idleCap passed
// without requests: a script from another site holds the parser.
func (ts *tabState) waitReady(ctx context.Context, idleCap time.Duration) {
	for {
		ts.mu.Lock()
		quiet := time.Since(ts.lastNet)
		if len(ts.inflight) > 0 {
			quiet = 0
		}
		var ok bool
		var again time.Duration
		if ts.dcl.IsZero() {
			ok, again = ts.docID != "" && len(ts.inflight) == 0 && quiet >= idleCap, idleCap-quiet
		} else {
			since := time.Since(ts.dcl)
			again = idleCap - since
			if !ts.loaded && since < 2*readSettle {
				again = min(again, 2*readSettle-since)
			} else {
				ok = len(ts.inflight) == 0
			}
			ok = ok || again <= 0
		}
		ts.mu.Unlock()
		if ok {
			return
		}
		t := time.NewTimer(cmp.Or(max(again, 0), time.Hour)) // 0: until the next event
		select {
		case <-ts.changed:
		case <-t.C:
		case <-ctx.Done():
			return
		}
		t.Stop()
	}
}

// settle waits until the page is ready (waitReady) and stays so for
// readSettle by the page's own clock: a timer of its own, in a world of its
// own, fires after the page's timers due before it, however busy the machine
// is. At most idleCap after the page was parsed; a page not parsed is not
// waited for longer than waitReady does.
func (b *browser) settle(ctx context.Context, ts *tabState, idleCap time.Duration) {
	sleep := fmt.Sprintf("new Promise(r => setTimeout(r, %d))", readSettle.Milliseconds())
	for ctx.Err() == nil {
		ts.waitReady(ctx, idleCap)
		params, err := b.world(ctx, ts.tab)
		start := time.Now() // what came while it was made came before the timer
		params["expression"], params["awaitPromise"] = sleep, true
		// The user's browser may hold a background tab's timers for a second:
		// idleCap of the page's clock held is the end.
		sleepCtx, cancel := context.WithTimeout(ctx, idleCap)
		if err == nil { // a new document ends the world, and the call
			err = b.cdp.call(sleepCtx, ts.tab.sid, "Runtime.evaluate", params, nil)
		}
		held := sleepCtx.Err() != nil
		cancel()
		ts.mu.Lock()
		quiet := err == nil && ts.lastNet.Before(start) && len(ts.inflight) == 0
		capped := ts.dcl.IsZero() || time.Since(ts.dcl) >= idleCap // not parsed: waited already
		ts.mu.Unlock()
		if quiet || capped || held {
			return
		}
	}
}

// world makes a world of telson's own in the tab's page, where the page's
// scripts cannot replace the built-ins a script uses; it returns the
// parameters of Runtime.evaluate in it. A new document ends the world.
func (b *browser) world(ctx context.Context, t browserTab) (map[string]any, error) {
	var w struct{ ExecutionContextID int }
	isolate := map[string]any{"frameId": t.targetID, "worldName": "telson"}
	err := b.cdp.call(ctx, t.sid, "Page.createIsolatedWorld", isolate, &w)
	return map[string]any{"contextId": w.ExecutionContextID, "returnByValue": true}, err
}

// browserTab is an open tab and its DevTools session.
type browserTab struct{ targetID, sid string }

// newTab opens a tab that pauses every document (admits). Nobody hears its events yet.
func (b *browser) newTab(ctx context.Context) (browserTab, error) {
	var t struct{ TargetID, SessionID string }
	// In the background: it paints nothing (a read needs the layout, not the
	// pixels), and in the user's browser it opens behind the one they look at.
	create := json.RawMessage(`{"url": "about:blank", "background": true}`)
	err := b.cdp.call(ctx, "", "Target.createTarget", create, &t)
	if err != nil {
		return browserTab{}, err
	}
	attach := map[string]any{"targetId": t.TargetID, "flatten": true}
	err = b.cdp.call(ctx, "", "Target.attachToTarget", attach, &t)
	tab := browserTab{t.TargetID, t.SessionID}
	if err != nil {
		b.closeTab(tab, false)
		return browserTab{}, err
	}
	setup := map[string]any{
		"Page.enable":                    nil,
		"Page.setLifecycleEventsEnabled": json.RawMessage(`{"enabled": true}`),
		"Network.enable":                 nil,
		"Fetch.enable":                   json.RawMessage(`{"patterns":[{"resourceType":"Document"}]}`), // admits
		// A worker waits, never run: its requests and sockets would pass sitePatterns.
		"Target.setAutoAttach": json.RawMessage(`{"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true}`),
	}
	errs := make(chan error, len(setup))
	for method, params := range setup { // all at once: each costs a round trip
		go func() { // exits when Chrome answers or ctx ends
			errs <- b.cdp.call(ctx, tab.sid, method, params, nil)
		}()
	}
	for range setup {
		err = cmp.Or(err, <-errs) // the first error
	}
	if err != nil {
		b.closeTab(tab, false)
		return browserTab{}, err
	}
	return tab, nil
}

// closeTab closes a tab, or keeps it for the next read (keep) with its page
// gone: nothing of the page (its timers, workers, sockets) runs once its read
// has ended. It waits for Chrome's answers two seconds at most in all.
func (b *browser) closeTab(t browserTab, keep bool) {
	b.cdp.subscribe(t.sid, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if keep && b.cdp.call(ctx, t.sid, "Page.navigate", json.RawMessage(`{"url": "about:blank"}`), nil) == nil {
		select {
		case b.spare <- t:
			return
		default: // another read left one
		}
	}
	b.cdp.call(ctx, "", "Target.closeTarget", map[string]any{"targetId": t.targetID}, nil)
}

// parkMax is the longest page whose tab is kept for the next read (when it was
// parsed): a longer one's renderer would keep much of the memory it took, which
// closing returns.
const parkMax = 1 << 20

// read loads pageURL in a tab, when one of srv's tab slots is free, and
// reads it once its content is there (see readSettle), and extra later; the
// read takes at most READDOCS_TIMEOUT_MS and extra from when it has its slot
// (reads under load wait their turn: each slot is held that long at most).
func (b *browser) read(ctx context.Context, srv *server, pageURL string,
	extra time.Duration) (*readDocsOut, error) {
	select {
	case srv.browser.tabs <- struct{}{}:
		defer func() { <-srv.browser.tabs }()
	case <-ctx.Done():
		return nil, fmt.Errorf("readdocs: waiting for a browser tab: %w", ctx.Err())
	}
	ctx, cancel := context.WithTimeout(ctx, srv.set.ReadDocsTimeout+extra)
	defer cancel()
	t0 := time.Now()
	took := func() time.Duration { return time.Since(t0).Round(time.Millisecond) }
	var tab browserTab
	var err error
	select {
	case tab = <-b.spare:
	default:
		tab, err = b.newTab(ctx)
	}
	if err != nil {
		return nil, err
	}
	reuse := false // the read went well: the next one navigates the tab (a new one costs)
	// In the user's browser the tab goes before telson may disconnect.
	defer func() { b.closeTab(tab, reuse && b.proc != nil) }()
	sid := tab.sid
	ts := &tabState{ctx: ctx, cdp: b.cdp, tab: tab, changed: make(chan struct{}, 1),
		inflight: map[string]bool{}}
	b.cdp.subscribe(sid, ts.event)
	// The waits end early enough to leave time to read what the page shows.
	dl, _ := ctx.Deadline()
	waitCtx, cancelWait := context.WithDeadline(ctx, dl.Add(-min(5*time.Second, time.Until(dl)/4)))
	defer cancelWait()
	var nav struct {
		ErrorText  string
		IsDownload bool
	}
	// The page's own site is let through, and no other; a redirect to another
	// site, refused, is read from there, as far as a browser follows redirects.
	for to, hops := pageURL, 0; to != "" && hops <= 20; hops++ {
		pageURL = to
		ts.mu.Lock()
		_, ts.site = siteOf(pageURL)
		ts.moved, nav.ErrorText = "", ""
		ts.mu.Unlock()
		// Set again for each read: a navigation at once after the tab's last
		// (to about:blank) may never be answered.
		err = b.cdp.call(waitCtx, sid, "Network.setBlockedURLs", sitePatterns(ts.site), nil)
		if err == nil {
			err = b.cdp.call(waitCtx, sid, "Page.navigate", map[string]any{"url": pageURL}, &nav)
		}
		ts.mu.Lock()
		to = ts.moved
		ts.mu.Unlock()
	}
	switch {
	case err != nil && waitCtx.Err() != nil:
		return nil, fmt.Errorf("%s sent no response within %s", pageURL, took())
	case err != nil:
		return nil, err
	case nav.IsDownload:
		return nil, fmt.Errorf("%s is a download, not a page", pageURL)
	case nav.ErrorText != "":
		return nil, fmt.Errorf("loading %s failed: %s", pageURL, nav.ErrorText)
	}
	b.settle(waitCtx, ts, srv.set.ReadDocsIdle)
	select {
	case <-time.After(extra):
	case <-ctx.Done():
	}
	ts.mu.Lock()
	styled, docID := !ts.unstyled, ts.docID
	if ts.inflight[docID] {
		docID = "" // it has not all come
	}
	ts.mu.Unlock()
	// The page's HTML as the server sent it, when it has all come ("" on an
	// error), asked for while the page is read.
	var src struct {
		Body          string
		Base64Encoded bool
	}
	sent := make(chan struct{})
	go func() { // exits when Chrome answers or ctx ends
		if docID != "" {
			params := map[string]any{"requestId": docID}
			b.cdp.call(ctx, sid, "Network.getResponseBody", params, &src)
		}
		close(sent)
	}()
	pg, err := b.evaluate(ctx, tab, styled)
	<-sent
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%s did not answer within %s (a script may be busy)", pageURL,
			took())
	} else if err != nil {
		return nil, err
	}
	ts.mu.Lock()
	// A page still not parsed is busy: the next read would wait for it to leave.
	reuse = len(pg.body) <= parkMax && !ts.dcl.IsZero()
	if ts.dcl.IsZero() {
		pg.Notes = append(pg.Notes, fmt.Sprintf("The page had not finished loading after %s; "+
			"this is what it showed then.", took()))
	}
	if ts.moved != "" {
		note := "The page tried to go on to " + ts.moved + "; this is the page itself."
		pg.Notes = append(pg.Notes, note)
	}
	ts.mu.Unlock()
	if !src.Base64Encoded && pg.unseen != nil {
		pg.source = src.Body[:min(len(src.Body), pageCap)]
	}
	return pg, nil
}

// judgePage waits for a page whose main content is still a placeholder (see
// below), then removes from it what a person cannot see, judged by
// rendering (the page's own stylesheets loaded), after opening what a click
// shows (a tab panel beside a tab or label, a closed <details>, what a
// collapsed button controls), judged as anything shown. An element is gone
// when it is not shown, faint (its opacity, a filter's, times its ancestors'
// under a tenth, unless a transition or animation is changing it or it is
// revealed on scroll), blurred, masked, or clipped to nothing by its own or its
// ancestors' boxes (overflow, clip-path, clip) or the page's edges (before its
// start, or far past its end across). A text is gone when it is unseen, faint,
// of too little contrast with every colour behind it (gradients included; text
// in the body's colour only when every stylesheet came: one that did not would
// set its colour or the box behind it), or, measured where a box clips, moves
// or shrinks it, without a box of 2×4 px left or with less than half of it
// shown. An element's text is judged once, not each of its text nodes. Style
// is all measured before anything changes; then the page's style elements and
// attributes are removed.
const judgePage = `{
	// A page whose main content is still a placeholder (no text, "Loading…") is waited for
	// while its text changes, at most 2 s, and said to be one when it still is.
	var main = document.querySelector('main, [role=main], article') || b || h;
	const short = () => main.textContent.trim().length < 1000 && main.innerText.trim();
	const still = t => t !== false && t.length < 200 &&
		/^$|^(loading|please wait|one moment)|(…|\.\.\.)$/i.test(t) || !!document.querySelector('[aria-busy=true]');
	let last = short(); // its text is taken once a turn: on a big page, that is what costs
	for (let quiet = 0; still(last) && waited < 2000 && quiet < 500; waited += 50) {
		await new Promise(r => setTimeout(r, 50));
		const t = short();
		quiet = t === last ? quiet + 50 : 0;
		last = t;
	}
	placeholder = still(last) ? '(nothing)' : '';
}
if (b) {
	// What a click shows is opened, then judged as anything shown: a tab panel beside a tab or
	// label to click or beside the pane shown, a closed <details>, what a collapsed button controls.
	const clickable = '[role=tab], label, input, button, summary, [aria-controls]', clicks = new Map();
	const holds = p => p && (clicks.has(p) || clicks.set(p, !!p.querySelector(clickable))) && clicks.get(p);
	const opened = [...b.querySelectorAll('[role=tabpanel], .tab-content, [class*=tab-pane], ' +
		'[class*=tabpanel], .tabbed-block, .sd-tab-content, .vp-code-group .blocks > *')].filter(e =>
		holds(e.parentElement) || holds(e.parentElement.parentElement));
	// The panes beside the one shown (class on, active): those of its class a script shows.
	for (const a of b.querySelectorAll('.on, .active, .is-active')) {
		const k = [...a.classList].find(c => !/^(on|active|is-active)$/.test(c));
		for (const e of a.parentElement.children) if (k && e != a && e.classList.contains(k)) opened.push(e);
	}
	for (const c of b.querySelectorAll('[aria-expanded=false][aria-controls]')) {
		for (const id of c.getAttribute('aria-controls').split(/\s+/)) {
			const e = document.getElementById(id);
			if (e && b.contains(e) && e != b) opened.push(e);
		}
	}
	for (const d of b.querySelectorAll('details:not([open])')) d.open = true;
	const show = (e, k, v) => e.style.setProperty(k, v, 'important');
	// Each is read before any is changed, and measured once all are shown: one layout, not one each.
	for (const e of opened) e.removeAttribute('hidden');
	const closed = opened.map(e => [e, getComputedStyle(e)]).map(([e, s]) =>
		[e, s, s.display == 'none', s.visibility != 'visible']);
	for (const [e, , none, unseen] of closed) {
		if (none) show(e, 'display', 'block');
		if (unseen) show(e, 'visibility', 'visible');
	}
	const flat = closed.filter(([, s]) =>
		s.overflowY != 'visible' && parseFloat(s.height) < 4 || parseFloat(s.maxHeight) < 4);
	for (const [e] of flat) {
		show(e, 'height', 'auto');
		show(e, 'max-height', 'none');
	}
	const probe = document.createElement('i');
	probe.style.background = 'Canvas';
	b.append(probe);
	const canvas = getComputedStyle(probe).backgroundColor;
	probe.remove();
	// A hidden body is an A/B test's anti-flicker guard, waiting for a script not loaded.
	const bs = getComputedStyle(b), shown = bs.visibility == 'visible';
	const colours = new Map(), pen = document.createElement('canvas')
		.getContext('2d', {willReadFrequently: true});
	const rgba = c => { // a colour as [r, g, b, a], each from 0 to 1
		if (!colours.has(c)) {
			pen.clearRect(0, 0, 1, 1);
			pen.fillStyle = '#0000';
			pen.fillStyle = c;
			pen.fillRect(0, 0, 1, 1);
			colours.set(c, [...pen.getImageData(0, 0, 1, 1).data].map(v => v / 255));
		}
		return colours.get(c);
	};
	const over = (f, a, g) => g.map((v, i) => f[i] * a + v * (1 - a)); // f at alpha a on g
	const lum = c => [.2126, .7152, .0722].reduce((s, k, i) =>
		s + k * (c[i] <= .04045 ? c[i] / 12.92 : ((c[i] + .055) / 1.055) ** 2.4), 0);
	const contrast = (f, g) => (Math.max(lum(f), lum(g)) + .05) / (Math.min(lum(f), lum(g)) + .05);
	// Whether a fill at alpha a has too little contrast with every colour behind, once per each.
	const faints = new Map();
	const faint = (back, fill, a) => {
		const k = fill + ' ' + a, m = faints.get(back) || faints.set(back, new Map()).get(back);
		if (!m.has(k)) m.set(k, back.every(g => contrast(over(rgba(fill), a, g), g) < 1.25));
		return m.get(k);
	};
	const listed = v => (v.match(/(rgba?|hsla?|color|oklch|oklab|lab|lch)\([^()]*\)/g) || []).map(rgba);
	// The colours behind an element's text: its background (each colour of a gradient) on
	// what is behind it; null: unknown (an image).
	const behind = (s, under) => {
		if (!under) return null;
		const c = rgba(s.backgroundColor), i = s.backgroundImage;
		if (/url\(/.test(i)) return null;
		const base = c[3] ? under.map(u => over(c, c[3], u)) : under;
		return i == 'none' ? base : listed(i).flatMap(g => base.map(u => over(g, g[3], u)));
	};
	// Boxes are {l, t, r, b}; cut returns the part of c inside d.
	const inf = {l: -Infinity, t: -Infinity, r: Infinity, b: Infinity};
	const cut = (c, d) => ({l: Math.max(c.l, d.l), t: Math.max(c.t, d.t),
		r: Math.min(c.r, d.r), b: Math.min(c.b, d.b)});
	const area = c => Math.max(0, c.r - c.l) * Math.max(0, c.b - c.t);
	const big = c => c.r - c.l >= 2 && c.b - c.t >= 4; // enough to read a letter
	const box = q => ({l: q.left, t: q.top, r: q.right, b: q.bottom});
	const words = s => s.replace(/[^\p{L}\p{N}]+/gu, ' ').trim();
	// What a clip-path inset(t r b l), circle or ellipse, or a clip rect(t, r, b, l) leaves of box r.
	const clipped = (v, r) => {
		if (/^(circle|ellipse)\(0(px|%)?[\s)]/.test(v)) return {l: 0, t: 0, r: 0, b: 0};
		const m = /^(inset|rect)\(([^)]*)\)/.exec(v);
		if (!m) return inf;
		const [t, rt = t, bo = t, l = rt] = m[2].split(' round ')[0].split(/[\s,]+/);
		const px = (x, size, none) => {
			const n = parseFloat(x) * (x.endsWith('%') ? size / 100 : 1);
			return isNaN(n) ? none : n;
		};
		return m[1] == 'inset' ? {l: r.left + px(l, r.width, 0), t: r.top + px(t, r.height, 0),
			r: r.right - px(rt, r.width, 0), b: r.bottom - px(bo, r.height, 0)} :
			{l: r.left + px(l, 0, 0), t: r.top + px(t, 0, 0),
				r: r.left + px(rt, 0, r.width), b: r.top + px(bo, 0, r.height)};
	};
	// The page: nothing before its start is seen, nor far past its end across, nor past the end
	// of a right-to-left one.
	const w = document.documentElement.clientWidth;
	const hs = getComputedStyle(document.documentElement);
	const page = hs.direction == 'rtl' ? {...inf, t: -scrollY, r: w + scrollX} :
		{...inf, l: -scrollX, t: -scrollY, r: Math.max(3 * w, 3000) - scrollX};
	// A reveal on scroll (a script fades it in as it comes into view) is shown; any other
	// transition that has not run is not.
	const reveal = '[data-aos], [data-sal], [data-scroll], [data-animate], [class*=reveal], ' +
		'[class*=fade], [class*=animate], [class*=wow]';
	// Text in the page's own colour (the body's) is judged by colour only when every
	// stylesheet came: one that did not would set the colour behind it.
	const ink = bs.webkitTextFillColor;
	const far = v => Math.abs(parseFloat(v) || 0) > 999;
	// What an element's content is judged with: the box that clips it, its opacity, the
	// colours behind it; its text: unseen, dim, or to be measured (suspect); its style s, read
	// again for its text. null: hidden.
	const judge = (e, p, s) => {
		const display = s.display;
		if (display == 'none' || s.contentVisibility == 'hidden') return null;
		let opacity = +s.opacity;
		const f = s.filter;
		if (f != 'none') {
			for (const m of f.matchAll(/opacity\(([\d.]+)(%?)\)/g)) opacity *= m[1] / (m[2] ? 100 : 1);
			if (/blur\((\d\d|[4-9])/.test(f)) return null;
		}
		const mask = s.maskImage;
		if (mask != 'none' && !/url/.test(mask) && listed(mask).every(c => c[3] < .1)) return null;
		// An opacity a transition or an animation is changing, or a reveal on scroll, is the end's.
		const fades = opacity < 1 && (e.getAnimations().length > 0 || e.closest(reveal) &&
			/opacity|all/.test(s.transitionProperty) && parseFloat(s.transitionDuration) > 0);
		const alpha = p.alpha * (fades ? 1 : opacity);
		if (alpha < .1) return null;
		const st = {clip: p.clip, alpha, back: p.back, suspect: false, s};
		const pos = s.position, placed = /absolute|fixed/.test(pos), path = s.clipPath;
		// Overflow clips a box, not inline text; the body's overflow is the page's, which scrolls.
		const flows = e != b && !/^(inline|contents)$/.test(display) && s.overflow != 'visible';
		if (placed) st.clip = pos == 'fixed' ? page : (states.get(e.offsetParent) || {clip: page}).clip;
		const moved = placed || far(s.marginLeft) || far(s.marginTop) ||
			pos == 'relative' && (far(s.left) || far(s.top)) ||
			!/^(none|matrix\(1, 0, 0, 1, [-\d.]{1,6}, [-\d.]{1,6}\))$/.test(s.transform) ||
			s.scale != 'none' || s.translate != 'none';
		if (moved || flows || path != 'none') {
			const r = e.getBoundingClientRect(), x = s.overflowX, y = s.overflowY;
			let c = cut(cut(st.clip, clipped(path, r)), placed ? clipped(s.clip, r) : inf);
			// Hidden overflow clips to the box's edges when the content does not fit in it.
			const fits = e.scrollWidth <= e.clientWidth + 1 && e.scrollHeight <= e.clientHeight + 1;
			const cx = flows && (/hidden|clip/.test(x) && !fits || x != 'visible' && r.width < 1);
			const cy = flows && (/hidden|clip/.test(y) && !fits || y != 'visible' && r.height < 1);
			c = cut(c, {l: cx ? r.left : -Infinity, r: cx ? r.right : Infinity,
				t: cy ? r.top : -Infinity, b: cy ? r.bottom : Infinity});
			// What scrolls across is read however far it goes.
			if (flows && /auto|scroll/.test(x)) c.r = Infinity;
			if (!big(c) || area(cut(box(r), c)) == 0 && r.width * r.height > 0) return null;
			st.suspect = moved || cx || cy || path != 'none';
			st.clip = c;
		}
		st.suspect = st.suspect || p.suspect;
		st.back = behind(s, p.back);
		return st;
	};
	// The judgment of an element's own text: unseen, faint, without contrast (unless its fill
	// is the background's: gradient text), or to be measured.
	const textOf = st => {
		const s = st.s, fill = s.webkitTextFillColor, a = st.alpha * rgba(fill)[3];
		if (shown && s.visibility != 'visible' || a < .1) return 'hidden';
		if (st.back && (styled || fill != ink) && faint(st.back, fill, a) && s.backgroundClip != 'text') {
			return 'hidden';
		}
		return st.suspect || parseFloat(s.fontSize) < 6 || far(s.textIndent) || /-/.test(s.letterSpacing) ?
			'measure' : '';
	};
	const hidden = [], texts = [], range = document.createRange();
	// An element's own texts (not its children's), judged once for all of them.
	const own = (e, st) => {
		for (let t = e.firstChild; t; t = t.nextSibling) {
			if (t.nodeType != Node.TEXT_NODE || !/\S/.test(t.data)) continue;
			const v = st.text ??= textOf(st);
			if (!v) return;
			if (v == 'measure') {
				// Too little of it is left to read after clipping, or less than half of it shows.
				range.selectNodeContents(t);
				const rects = [...range.getClientRects()].map(box);
				const left = rects.map(q => cut(st.clip, q)).filter(big);
				if (left.length && left.reduce((n, q) => n + area(q), 0) * 2 >=
					rects.reduce((n, q) => n + area(q), 0)) continue;
			}
			texts.push(t);
		}
	};
	const states = new Map(), all = b.getElementsByTagName('*');
	const top = {clip: page, alpha: 1, back: behind(hs, [rgba(canvas)]), suspect: false};
	states.set(b, judge(b, top, bs) || {...top, s: bs});
	own(b, states.get(b));
	for (let i = 0; i < all.length; i++) {
		const e = all[i], p = states.get(e.parentElement);
		if (!p || /^(SCRIPT|STYLE|TEMPLATE|NOSCRIPT)$/.test(e.tagName)) continue;
		const st = judge(e, p, getComputedStyle(e));
		if (st) {
			states.set(e, st);
			own(e, st);
		} else if (!/^H\d$/.test(e.tagName) || !words(document.title).includes(words(e.textContent))) {
			// Not a heading the title holds too (hidden for a logo): the title is read anyway.
			hidden.push(e);
		}
	}
	// What the HTML as sent may not give either: every text judged hidden.
	const gone = [], keep = t => gone.push(t.data.replace(/\s+/g, ' ').trim());
	for (const e of hidden) {
		const w = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
		while (w.nextNode()) keep(w.currentNode);
	}
	texts.forEach(keep);
	unseen = gone.join('\n');
	for (const e of hidden) e.remove();
	for (const t of texts) t.remove();
	// Visibility is decided: the page's styles go, so the markup's hints cannot decide it again.
	for (const e of document.querySelectorAll('style')) e.remove();
	for (const e of document.querySelectorAll('[style]')) e.removeAttribute('style');
	for (const e of document.querySelectorAll('[hidden]')) e.removeAttribute('hidden');
}
// A page that names no charset is decoded by the browser as windows-1252: its text is read
// again as UTF-8 when all of it was UTF-8 (as the server's bytes were).
if (document.characterSet != 'UTF-8' && !document.querySelector('meta[charset], meta[http-equiv=content-type i]')) {
	const codes = new Map([...new TextDecoder(document.characterSet)
		.decode(Uint8Array.from({length: 256}, (_, i) => i))].map((c, i) => [c, i]));
	const utf8 = new TextDecoder('utf-8', {fatal: true}), byte = c => {
		if (!codes.has(c)) throw c; // not from a byte: the page was not read as bytes
		return codes.get(c);
	};
	const walk = document.createTreeWalker(h, NodeFilter.SHOW_TEXT), fixed = new Map();
	try {
		while (walk.nextNode()) {
			const t = walk.currentNode;
			if (codes.size == 256 && /[^\0-\x7f]/.test(t.data))
				fixed.set(t, utf8.decode(Uint8Array.from([...t.data], byte)));
		}
		for (const [t, v] of fixed) t.data = v;
	} catch (e) {}
}
if (placeholder) placeholder = (main.innerText.trim() || '(nothing)').slice(0, 80);`

// evaluate reads the page's DOM (its text when it is not HTML), hidden
// parts marked (styled: every stylesheet came), in a world of its own, where
// the page's scripts cannot replace the built-ins it uses (a slice that cuts
// nothing); a page of a type that does not read as text is an error.
func (b *browser) evaluate(ctx context.Context, t browserTab, styled bool) (*readDocsOut, error) {
	expr := fmt.Sprintf(`(async () => {
		const h = document.documentElement, b = document.body, type = document.contentType;
		let waited = 0, placeholder = '', unseen = '';
		const styled = %t && [...document.querySelectorAll('link[rel~=stylesheet i]')]
			.every(l => l.sheet); // none refused, and none still coming
		const text = !type.includes('html');
		if (!text) %s
		const page = text ? (b ? b.innerText : '') : (h ? h.outerHTML : '');
		// Cut to %d bytes as sent: Chromium writes all but printable ASCII as \uXXXX.
		const budget = %[3]d, bytes = s => s.length + 5 * s.replace(/[ -~]+/g, '').length;
		let s = page.slice(0, %d);
		for (let n; 6 * s.length > budget && (n = bytes(s)) > budget; ) {
			s = s.slice(0, s.length * budget / n);
		}
		const nav = performance.getEntriesByType('navigation')[0];
		return {body: s, read: s.length, full: page.length, title: document.title.slice(0, %d),
			url: location.href, type, text, status: nav ? nav.responseStatus : 0, waited,
			placeholder, unseen: unseen.length < %[4]d / 4 ? unseen : null}; })()`,
		styled, judgePage, pageJSON, pageCap, 4*maxTitle)
	var ev struct {
		Result struct {
			Value struct {
				Body, Title, URL, Type, Placeholder string
				Read, Full, Status, Waited          int
				Text                                bool
				Unseen                              *string
			}
		}
		ExceptionDetails *struct{ Text string }
	}
	params, err := b.world(ctx, t)
	params["expression"], params["awaitPromise"] = expr, true
	if err == nil {
		err = b.cdp.call(ctx, t.sid, "Runtime.evaluate", params, &ev)
	}
	v := ev.Result.Value
	switch {
	case err != nil:
		return nil, err
	case ev.ExceptionDetails != nil:
		return nil, fmt.Errorf("reading the page: %s", ev.ExceptionDetails.Text)
	case !readableType.MatchString(v.Type):
		return nil, fmt.Errorf("%s is %s, not a page ReadDocs can read", v.URL, v.Type)
	}
	pg := &readDocsOut{FinalURL: v.URL, Title: v.Title, Status: v.Status, Via: "chromium",
		body: v.Body, isText: v.Text}
	if v.Unseen != nil { // else too much to hold: the HTML as sent is not read
		pg.unseen = strings.Split(*v.Unseen, "\n")
	}
	if v.Read < v.Full {
		pg.Notes = append(pg.Notes, fmt.Sprintf("Only the first %d of %d characters of the page "+
			"were read.", v.Read, v.Full))
	}
	if v.Placeholder != "" {
		pg.Notes = append(pg.Notes, fmt.Sprintf("The page still showed a placeholder (%q) after %d ms "+
			"more; wait_ms 5000 may give its content.", v.Placeholder, v.Waited))
	}
	return pg, nil
}

// readableType matches a content type that reads as text.
var readableType = regexp.MustCompile(`(?i)^text/|html|xml|json|javascript`)

// fetchPlain GETs the page: 10 redirects, pageCap bytes, read as UTF-8
// whatever its label (invalid bytes become U+FFFD).
func fetchPlain(ctx context.Context, pageURL string) (*readDocsOut, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", pageURL, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	ua := "Mozilla/5.0 (compatible; telson; +https://github.com/telsonhq/telson)"
	req.Header.Set("User-Agent", ua)
	resp, raw, err := fetch(http.DefaultClient, req, pageCap+1) // 10 redirects at most
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	pg := &readDocsOut{FinalURL: resp.Request.URL.String(), Status: resp.StatusCode, Via: "http"}
	if len(raw) > pageCap {
		raw = raw[:pageCap]
		note := fmt.Sprintf("Only the first %d bytes of the page were read.", pageCap)
		pg.Notes = append(pg.Notes, note)
	}
	ct := cmp.Or(resp.Header.Get("Content-Type"), http.DetectContentType(raw))
	isDownload := strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment")
	if isDownload || !readableType.MatchString(ct) {
		return nil, fmt.Errorf("%s is a download or %s, not a page ReadDocs can read", pageURL, ct)
	}
	pg.isText = !strings.Contains(strings.ToLower(ct), "html")
	pg.body = strings.ToValidUTF8(strings.TrimPrefix(string(raw), "\ufeff"), "\uFFFD")
	return pg, nil
}

// ---- network fetches ------------------------------------------------------------------------

// fetch sends req, an http or https request, with client (whose redirect rule applies: the
// default client's follows 10, within http and https), and returns the response with at most
// max bytes of its body.
func fetch(client *http.Client, req *http.Request, max int64) (*http.Response, []byte, error) {
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return nil, nil, fmt.Errorf("only http and https URLs are fetched, not %s", req.URL.Scheme)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, max))
	return resp, body, err
}

// ---- WebSearch ------------------------------------------------------------
//
// Many search engines asked at once, every answer judged and parsed, the
// lists merged and ranked, and every engine's fate reported. Rules:
//   - an engine is one row of searchEngines: a request template and where its
//     results are; one extractor reads every answer: JSON by a path and field
//     templates, markup (HTML, Atom) by selectors;
//   - an answer's final URL, status and captcha markers decide its fate before
//     its results do; an engine that was rate-limited, blocked or shown a
//     captcha rests for SEARCH_BACKOFF_MS, for every session;
//   - all engines run at once, each under SEARCH_TIMEOUT_MS; cancelling the
//     call stops every request;
//   - bodies are capped at searchMaxBody; titles and snippets are plain text.

const (
	searchMaxBody        = 4 << 20
	searchMaxText        = 500 // runes kept of a title or snippet
	searchDefaultResults = 10
	searchRRFK           = 60.0 // reciprocal rank fusion: score = Σ 1/(k + rank)
	// Per extra engine that found a result: half a first place.
	searchAgreementBonus = 1 / (2 * searchRRFK)
)

var webSearchTool = toolDef{
	name:     "WebSearch",
	title:    "Search the web with many engines at once",
	describe: describeWebSearch,
	input: `{"type":"object","properties":{
		"query":{"type":"string","minLength":1,"maxLength":2000,
			"description":"What to search for."},
		"max_results":{"type":"integer","minimum":1,"maximum":50,
			"description":"Merged results to return (default 10)."},
		"engines":{"type":"array","maxItems":20,
			"description":"Engines to ask (default: all enabled).",
			"items":{"type":"string","enum":["duckduckgo","brave","mojeek","bing","yahoo","yandex",
			"wikipedia","hackernews","stackoverflow","github","arxiv"]}}},
		"required":["query"]}`,
	output: `{"type":"object","properties":{
		"results":{"type":"array","items":{"type":"object","properties":{
			"title":{"type":"string"},"url":{"type":"string"},"snippet":{"type":"string"},
			"engines":{"type":"array","items":{"type":"string"}},"score":{"type":"number"}},
			"required":["title","url","snippet","engines","score"]}},
		"engines":{"type":"array","items":{"type":"object","properties":{
			"name":{"type":"string"},
			"status":{"type":"string","enum":
			["ok","empty","rate-limited","captcha","blocked","error","timed out","resting"]},
			"count":{"type":"integer"},"detail":{"type":"string"}},
			"required":["name","status","count"]}},
		"message":{"type":"string","description":"why there are no results"}},
		"required":["results","engines"]}`,
	hints: toolHints{readOnly: true, openWorld: true},
	run:   runWebSearch,
}

// describeWebSearch names the engines a call asks by default.
func describeWebSearch(s *session) string {
	var names []string
	for _, e := range searchSelect(s.srv.set, nil) {
		names = append(names, e.name)
	}
	return `Searches the web with many engines at once. Returns one merged list (title, URL,
snippet, the engines that found it; results engines agree on rank higher) and each engine's fate
(ok, empty, rate-limited, captcha, blocked, error, timed out, resting: an engine that was
rate-limited, blocked or shown a captcha rests for a while).

Engines: ` + strings.Join(names, ", ") + `. Pick a few with engines: ["wikipedia","arxiv"] for
papers, ["stackoverflow","github","hackernews"] for code.`
}

// searchEngine is one engine. Its request templates hold $q, the query URL-escaped; field
// templates hold $field of a JSON result.
type searchEngine struct {
	name   string
	url    string // SEARCH_URL_<NAME> replaces its scheme and host
	body   string // a POST body
	header string // "Name: value" lines after searchAPIHeader's, which they override

	// Markup is read with selectors (see searchSelector), JSON with a path
	// and templates.
	list  string // markup: the result container, telling "no results" from "not a result page"
	items string // the result blocks, or a dotted JSON path to a list
	// Within a block, selectors (the link defaults to the first a, the title
	// to the link's text) or JSON field templates (defaults: $url, $title, $snippet).
	link, title, snippet string
	strip                string // markup: elements left out of the page (dates, icons)
}

// searchEngines is every engine.
var searchEngines = []*searchEngine{
	{name: "duckduckgo", url: "https://html.duckduckgo.com/html/", body: "q=$q&b=&kl=wt-wt",
		header: searchBrowserHeader + `Referer: https://html.duckduckgo.com/
Sec-Fetch-Site: same-origin
Content-Type: application/x-www-form-urlencoded`,
		list: "id=links", items: "result", link: "result__a", snippet: "result__snippet"},
	{name: "brave", url: "https://search.brave.com/search?q=$q&source=web",
		header: searchBrowserHeader +
			"Cookie: safesearch=moderate; useLocation=0; country=us; ui_lang=en-us",
		list: "id=results", items: "data-type=web",
		title:   "search-snippet-title snippet-title",
		snippet: "generic-snippet snippet-description", strip: "t-secondary"},
	{name: "mojeek", url: "https://www.mojeek.com/search?q=$q&safe=0", header: searchBrowserHeader,
		list: "results-standard", items: "li", title: "h2", snippet: "s"},
	{name: "bing", url: "https://www.bing.com/search?q=$q&mkt=en-US",
		header: searchBrowserHeader +
			"Cookie: _EDGE_CD=m=en-us&u=en-us; _EDGE_S=mkt=en-us&ui=en-us",
		list: "id=b_results", items: "li.b_algo", title: "h2",
		snippet: "b_lineclamp2 b_lineclamp3 b_snippet p", strip: "algoSlug_icon"},
	{name: "yahoo", url: "https://search.yahoo.com/search?p=$q&iscqry=",
		header: searchBrowserHeader + "Cookie: sB=v=1&vm=r&fl=1&vl=lang_en&pn=10&rw=new&userset=1",
		list:   "id=web", items: "algo-sr", title: "h3", snippet: "compText"},
	{name: "yandex",
		url:    "https://yandex.com/search/site/?text=$q&web=1&frame=1&searchid=3131712&lang=en",
		header: searchBrowserHeader, items: "serp-item", snippet: "b-serp-item__text"},
	{name: "wikipedia",
		url:  "https://en.wikipedia.org/w/api.php?action=query&list=search&format=json&srsearch=$q",
		link: "https://en.wikipedia.org/wiki/$title", items: "query.search"},
	{name: "hackernews",
		url:   "https://hn.algolia.com/api/v1/search?query=$q&tags=story&hitsPerPage=20",
		items: "hits", link: "https://news.ycombinator.com/item?id=$objectID",
		snippet: "$points points, $num_comments comments. $url $story_text"},
	{name: "stackoverflow",
		url:   "https://api.stackexchange.com/2.3/search/advanced?site=stackoverflow&sort=relevance&q=$q",
		items: "items", link: "$link",
		snippet: "$answer_count answers, score $score; tags: $tags"},
	{name: "github", url: "https://api.github.com/search/repositories?q=$q&per_page=20",
		header: "Accept: application/vnd.github+json\nX-GitHub-Api-Version: 2022-11-28",
		items:  "items", link: "$html_url",
		title: "$full_name", snippet: "$description ($stargazers_count stars)"},
	{name: "arxiv", url: "https://export.arxiv.org/api/query?search_query=all:$q&max_results=20",
		header: "Accept: application/atom+xml", list: "feed", items: "entry",
		link: "rel=alternate", title: "title", snippet: "summary"},
}

// Headers every request starts with: an API client's, and a browser's for
// engines that want one.
const (
	searchAPIHeader = `User-Agent: telson (+https://github.com/telsonhq/telson)
Accept: application/json
`
	searchBrowserHeader = `
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:152.0) Gecko/20100101 Firefox/152.0
Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8
Accept-Language: en-US,en;q=0.9
Sec-Fetch-Dest: document
Sec-Fetch-Mode: navigate
Sec-Fetch-Site: none
Sec-Fetch-User: ?1
`
)

// get fills e's templates, sends the request and reads the answer; net/http
// asks for gzip and decodes it.
func (e *searchEngine) get(ctx context.Context, client *http.Client, set *settings,
	query string) (*http.Response, string, error) {
	q := url.QueryEscape(query)
	fill := func(string) string { return q } // $q is a request template's one name
	method := http.MethodGet
	if e.body != "" {
		method = http.MethodPost
	}
	body := strings.NewReader(os.Expand(e.body, fill))
	req, err := http.NewRequestWithContext(ctx, method, os.Expand(e.url, fill), body)
	if err != nil {
		return nil, "", errors.Unwrap(err)
	}
	base, err := url.Parse(set.SearchURLs["SEARCH_URL_"+strings.ToUpper(e.name)])
	if err == nil && base.Host != "" {
		req.URL.Scheme = base.Scheme
		req.URL.Host = base.Host
		req.Host = ""
	}
	for _, line := range strings.Split(searchAPIHeader+e.header, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			req.Header.Set(k, v)
		}
	}
	resp, answer, err := fetch(client, req, searchMaxBody)
	if err != nil && resp == nil {
		return nil, "", cmp.Or(errors.Unwrap(err), err)
	}
	return resp, string(answer), err
}

// searchHit is one result as an engine gave it.
type searchHit struct{ title, url, snippet string }

// read finds the results in an answer; listed reports a result list there, even an empty one.
func (e *searchEngine) read(body string) (hits []searchHit, listed bool, err error) {
	if !strings.HasPrefix(strings.TrimSpace(body), "{") {
		return e.readMarkup(body)
	}
	var v any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		return nil, false, fmt.Errorf("bad JSON: %w", err)
	}
	for _, key := range strings.Split(e.items, ".") {
		m, _ := v.(map[string]any)
		v = m[key]
	}
	items, listed := v.([]any)
	for _, item := range items {
		m, _ := item.(map[string]any)
		field := func(key string) string {
			if m[key] == nil {
				return ""
			}
			return fmt.Sprint(m[key])
		}
		// A link's spaces become underscores, as Wikipedia's titles need.
		hits = append(hits, searchHit{
			title:   parseHTML(os.Expand(cmp.Or(e.title, "$title"), field)).textContent(),
			url:     strings.ReplaceAll(os.Expand(cmp.Or(e.link, "$url"), field), " ", "_"),
			snippet: parseHTML(os.Expand(cmp.Or(e.snippet, "$snippet"), field)).textContent(),
		})
	}
	return hits, listed, nil
}

// readMarkup reads the blocks in the result list, or in the whole page.
func (e *searchEngine) readMarkup(body string) ([]searchHit, bool, error) {
	doc := parseHTML(body)
	for _, x := range doc.findAll(searchSelector(e.strip)) {
		x.children = nil // the tree is this parse's own
	}
	list := doc.find(searchSelector(e.list))
	var hits []searchHit
	for _, block := range cmp.Or(list, doc).findAll(searchSelector(e.items)) {
		a := block.find(searchSelector(cmp.Or(e.link, "a")))
		if a == nil {
			continue
		}
		title := cmp.Or(block.find(searchSelector(e.title)), a)
		snippet := cmp.Or(block.find(searchSelector(e.snippet)), &htmlNode{}) // or none
		hits = append(hits, searchHit{title.textContent(), a.attr("href"), snippet.textContent()})
	}
	return hits, list != nil, nil
}

// searchSelector matches the elements sel names: any of its words, each
// attr=value, tag.class, a tag or a class.
func searchSelector(sel string) func(*htmlNode) bool {
	return func(n *htmlNode) bool {
		classes := strings.Fields(n.attr("class"))
		return slices.ContainsFunc(strings.Fields(sel), func(word string) bool {
			key, value, isAttr := strings.Cut(word, "=")
			tag, class, isTagged := strings.Cut(word, ".")
			switch {
			case isAttr:
				return n.attr(key) == value
			case isTagged:
				return n.tag == tag && slices.Contains(classes, class)
			}
			return n.tag == word || slices.Contains(classes, word)
		})
	}
}

// searchState is what WebSearch keeps across calls and sessions: an HTTP
// client and the resting engines.
type searchState struct {
	client *http.Client

	mu      sync.Mutex // guards resting
	resting map[string]searchRest
}

type searchRest struct {
	since time.Time
	why   string // the status that sent the engine to rest
}

func newSearchState() *searchState {
	jar, _ := cookiejar.New(nil)
	return &searchState{client: &http.Client{Jar: jar}, resting: map[string]searchRest{}}
}

// searchOutcome is one engine's fate in one call.
type searchOutcome struct {
	Name string `json:"name"`
	// ok, empty, rate-limited, captcha, blocked, error, timed out, resting
	Status string `json:"status"`
	Count  int    `json:"count"`
	Detail string `json:"detail,omitempty"`
	hits   []searchHit
}

// Anti-bot markers: captcha marks are checked on every markup answer, the
// words only on pages without results.
var (
	searchCaptchaMarks = []string{`id="challenge-form"`, "anomaly-modal", "<title>captcha",
		"altcha.js", "__cf_chl_", "/cdn-cgi/challenge-platform/", "google.com/recaptcha",
		`id="b_captcha"`}
	searchBotWords = []string{"verify you are human", "unusual traffic", "automated queries",
		"are you a robot", "bots use duckduckgo too", "non-javascript site"}
	searchNoneWords = []string{"no results found", "no results for", "no pages found",
		"did not match any"}
	searchLimitWords = []string{"rate limit", "throttle"}
	// Ads, and links still wrapped.
	searchAdLinks = []string{"duckduckgo.com/y.js", "duckduckgo.com/l/", "bing.com/aclick",
		"bing.com/ck/a", "r.search.yahoo.com/"}
)

func searchContains(s string, words []string) bool {
	return slices.ContainsFunc(words, func(w string) bool { return strings.Contains(s, w) })
}

// ask asks one engine under SEARCH_TIMEOUT_MS, unless it is resting, and
// judges its answer into o, an error until then; an engine
// rate-limited, blocked or shown a captcha rests for SEARCH_BACKOFF_MS.
func (st *searchState) ask(ctx context.Context, set *settings, e *searchEngine, query string,
	o *searchOutcome) {
	st.mu.Lock()
	rest := st.resting[e.name]
	st.mu.Unlock()
	resting := time.Since(rest.since)
	if resting < set.SearchBackoff {
		o.Status = "resting"
		o.Detail = fmt.Sprintf("%s %v ago", rest.why, resting.Round(time.Second))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, set.SearchTimeout)
	defer cancel()
	resp, body, err := e.get(ctx, st.client, set, query)
	if ctx.Err() == context.DeadlineExceeded {
		o.Status = "timed out"
		o.Detail = fmt.Sprint("no answer within ", set.SearchTimeout)
		return
	}
	if err != nil {
		o.Detail = err.Error()
		return
	}
	hits, listed, err := e.read(body)
	hits = searchTidy(hits)
	o.Status, o.Detail = searchJudge(resp, body, len(hits), listed, err)
	switch o.Status {
	case "rate-limited", "blocked", "captcha":
		st.mu.Lock()
		st.resting[e.name] = searchRest{time.Now(), o.Status}
		st.mu.Unlock()
	case "ok":
		o.hits = hits
		o.Count = len(hits)
	}
}

// searchJudge is an answer's fate: its final URL, status and markers first, then its results.
func searchJudge(resp *http.Response, body string, hits int, listed bool,
	err error) (status, detail string) {
	page := strings.ToLower(resp.Request.URL.Host + resp.Request.URL.Path)
	low := strings.ToLower(body)
	code := resp.StatusCode
	isJSON := strings.HasPrefix(strings.TrimSpace(body), "{")
	sample := "" // what an API said
	if isJSON {
		sample = ": " + cutRunes(body, 200)
	}
	why := fmt.Sprintf("HTTP %d%s", code, sample)
	switch {
	case strings.Contains(page, "captcha"):
		return "captcha", page
	case strings.Contains(page, "consent"):
		return "blocked", page
	case !isJSON && searchContains(low, searchCaptchaMarks):
		return "captcha", "challenge page"
	case code == http.StatusTooManyRequests || code == http.StatusAccepted ||
		code >= 400 && searchContains(low, searchLimitWords):
		return "rate-limited", why
	case code == http.StatusForbidden:
		return "blocked", why
	case code < 200 || code >= 300:
		return "error", why
	case err != nil:
		return "error", err.Error()
	case hits > 0:
		return "ok", fmt.Sprintf("%d results", hits)
	case searchContains(low, searchBotWords):
		return "blocked", "bot check page"
	case listed || searchContains(low, searchNoneWords):
		return "empty", ""
	}
	return "error", "no result list" + sample
}

// searchTidy unwraps redirect links, drops ads and links that are not to web
// pages, and cuts long texts.
func searchTidy(hits []searchHit) []searchHit {
	var out []searchHit
	for _, h := range hits {
		u, err := url.Parse(searchUnwrap(strings.TrimSpace(h.url)))
		if err != nil || u.Scheme != "http" && u.Scheme != "https" ||
			searchContains(strings.ToLower(u.Host+u.Path), searchAdLinks) {
			continue
		}
		h.url = stripControls(u.String()) // a query is not escaped
		h.title = cutRunes(stripControls(cmp.Or(h.title, u.Host+u.Path)), searchMaxText)
		h.snippet = cutRunes(stripControls(h.snippet), searchMaxText)
		out = append(out, h)
	}
	return out
}

// cutRunes cuts s to max runes, the last an ellipsis; it reads at most 4*max bytes of s (a
// page's title may be megabytes long), which hold max runes at least.
func cutRunes(s string, max int) string {
	r := []rune(s[:min(len(s), 4*max)])
	if len(r) <= max && len(s) <= 4*max {
		return s
	}
	return strings.TrimSpace(string(r[:max-1])) + "…"
}

// searchUnwrap turns a click-tracking link (DuckDuckGo, Bing ck/a, Yahoo /RU=) into its target.
func searchUnwrap(href string) string {
	u, err := url.Parse(href)
	if err != nil {
		return href
	}
	q := u.Query()
	_, yahoo, isYahoo := strings.Cut(u.Path, "/RU=")
	yahoo, _, _ = strings.Cut(yahoo, "/RK=")
	bing, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(q.Get("u"), "a1"))
	switch {
	case isYahoo:
		return yahoo
	case q.Has("uddg"):
		return q.Get("uddg")
	case strings.HasSuffix(u.Path, "/ck/a"): // "" when undecodable, dropped
		return string(bing)
	}
	return href
}

// searchURLKey is what two links to one page share: not the scheme, www.,
// a default port, a trailing slash, the fragment or the parameters' order.
func searchURLKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	host := strings.TrimPrefix(strings.ToLower(u.Host), "www.")
	host = strings.TrimSuffix(strings.TrimSuffix(host, ":80"), ":443")
	return host + strings.TrimSuffix(u.Path, "/") + "?" + u.Query().Encode()
}

// searchResult is one merged result.
type searchResult struct {
	Title   string   `json:"title"`
	URL     string   `json:"url"`
	Snippet string   `json:"snippet"`
	Engines []string `json:"engines"`
	Score   float64  `json:"score"`
}

// searchMerge merges the lists by URL, ranked by reciprocal rank fusion plus
// a bonus per agreeing engine; ties keep the engines' order. A merged result
// keeps the longest title and snippet and an https link.
func searchMerge(outs []searchOutcome, max int) []*searchResult {
	byKey := map[string]*searchResult{}
	all := []*searchResult{}
	for _, o := range outs {
		for i, h := range o.hits {
			key := searchURLKey(h.url)
			r := byKey[key]
			if r == nil {
				r = &searchResult{URL: h.url}
				byKey[key] = r
				all = append(all, r)
			}
			if slices.Contains(r.Engines, o.Name) {
				continue // the same page twice in one list
			}
			if len(r.Engines) > 0 {
				r.Score += searchAgreementBonus
			}
			r.Engines = append(r.Engines, o.Name)
			r.Score += 1 / (searchRRFK + float64(i+1))
			if !strings.HasPrefix(r.URL, "https:") {
				r.URL = h.url
			}
			if len(h.title) > len(r.Title) {
				r.Title = h.title
			}
			// A bare link says nothing.
			if len(h.snippet) > len(r.Snippet) && !strings.HasPrefix(h.snippet, "http") {
				r.Snippet = h.snippet
			}
		}
	}
	slices.SortStableFunc(all, func(a, b *searchResult) int {
		return cmp.Compare(b.Score, a.Score)
	})
	return all[:min(len(all), max)]
}

// searchSelect picks the engines a call names (the input schema lists the
// names), else those SEARCH_ENGINES names, else every one.
func searchSelect(set *settings, names []string) []*searchEngine {
	if len(names) == 0 {
		names = set.SearchEngines
	}
	var out []*searchEngine
	for _, e := range searchEngines {
		if slices.Contains(names, e.name) || len(names) == 0 {
			out = append(out, e)
		}
	}
	return out
}

// search asks every engine at once and returns their outcomes in engine order.
func (st *searchState) search(ctx context.Context, set *settings, query string,
	engines []*searchEngine) []searchOutcome {
	outs := make([]searchOutcome, len(engines))
	var wg sync.WaitGroup
	for i, e := range engines {
		o := &outs[i]
		*o = searchOutcome{Name: e.name, Status: "error"}
		wg.Add(1)
		go func() { // ends when the engine has answered or its timeout has passed
			defer wg.Done()
			defer func() { // a parser's panic must not take the server down
				if p := recover(); p != nil {
					o.Detail = fmt.Sprint("panic: ", p) // before any status was set
				}
				o.Detail = stripControls(o.Detail) // it may quote what an engine said
			}()
			st.ask(ctx, set, e, query, o)
		}()
	}
	wg.Wait()
	return outs
}

// runWebSearch replies with the numbered merged list, then one line per engine.
func runWebSearch(ctx context.Context, c *toolCall) toolResult {
	var a struct {
		Query      string   `json:"query"`
		MaxResults int      `json:"max_results"`
		Engines    []string `json:"engines"`
	}
	json.Unmarshal(c.args, &a) // schema-checked
	query := strings.TrimSpace(a.Query)
	if query == "" {
		return errorResult("the query is blank; say what to search for")
	}
	srv := c.s.srv
	outs := srv.search.search(ctx, srv.set, query, searchSelect(srv.set, a.Engines))
	results := searchMerge(outs, cmp.Or(a.MaxResults, searchDefaultResults))
	out := map[string]any{"results": results, "engines": outs}
	var b strings.Builder
	for i, r := range results {
		fmt.Fprintf(&b, "%d. **%s**\n   %s\n", i+1, r.Title, r.URL)
		if r.Snippet != "" {
			fmt.Fprintf(&b, "   %s\n", r.Snippet)
		}
		fmt.Fprintf(&b, "   found by: %s\n\n", strings.Join(r.Engines, ", "))
	}
	fates := "" // a line per engine
	answered := false
	for _, o := range outs {
		fates += "\n- " + o.Name + ": " + o.Status
		if o.Detail != "" {
			fates += " (" + o.Detail + ")"
		}
		answered = answered || o.Status == "ok" || o.Status == "empty"
	}
	if !answered {
		out["message"] = "every engine failed"
		res := errorResult("every engine failed:%s", fates)
		res.structured = out
		return res
	}
	if len(results) == 0 {
		out["message"] = "No results: the engines that answered found nothing."
		fmt.Fprintf(&b, "%s\n\n", out["message"])
	}
	return structuredResult(b.String()+"Engines:"+fates, out)
}
