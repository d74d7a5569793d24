// tools_web.go holds the web tools: ReadDocs (a page read through headless
// Chromium over the DevTools protocol and our own RFC 6455 websocket client,
// with a net/http fallback) and WebSearch (many engines at once, merged), and
// the HTML handling both share: a small tokenizer and tree builder.
//
// Rules (WebSearch has its own, in its section):
//   - ReadDocs reads http and https URLs only;
//   - every page and every engine reply is untrusted: sizes are capped,
//     nesting is bounded, nothing panics on malformed markup;
//   - the browser is one process group, started lazily, reused, and killed
//     with the server.
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
	"encoding/xml"
	"errors"
	"fmt"
	"html"
	"io"
	"maps"
	"math"
	"mime"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// htmlNode is an element or a text node of a parsed page. The root has tag "#root".
type htmlNode struct {
	tag      string // lowercase element name; "" for a text node
	text     string // a text node's decoded text
	attrs    []htmlAttr
	parent   *htmlNode
	children []*htmlNode
}

type htmlAttr struct{ key, val string }

const (
	maxHTMLDepth = 256 // deeper elements become children of the deepest kept one
	htmlSpace    = " \t\r\n\f"
	// Element sets, as " a b c " strings for inSet.
	mdDropTags   = " head script style noscript svg template iframe object embed canvas input textarea select button link meta datalist "
	mdBlockTags  = " address article aside blockquote body caption center dd details dialog div dl dt fieldset figcaption figure footer form h1 h2 h3 h4 h5 h6 header hgroup hr html li main nav ol p pre section summary table td th tr ul "
	mdInlineTags = " a b strong em i del s strike code kbd samp tt var img br "
	mdNoiseRoles = " navigation banner contentinfo complementary menu menubar search dialog alertdialog "
)

var htmlVoid = map[string]bool{"area": true, "base": true, "br": true, "col": true, "embed": true, "hr": true,
	"img": true, "input": true, "link": true, "meta": true, "param": true, "source": true, "track": true, "wbr": true,
	"frame": true, "keygen": true}

// htmlRawText elements hold text up to their end tag, markup and all.
var htmlRawText = map[string]bool{"script": true, "style": true, "textarea": true, "title": true, "xmp": true,
	"iframe": true, "noembed": true, "noframes": true, "plaintext": true}

// htmlClosesP are start tags that end an open paragraph.
var htmlClosesP = map[string]bool{"address": true, "article": true, "aside": true, "blockquote": true, "details": true,
	"div": true, "dl": true, "fieldset": true, "figure": true, "footer": true, "form": true, "h1": true, "h2": true,
	"h3": true, "h4": true, "h5": true, "h6": true, "header": true, "hr": true, "main": true, "nav": true, "ol": true,
	"p": true, "pre": true, "section": true, "table": true, "ul": true}

// htmlImpliedEnd: a start tag closes an open element of the first set unless one of the second is nearer.
var htmlImpliedEnd = map[string][2]string{"li": {" li ", " ul ol menu table "}, "dt": {" dt dd ", " dl table "},
	"dd": {" dt dd ", " dl table "}, "tr": {" tr ", " table "}, "td": {" td th ", " tr table "}, "th": {" td th ", " tr table "},
	"option": {" option ", " select "}}

func inSet(set, tag string) bool { return tag != "" && strings.Contains(set, " "+tag+" ") }

// parseHTML builds a tree from src the forgiving way browsers do, in
// simplified form: implied end tags for p, li, dt, dd, tr, td, th and option;
// stray end tags are ignored; unclosed elements end with their parent;
// comments, doctypes and processing instructions are dropped.
func parseHTML(src string) *htmlNode {
	root := &htmlNode{tag: "#root"}
	stack := []*htmlNode{root}
	// closeTo pops the nearest open element named in names and those above it, unless one named in stop is nearer.
	closeTo := func(names, stop string) {
		for i := len(stack) - 1; i > 0 && !inSet(stop, stack[i].tag); i-- {
			if inSet(names, stack[i].tag) {
				stack = stack[:i]
				return
			}
		}
	}
	// Text gathers in pending (a comment between two runs joins them) and
	// becomes a node when markup that builds the tree comes: linear, whatever the input.
	var pending strings.Builder
	flush := func() {
		if pending.Len() > 0 {
			p := stack[len(stack)-1]
			p.children = append(p.children, &htmlNode{text: pending.String(), parent: p})
			pending.Reset()
		}
	}
	addText := func(t string) { pending.WriteString(t) }
	for pos := 0; pos < len(src); {
		switch rest := src[pos:]; {
		case rest[0] != '<' || len(rest) == 1 || !(isASCIILetter(rest[1]) || strings.IndexByte("/!?", rest[1]) >= 0):
			// Text runs to the next '<' that may open markup; a lone '<' is text.
			end := 1
			for end < len(rest) {
				i := strings.IndexByte(rest[end:], '<')
				if i < 0 {
					end = len(rest)
					break
				}
				if end += i; end+1 < len(rest) && (isASCIILetter(rest[end+1]) || strings.IndexByte("/!?", rest[end+1]) >= 0) {
					break
				}
				end++
			}
			pos += end
			addText(html.UnescapeString(rest[:end]))
		case strings.HasPrefix(rest, "<!--"):
			_, after, _ := strings.Cut(rest[4:], "-->")
			pos = len(src) - len(after)
		case strings.HasPrefix(rest, "<![CDATA["):
			t, _, _ := strings.Cut(rest[9:], "]]>")
			pos += min(9+len(t)+3, len(rest))
			addText(t)
		case strings.HasPrefix(rest, "<!") || strings.HasPrefix(rest, "<?"):
			_, after, _ := strings.Cut(rest, ">")
			pos = len(src) - len(after)
		case rest[1] == '/' && !(len(rest) > 2 && isASCIILetter(rest[2])):
			pos++ // "</" not followed by a name: the '<' is text
			addText("<")
		case rest[1] == '/':
			flush()
			name, after, found := strings.Cut(rest[2:], ">")
			if i := strings.IndexAny(name, htmlSpace+"/"); i >= 0 {
				name = name[:i]
			}
			if pos = len(src) - len(after); found {
				closeTo(" "+strings.ToLower(name)+" ", "")
			}
		default: // a start tag
			flush()
			n, open, next := htmlStartTag(src, pos)
			pos = next
			if e, ok := htmlImpliedEnd[n.tag]; ok {
				closeTo(e[0], e[1])
			} else if htmlClosesP[n.tag] {
				closeTo(" p ", " div section article main table ul ol li blockquote td th button ")
			}
			p := stack[len(stack)-1]
			n.parent, p.children = p, append(p.children, n)
			if open && len(stack) < maxHTMLDepth {
				stack = append(stack, n)
			}
		}
	}
	flush()
	return root
}

func isASCIILetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }

// htmlStartTag reads the start tag at s[i] (and a raw-text element's text); open: it takes children.
func htmlStartTag(s string, i int) (n *htmlNode, open bool, end int) {
	span := func(set string, in bool) string { // the bytes from i that are (or are not) in set; i moves past them
		j := i
		for i < len(s) && strings.ContainsRune(set, rune(s[i])) == in {
			i++
		}
		return s[j:i]
	}
	i++
	n, selfClosing := &htmlNode{tag: strings.ToLower(span(htmlSpace+"/>", false))}, false
	for span(htmlSpace, true); i < len(s) && s[i] != '>'; span(htmlSpace, true) {
		if strings.HasPrefix(s[i:], "/>") {
			selfClosing = true
			i++
			break
		} else if s[i] == '/' {
			i++
			continue
		}
		key := span(htmlSpace+"/>=", false)
		if key == "" { // a stray '='
			key, i = s[i:i+1], i+1
		}
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
		if len(n.attrs) < 64 {
			n.attrs = append(n.attrs, htmlAttr{strings.ToLower(key), html.UnescapeString(val)})
		}
	}
	i = min(i+1, len(s)) // past the '>'
	if selfClosing || !htmlRawText[n.tag] {
		return n, !selfClosing && !htmlVoid[n.tag], i
	}
	j, closer := i, "</"+n.tag
	for j < len(s) && !strings.EqualFold(s[j:min(j+len(closer), len(s))], closer) {
		j++
	}
	if raw := s[i:j]; raw != "" {
		if n.tag == "title" || n.tag == "textarea" {
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

func (n *htmlNode) hasClass(class string) bool {
	return slices.Contains(strings.Fields(n.attr("class")), class)
}

// find returns the first node below n (depth first) that match accepts, or nil.
func (n *htmlNode) find(match func(*htmlNode) bool) *htmlNode {
	if all := n.findAll(match); len(all) > 0 {
		return all[0]
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
	var b strings.Builder
	var walk func(*htmlNode)
	walk = func(p *htmlNode) {
		switch {
		case p.tag == "":
			b.WriteString(p.text)
		case p.tag != "script" && p.tag != "style":
			for _, c := range p.children {
				walk(c)
			}
			if inSet(" br p div li ", p.tag) {
				b.WriteByte(' ')
			}
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

// ---- HTML to markdown ----------------------------------------------------

var (
	mdUnlikely     = regexp.MustCompile(`(?i)-ad-|banner|breadcrumb|combx|comment|community|cookie|disqus|footer|gdpr|header|menu|related|remark|replies|rss|share|shoutbox|sidebar|skyscraper|social|sponsor|pagination|pager|popup|newsletter`)
	mdLikely       = regexp.MustCompile(`(?i)and|article|body|column|content|main|shadow`)
	mdEscape       = strings.NewReplacer("*", `\*`, "`", "\\`")
	mdEscapeInLink = strings.NewReplacer("*", `\*`, "`", "\\`", "[", `\[`, "]", `\]`)
	mdURLEscape    = strings.NewReplacer("(", "%28", ")", "%29", " ", "%20")
	mdCellEscape   = strings.NewReplacer("  \n", " ", "\n", " ", "|", `\|`)
	mdLineStart    = regexp.MustCompile(`^(#{1,6}|[>+-]|\d{1,9}[.)])( |$)`)
	mdEmphasis     = map[string]string{"strong": "**", "b": "**", "em": "*", "i": "*", "del": "~~", "s": "~~", "strike": "~~"}
)

// mdConv turns a parsed page into markdown.
type mdConv struct {
	base    *url.URL
	hasMain bool                 // the content root is the page's main area
	esc     *strings.Replacer    // escapes text (more inside links)
	nest    int                  // depth of lists and quotes being rendered
	sizes   map[*htmlNode][2]int // text and link-text length below a node
}

func htmlByTag(tag string) func(*htmlNode) bool {
	return func(n *htmlNode) bool { return n.tag == tag }
}

// htmlToMarkdown returns the page's title and its main content as markdown, links made absolute.
func htmlToMarkdown(src, pageURL string) (title, md string) {
	root := parseHTML(src)
	m := &mdConv{sizes: map[*htmlNode][2]int{}, esc: mdEscape}
	m.base, _ = url.Parse(pageURL)
	if t := root.find(htmlByTag("title")); t != nil {
		title = t.textContent()
	}
	if b := root.find(htmlByTag("base")); b != nil && m.base != nil {
		if u, err := m.base.Parse(b.attr("href")); err == nil {
			m.base = u
		}
	}
	content := cmp.Or(root.find(htmlByTag("body")), root)
	// The main area is <main>, else [role=main], else the page's only <article>.
	for _, pick := range []func(*htmlNode) bool{htmlByTag("main"), func(n *htmlNode) bool { return n.attr("role") == "main" }, htmlByTag("article")} {
		cands := content.findAll(func(n *htmlNode) bool { return pick(n) && !htmlHidden(n) })
		if len(cands) == 0 || (len(cands) > 1 && cands[0].tag == "article") {
			continue
		}
		if best := slices.MaxFunc(cands, func(a, b *htmlNode) int { return m.measure(a)[0] - m.measure(b)[0] }); m.measure(best)[0] > 0 {
			content, m.hasMain = best, true
			break
		}
	}
	return title, m.block(content, false)
}

// htmlHidden reports an element the page does not show.
func htmlHidden(n *htmlNode) bool {
	style := strings.ToLower(strings.ReplaceAll(n.attr("style"), " ", ""))
	hidden := slices.ContainsFunc(n.attrs, func(a htmlAttr) bool { return a.key == "hidden" })
	return hidden || n.attr("aria-hidden") == "true" || strings.Contains(style, "display:none") || strings.Contains(style, "visibility:hidden")
}

// measure returns the length of the text below n and of the part inside links.
func (m *mdConv) measure(n *htmlNode) [2]int {
	s, ok := m.sizes[n]
	if n.tag == "" {
		return [2]int{len(strings.TrimSpace(n.text)), 0}
	} else if ok || inSet(mdDropTags, n.tag) {
		return s
	}
	for _, c := range n.children {
		cs := m.measure(c)
		s[0], s[1] = s[0]+cs[0], s[1]+cs[1]
	}
	if n.tag == "a" {
		s[1] = s[0]
	}
	m.sizes[n] = s
	return s
}

// skip reports an element left out: never shown, hidden, or page furniture.
// Without a main area, menus are found by role, class and link density.
func (m *mdConv) skip(n *htmlNode) bool {
	s := m.measure(n)
	switch {
	case inSet(mdDropTags+"nav aside footer ", n.tag) || htmlHidden(n) || (n.tag == "form" && s[0] < 500):
		return true
	case m.hasMain:
		return false
	case n.tag == "header":
		return n.find(htmlByTag("h1")) == nil
	}
	ci := n.attr("class") + " " + n.attr("id")
	return inSet(mdNoiseRoles, n.attr("role")) || (mdUnlikely.MatchString(ci) && !mdLikely.MatchString(ci)) ||
		(inSet(" div ul ol section table ", n.tag) && s[0] > 0 && s[1]*2 > s[0] && s[0]-s[1] < 100)
}

// block renders n's children as markdown blocks separated by blank lines; in
// a tight container (a list item) a list follows its neighbour directly.
func (m *mdConv) block(n *htmlNode, tight bool) string {
	var out, inl strings.Builder
	prevList := false
	add := func(s string, list bool) {
		if s != "" && out.Len() > 0 && tight && (list || prevList) {
			out.WriteString("\n")
		} else if s != "" && out.Len() > 0 {
			out.WriteString("\n\n")
		}
		out.WriteString(s)
		prevList = list && s != "" || prevList && s == ""
	}
	var walk func(p *htmlNode)
	walk = func(p *htmlNode) {
		for _, c := range p.children {
			switch {
			case c.tag == "":
				inl.WriteString(m.esc.Replace(c.text))
			case m.skip(c):
			case inSet(mdBlockTags, c.tag):
				add(mdPara(inl.String()), false)
				inl.Reset()
				add(m.element(c), c.tag == "ul" || c.tag == "ol")
			case inSet(mdInlineTags, c.tag):
				inl.WriteString(m.inline(c))
			default:
				walk(c)
			}
		}
	}
	walk(n)
	add(mdPara(inl.String()), false)
	return out.String()
}

// element renders one block element.
func (m *mdConv) element(n *htmlNode) string {
	switch n.tag {
	case "h1", "h2", "h3", "h4", "h5", "h6":
		s := strings.ReplaceAll(mdPara(m.inlineChildren(n)), "  \n", " ")
		return mdMark(s, strings.Repeat("#", int(n.tag[1]-'0'))+" ", "")
	case "hr":
		return "* * *"
	case "pre":
		return mdPre(n)
	case "table":
		return m.table(n)
	case "ul", "ol", "blockquote":
		if m.nest >= 10 { // deeper nesting is flat, so prefixes cannot multiply a page's size
			return m.block(n, false)
		}
		m.nest++
		defer func() { m.nest-- }()
		if n.tag != "blockquote" {
			return m.list(n)
		}
		if s := m.block(n, false); s != "" {
			return "> " + strings.ReplaceAll(strings.ReplaceAll(s, "\n", "\n> "), "> \n", ">\n")
		}
		return ""
	}
	return m.block(n, n.tag == "li")
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

// inline renders an inline node: text, emphasis, links, images, code, breaks.
func (m *mdConv) inline(n *htmlNode) string {
	switch {
	case n.tag == "":
		return m.esc.Replace(n.text)
	case m.skip(n):
		return ""
	case n.tag == "br":
		return "\x01"
	case n.tag == "img":
		alt := strings.Join(strings.Fields(n.attr("alt")), " ")
		for _, src := range []string{n.attr("src"), n.attr("data-src")} { // data-src: a lazy image's real source
			if src != "" && !strings.HasPrefix(src, "data:") {
				return "![" + mdEscapeInLink.Replace(alt) + "](" + m.abs(src) + ")"
			}
		}
		return alt
	case inSet(" code kbd samp tt var ", n.tag):
		s := strings.ReplaceAll(rawText(n, &strings.Builder{}), "\n", " ")
		if strings.TrimSpace(s) == "" {
			return s
		} else if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
			s = " " + s + " "
		}
		return fence(s, 1) + s + fence(s, 1)
	case n.tag == "a":
		esc := m.esc
		m.esc = mdEscapeInLink
		s := m.inlineChildren(n)
		m.esc = esc
		href := strings.TrimSpace(n.attr("href"))
		if t := strings.TrimSpace(s); t == "#" || t == "¶" || t == "§" {
			return "" // a heading's permalink
		} else if href == "" || strings.HasPrefix(strings.ToLower(href), "javascript:") {
			return s
		}
		return mdMark(s, "[", "]("+m.abs(href)+")")
	}
	s := m.inlineChildren(n)
	if mk := mdEmphasis[n.tag]; mk != "" {
		return mdMark(s, mk, mk)
	} else if inSet(mdBlockTags, n.tag) {
		return " " + s + " "
	}
	return s
}

func (m *mdConv) inlineChildren(n *htmlNode) string {
	var b strings.Builder
	for _, c := range n.children {
		b.WriteString(m.inline(c))
	}
	return b.String()
}

// mdPara folds white space as a browser does, turns breaks into hard line
// breaks and escapes what would read as a heading, quote or list marker.
func mdPara(s string) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(htmlSpace, r) }), " ")
	lines := strings.Split(strings.ReplaceAll(s, "\u00a0", " "), "\x01")
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if loc := mdLineStart.FindStringSubmatchIndex(l); loc != nil {
			at := 0 // before # > + -, or before the dot of "1."
			if l[0] >= '0' && l[0] <= '9' {
				at = loc[3] - 1
			}
			l = l[:at] + `\` + l[at:]
		}
		lines[i] = l
	}
	return strings.Trim(strings.Join(lines, "  \n"), " \n")
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

// rawText is the text below n as it stands, with <br> as a newline.
func rawText(n *htmlNode, b *strings.Builder) string {
	for _, c := range n.children {
		switch {
		case c.tag == "":
			b.WriteString(c.text)
		case c.tag == "br":
			b.WriteByte('\n')
		case !inSet(mdDropTags, c.tag):
			rawText(c, b)
		}
	}
	return b.String()
}

// fence returns a run of backticks longer than any in s, at least least long.
func fence(s string, least int) string {
	run, longest := 0, 0
	for i := 0; i < len(s); i++ {
		if run++; s[i] != '`' {
			run = 0
		}
		longest = max(longest, run)
	}
	return strings.Repeat("`", max(least, longest+1))
}

// mdPre renders a code block, with the language its classes name.
func mdPre(n *htmlNode) string {
	s := strings.TrimRight(strings.TrimPrefix(rawText(n, &strings.Builder{}), "\n"), "\n ")
	classes := n.attr("class")
	if c := n.find(htmlByTag("code")); c != nil {
		classes += " " + c.attr("class")
	}
	lang := ""
	for _, c := range strings.Fields(classes) {
		if l, ok := strings.CutPrefix(strings.TrimPrefix(c, "language-"), "lang-"); lang == "" && (ok || l != c) {
			lang = l
		}
	}
	if f := fence(s, 3); strings.TrimSpace(s) != "" {
		return f + lang + "\n" + s + "\n" + f
	}
	return s
}

func (m *mdConv) list(n *htmlNode) string {
	num, err := strconv.Atoi(n.attr("start"))
	if err != nil {
		num = 1
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
		switch body := m.block(c, true); {
		case body == "":
		case c.tag != "li" && len(items) > 0: // a list put straight inside a list belongs to the item before
			items[len(items)-1] += "\n" + indent(body, 2)
		default:
			items = append(items, marker+indent(body, len(marker)))
		}
	}
	return strings.Join(items, "\n")
}

// indent indents every line but the first by w spaces, leaving blank lines empty.
func indent(s string, w int) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\n", "\n"+strings.Repeat(" ", w)), "\n"+strings.Repeat(" ", w)+"\n", "\n\n")
}

func (m *mdConv) table(n *htmlNode) string {
	if n.find(htmlByTag("table")) != nil {
		return m.block(n, false) // a layout table
	}
	var rows [][]string
	cols := 0
	for _, tr := range n.findAll(htmlByTag("tr")) {
		var row []string
		for _, c := range tr.children {
			if (c.tag == "td" || c.tag == "th") && !m.skip(c) {
				row = append(row, mdCellEscape.Replace(m.block(c, false)))
				for span, _ := strconv.Atoi(c.attr("colspan")); span > 1 && span < 100; span-- {
					row = append(row, "")
				}
			}
		}
		if len(row) > 0 {
			rows, cols = append(rows, row), max(cols, len(row))
		}
	}
	if cols > 64 {
		return m.block(n, false) // not a table to read as one
	}
	var b strings.Builder
	if c := n.find(htmlByTag("caption")); c != nil {
		b.WriteString(strings.TrimPrefix(m.block(c, false)+"\n\n", "\n\n"))
	}
	for i, row := range rows {
		row = append(row, make([]string, cols-len(row))...)
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		if i == 0 {
			b.WriteString("|" + strings.Repeat(" --- |", cols) + "\n")
		}
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
	wsCloseTooBig   = 1009
)

// errWSClosed is returned by readMessage once a close frame has arrived.
var errWSClosed = errors.New("websocket: closed")

// wsConn is a client websocket: one goroutine calls readMessage, any may write.
type wsConn struct {
	conn   net.Conn
	br     *bufio.Reader
	rand   io.Reader // masking keys
	maxMsg int64

	wmu       sync.Mutex // guards writes to conn and closeSent
	closeSent bool
}

// wsFrameHeader is a frame header (RFC 6455 section 5.2).
type wsFrameHeader struct {
	fin    bool
	rsv    byte
	op     byte
	masked bool
	mask   [4]byte
	length uint64
}

// wsDial opens a websocket to a ws:// URL. It sends no Origin header and
// offers no extensions: Chromium refuses the first and would compress with the second.
func wsDial(ctx context.Context, rawURL string, rnd io.Reader, maxMsg int64) (*wsConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "ws" || u.Host == "" {
		return nil, fmt.Errorf("websocket dial: bad url %q", rawURL)
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("websocket dial: %w", err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	if err := wsHandshake(ctx, conn, br, u, rnd); err != nil {
		conn.Close()
		return nil, fmt.Errorf("websocket handshake: %w", err)
	}
	return &wsConn{conn: conn, br: br, rand: rnd, maxMsg: maxMsg}, nil
}

// wsHandshake sends the upgrade request and checks the answer (RFC 6455 section 4.1).
func wsHandshake(ctx context.Context, conn net.Conn, br *bufio.Reader, u *url.URL,
	rnd io.Reader) error {
	dl, _ := ctx.Deadline()
	conn.SetDeadline(dl) // none when ctx has none
	defer conn.SetDeadline(time.Time{})
	nonce := make([]byte, 16)
	if _, err := io.ReadFull(rnd, nonce); err != nil {
		return err
	}
	key := base64.StdEncoding.EncodeToString(nonce)
	_, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"+
		"Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
		u.RequestURI(), u.Host, key)
	if err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	h := resp.Header
	switch {
	case resp.StatusCode != http.StatusSwitchingProtocols:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	case !strings.EqualFold(h.Get("Upgrade"), "websocket"):
		return errors.New("no Upgrade: websocket header")
	case !strings.Contains(strings.ToLower(h.Get("Connection")), "upgrade"):
		return errors.New("no Connection: upgrade header")
	case h.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]):
		return errors.New("wrong Sec-WebSocket-Accept")
	case h.Get("Sec-WebSocket-Extensions") != "":
		return fmt.Errorf("extensions not asked for: %s", h.Get("Sec-WebSocket-Extensions"))
	}
	return nil
}

func wsAppendHeader(b []byte, h wsFrameHeader) []byte {
	b0 := h.op&0x0f | (h.rsv&7)<<4
	if h.fin {
		b0 |= 0x80
	}
	b1 := byte(0)
	if h.masked {
		b1 = 0x80
	}
	switch {
	case h.length < 126:
		b = append(b, b0, b1|byte(h.length))
	case h.length <= 0xffff:
		b = append(b, b0, b1|126, byte(h.length>>8), byte(h.length))
	default:
		b = binary.BigEndian.AppendUint64(append(b, b0, b1|127), h.length)
	}
	if h.masked {
		b = append(b, h.mask[:]...)
	}
	return b
}

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
	if h.masked && err == nil {
		_, err = io.ReadFull(r, h.mask[:])
	}
	return h, err
}

// writeFrame sends one masked frame with FIN set.
func (ws *wsConn) writeFrame(op byte, p []byte) error {
	ws.wmu.Lock()
	defer ws.wmu.Unlock()
	if ws.closeSent {
		return errWSClosed
	}
	h := wsFrameHeader{fin: true, op: op, masked: true, length: uint64(len(p))}
	if _, err := io.ReadFull(ws.rand, h.mask[:]); err != nil {
		return fmt.Errorf("websocket write: %w", err)
	}
	buf := wsAppendHeader(make([]byte, 0, 14+len(p)), h)
	for i, c := range p {
		buf = append(buf, c^h.mask[i&3])
	}
	ws.closeSent = op == wsOpClose
	// A browser that stops reading fails the write.
	ws.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := ws.conn.Write(buf); err != nil {
		return fmt.Errorf("websocket write: %w", err)
	}
	return nil
}

// fail sends a close frame with code and returns the protocol error.
func (ws *wsConn) fail(code uint16, format string, a ...any) error {
	ws.writeFrame(wsOpClose, binary.BigEndian.AppendUint16(nil, code))
	return fmt.Errorf("websocket: "+format, a...)
}

// check refuses a frame that may not come now; have is the length of the message so far.
func (ws *wsConn) check(h wsFrameHeader, inMsg bool, have int) error {
	isData := h.op == wsOpText || h.op == wsOpBinary
	isControl := h.op == wsOpClose || h.op == wsOpPing || h.op == wsOpPong
	switch {
	case h.rsv != 0:
		return ws.fail(wsCloseProtocol, "reserved bits set (no extension was agreed)")
	case h.masked:
		return ws.fail(wsCloseProtocol, "masked frame from the server")
	case isControl && (!h.fin || h.length > 125):
		return ws.fail(wsCloseProtocol, "fragmented or long control frame")
	case h.op == wsOpContinuation && !inMsg:
		return ws.fail(wsCloseProtocol, "continuation frame outside a message")
	case isData && inMsg:
		return ws.fail(wsCloseProtocol, "new message inside a fragmented one")
	case !isData && !isControl && h.op != wsOpContinuation:
		return ws.fail(wsCloseProtocol, "unknown opcode %d", h.op)
	case !isControl && h.length > uint64(ws.maxMsg)-uint64(have):
		return ws.fail(wsCloseTooBig, "message longer than %d bytes", ws.maxMsg)
	}
	return nil
}

// control answers a control frame: a ping with a pong, a close with a close.
func (ws *wsConn) control(h wsFrameHeader) error {
	p := make([]byte, h.length)
	if _, err := io.ReadFull(ws.br, p); err != nil {
		return fmt.Errorf("websocket read: %w", err)
	}
	switch h.op {
	case wsOpPing:
		return ws.writeFrame(wsOpPong, p)
	case wsOpClose:
		ws.writeFrame(wsOpClose, p[:min(len(p), 2)]) // echo the code unless we sent ours first
		code := wsCloseNoCode
		if len(p) >= 2 {
			code = int(binary.BigEndian.Uint16(p))
		}
		return fmt.Errorf("%w by peer (%d %s)", errWSClosed, code, p[min(len(p), 2):])
	}
	return nil
}

// readMessage returns the next data message, reassembled, answering control frames.
func (ws *wsConn) readMessage() ([]byte, error) {
	var msg []byte
	inMsg := false
	for {
		h, err := wsReadHeader(ws.br)
		if err != nil {
			return nil, fmt.Errorf("websocket read: %w", err)
		}
		if err := ws.check(h, inMsg, len(msg)); err != nil {
			return nil, err
		}
		if h.op >= wsOpClose {
			if err := ws.control(h); err != nil {
				return nil, err
			}
			continue
		}
		n := len(msg)
		msg = slices.Grow(msg, int(h.length))[:n+int(h.length)]
		if _, err := io.ReadFull(ws.br, msg[n:]); err != nil {
			return nil, fmt.Errorf("websocket read: %w", err)
		}
		inMsg = true
		if h.fin {
			return msg, nil
		}
	}
}

// ---- DevTools protocol client ----------------------------------------------

type cdpMessage struct {
	ID        int64                     `json:"id,omitempty"`
	SessionID string                    `json:"sessionId,omitempty"`
	Method    string                    `json:"method,omitempty"`
	Params    json.RawMessage           `json:"params,omitempty"`
	Result    json.RawMessage           `json:"result,omitempty"`
	Error     *struct{ Message string } `json:"error,omitempty"`
}

// cdpClient sends DevTools commands; it routes replies by id and events by session.
type cdpClient struct {
	ws   *wsConn
	done chan struct{} // closed when the reader stops; err then says why

	mu      sync.Mutex // guards the fields below
	nextID  int64
	pending map[int64]chan cdpMessage
	subs    map[string]func(method string, params json.RawMessage)
	err     error
}

func newCDPClient(ws *wsConn) *cdpClient {
	c := &cdpClient{ws: ws, done: make(chan struct{}), pending: map[int64]chan cdpMessage{},
		subs: map[string]func(string, json.RawMessage){}}
	go c.readLoop() // exits when the websocket closes or fails
	return c
}

func (c *cdpClient) readLoop() {
	data, err := c.ws.readMessage()
	for ; err == nil; data, err = c.ws.readMessage() {
		var m cdpMessage
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		c.mu.Lock()
		ch, fn := c.pending[m.ID], c.subs[m.SessionID]
		delete(c.pending, m.ID)
		c.mu.Unlock()
		if m.ID != 0 && ch != nil {
			ch <- m
		} else if m.ID == 0 && fn != nil {
			fn(m.Method, m.Params) // subscribers only record and signal: they never block
		}
	}
	c.mu.Lock()
	c.err = fmt.Errorf("cdp: connection lost: %w", err)
	c.mu.Unlock()
	close(c.done)
	c.ws.conn.Close()
}

// call sends a command (on a session when session is not "") and decodes its result.
func (c *cdpClient) call(ctx context.Context, session, method string, params, result any) error {
	m := cdpMessage{SessionID: session, Method: method}
	if params != nil {
		m.Params, _ = json.Marshal(params)
	}
	ch := make(chan cdpMessage, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.nextID++
	m.ID = c.nextID
	c.pending[m.ID] = ch
	c.mu.Unlock()
	forget := func() { c.mu.Lock(); delete(c.pending, m.ID); c.mu.Unlock() }
	data, _ := json.Marshal(m)
	if err := c.ws.writeFrame(wsOpText, data); err != nil {
		forget()
		return fmt.Errorf("cdp %s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return fmt.Errorf("cdp %s: %s", method, r.Error.Message)
		} else if result != nil {
			return json.Unmarshal(r.Result, result)
		}
		return nil
	case <-c.done:
		return c.err // set before done was closed
	case <-ctx.Done():
		forget()
		return fmt.Errorf("cdp %s: %w", method, ctx.Err())
	}
}

// subscribe routes a session's events to fn (nil: drops them).
func (c *cdpClient) subscribe(session string, fn func(method string, params json.RawMessage)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs[session] = fn; fn == nil {
		delete(c.subs, session)
	}
}

// ---- the browser ----------------------------------------------------------

// errNoBrowser means ReadDocs has no browser to use and reads over plain HTTP.
var errNoBrowser = errors.New("no browser")

// browserHolder is the server's one Chromium, started on first use and again when it died.
type browserHolder struct {
	tabs chan struct{} // a slot per open tab: pages are heavy on two cores

	mu     sync.Mutex // guards the fields below
	b      *browser
	closed bool
}

type browser struct {
	pid    int
	dir    string // the profile, also the browser's home and temporary directory
	cdp    *cdpClient
	exited chan struct{}   // closed once the process has been waited for
	spare  chan browserTab // a tab opened ahead of the next read
}

// chromeNames are the browsers looked for when CHROME_PATH is not set.
var chromeNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable",
	"chrome", "chrome-headless-shell", "/usr/lib/chromium/chromium-headless-shell",
	"/opt/google/chrome/chrome", "/snap/bin/chromium",
	"/Applications/Chromium.app/Contents/MacOS/Chromium",
	"/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"}

// findChrome returns the browser to run: CHROME_PATH when it is set, else the
// first of chromeNames found; "" when there is none or READDOCS_BROWSER is off.
func findChrome(cfg *config) string {
	names := chromeNames
	if p := cfg.str("CHROME_PATH"); p != "" {
		names = []string{p} // no other browser in its place
	}
	for _, p := range names {
		if path, err := exec.LookPath(p); err == nil && cfg.bool("READDOCS_BROWSER") {
			return path
		}
	}
	return ""
}

// get returns the running browser, starting one when there is none or it died.
func (h *browserHolder) get(ctx context.Context, srv *server) (*browser, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errors.New("browser: server is shutting down")
	} else if h.b != nil && !h.b.dead() {
		return h.b, nil
	} else if h.b != nil {
		srv.log.warnf("readdocs: Chromium (pid %d) stopped; starting a new one", h.b.pid)
		h.b.stop(srv.procs)
		h.b = nil
	}
	path := findChrome(srv.cfg)
	switch {
	case !srv.cfg.bool("READDOCS_BROWSER"):
		return nil, fmt.Errorf("%w: READDOCS_BROWSER is off", errNoBrowser)
	case path == "" && srv.cfg.str("CHROME_PATH") != "":
		chrome := srv.cfg.str("CHROME_PATH")
		return nil, fmt.Errorf("CHROME_PATH %s is not an executable file", chrome)
	case path == "":
		return nil, fmt.Errorf("%w: no Chromium found; set CHROME_PATH", errNoBrowser)
	}
	b, err := startBrowser(ctx, srv, path)
	if err != nil {
		srv.log.warnf("readdocs: %v", err)
		return nil, fmt.Errorf("%w: %v", errNoBrowser, err)
	}
	h.b = b
	return b, nil
}

func (h *browserHolder) close(procs *procTracker) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.b != nil {
		h.b.stop(procs)
		h.b = nil
	}
}

// startBrowser runs Chromium with a fresh profile and connects to the endpoint it prints.
// Chromium writes nothing outside its profile (its home, config, cache and
// temporary directory), which is removed when it stops, and downloads nothing.
func startBrowser(ctx context.Context, srv *server, path string) (*browser, error) {
	t0 := time.Now()
	dir, err := os.MkdirTemp("", "telson-chromium-")
	if err != nil {
		return nil, fmt.Errorf("browser start: %w", err)
	}
	srv.procs.removeAtExit(dir) // even when telson is killed
	args := []string{"--headless", "--disable-dev-shm-usage", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-extensions",
		"--mute-audio",
		"--disable-background-timer-throttling", "--disable-renderer-backgrounding",
		"--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup,Translate,MediaRouter," +
			"OptimizationHints,AutofillServerCommunication",
		"--user-data-dir=" + dir, "--remote-debugging-port=0"}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox") // Chromium refuses to run as root with its sandbox
	}
	cmd := exec.Command(path, append(args, "about:blank")...)
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_CACHE_HOME="+dir,
		"TMPDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	// Linux kills the browser when the thread that started it ends, so a
	// killed telson leaves no browser behind (other systems have the reaper).
	if f := reflect.ValueOf(cmd.SysProcAttr).Elem().FieldByName("Pdeathsig"); f.IsValid() {
		f.Set(reflect.ValueOf(syscall.SIGKILL))
	}
	b := &browser{dir: dir, exited: make(chan struct{}), spare: make(chan browserTab, 1)}
	started := make(chan error, 1)
	// Not cmd.StderrPipe: Wait would close it before the last lines are read.
	pr, pw, err := os.Pipe()
	if err == nil {
		cmd.Stderr = pw
		// The goroutine's thread stays locked so that Pdeathsig fires only when telson dies.
		go func() { // exits when the browser exits
			runtime.LockOSThread()
			err := srv.procs.start(cmd)
			if started <- err; err == nil {
				cmd.Wait()
			}
			close(b.exited)
		}()
		err = <-started
		pw.Close()
	}
	if err != nil {
		pr.Close() // nil-safe
		os.RemoveAll(dir)
		return nil, fmt.Errorf("browser start: %s: %w", path, err)
	}
	b.pid = cmd.Process.Pid
	// found gets the endpoint, or "\x00" and the last stderr line when the browser printed none.
	found := make(chan string, 1)
	go func() { // exits when every browser process has closed stderr
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		last := ""
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "DevTools listening on "); ok {
				found <- u
				io.Copy(io.Discard, pr) // the browser's later output
				return
			} else if sc.Text() != "" && !strings.Contains(sc.Text(), "dbus") {
				last = sc.Text()
			}
		}
		io.Copy(io.Discard, pr) // a line too long for the scanner: keep draining
		found <- "\x00" + last
	}()
	fail := func(format string, a ...any) (*browser, error) {
		b.stop(srv.procs)
		return nil, fmt.Errorf("browser start: "+format, a...)
	}
	var wsURL string
	select {
	case wsURL = <-found:
	case <-ctx.Done():
		return fail("no DevTools endpoint: %w", ctx.Err())
	}
	if tail, ok := strings.CutPrefix(wsURL, "\x00"); ok {
		return fail("%s exited: %s", path, tail)
	}
	maxMsg := max(int64(srv.cfg.int("WS_MAX_MESSAGE_BYTES")), 1<<20)
	ws, err := wsDial(ctx, wsURL, crand.Reader, maxMsg)
	if err != nil {
		return fail("%w", err)
	}
	b.cdp = newCDPClient(ws)
	deny := map[string]any{"behavior": "deny"}
	err = b.cdp.call(ctx, "", "Browser.setDownloadBehavior", deny, nil)
	if err != nil {
		return fail("%w", err)
	}
	ms := time.Since(t0).Milliseconds()
	srv.log.infof("readdocs: started Chromium pid %d (%s) in %d ms", b.pid, path, ms)
	return b, nil
}

// dead reports a browser whose process or connection has ended.
func (b *browser) dead() bool {
	select {
	case <-b.exited:
	case <-b.cdp.done:
	default:
		return false
	}
	return true
}

// stop kills the browser's process group and removes its profile.
func (b *browser) stop(procs *procTracker) {
	syscall.Kill(-b.pid, syscall.SIGKILL) // nothing of it is worth a graceful close
	<-b.exited
	if b.cdp != nil {
		b.cdp.ws.conn.Close()
	}
	procs.forgetIfGone(b.pid)
	os.RemoveAll(b.dir)
}

// ---- ReadDocs ---------------------------------------------------------------

var readDocsTool = toolDef{
	name:  "ReadDocs",
	title: "Read a web page",
	description: `Reads a web page (documentation, an article, any http or https URL) in headless Chromium and returns what a person would see, as markdown by default. Content that JavaScript builds after load is included: the page is read once it has loaded and (if it has scripts) its network has been quiet for half a second.

- format: "markdown" (main content only: menus, headers, footers and sidebars dropped; links absolute), "text" (the visible text of the whole page) or "html" (the page's DOM).
- wait_ms: extra time to wait after load for pages that keep changing (default 0, max 30000).
- The reply starts with the page title and final URL. Long pages come in parts of max_length characters (default 30000); the reply says which start_index gets the next part.
- HTTP errors (404, 500) are reported with the page's content; DNS failures, refused connections, TLS errors, downloads and servers that never answer are errors.
- Without Chromium the page is fetched over plain HTTP (text then comes as markdown), and the reply says so.

Example: {"url": "https://go.dev/doc/effective_go", "max_length": 20000}`,
	input: `{"type":"object","properties":{
		"url":{"type":"string","minLength":1,"description":"The http or https URL to read."},
		"format":{"type":"string","enum":["markdown","text","html"],"description":"markdown (default), text or html."},
		"wait_ms":{"type":"integer","minimum":0,"maximum":30000,"description":"Milliseconds to wait after the page has loaded and gone quiet (default 0)."},
		"max_length":{"type":"integer","minimum":1,"maximum":1000000,"description":"Most characters of content to return (default 30000)."},
		"start_index":{"type":"integer","minimum":0,"description":"Character of the content to start at, to read the next part of a long page (default 0)."}},
		"required":["url"],"additionalProperties":false}`,
	output: `{"type":"object","properties":{
		"url":{"type":"string"},"final_url":{"type":"string","description":"the URL after redirects"},"title":{"type":"string"},
		"status":{"type":"integer","description":"HTTP status of the page; 0 when unknown"},"format":{"type":"string","enum":["markdown","text","html"]},
		"content":{"type":"string","description":"this part of the content"},"truncated":{"type":"boolean","description":"more content follows this part"},
		"next_start_index":{"type":"integer","description":"start_index of the next part, when truncated"},
		"total_length":{"type":"integer","description":"characters of content in all parts"},
		"via":{"type":"string","enum":["chromium","http"]},"notes":{"type":"array","items":{"type":"string"}}},
		"required":["url","final_url","title","status","format","content","truncated","total_length","via"]}`,
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

	body   string // the page as read: outerHTML, innerText, or the response body
	source string // the main document's HTML as the server sent it ("" when unknown)
	isText bool   // body is text already (innerText, or not HTML)
}

// pageCap bounds what is taken from a page: characters from the browser, bytes over HTTP.
const pageCap = 10 << 20

func runReadDocs(ctx context.Context, c *toolCall) toolResult {
	a := readDocsArgs{Format: "markdown", MaxLength: 30000}
	if err := json.Unmarshal(c.args, &a); err != nil {
		return errorResult("ReadDocs: invalid arguments: %v", err)
	}
	o, err := c.s.srv.readPage(ctx, a)
	if err != nil {
		return errorResult("ReadDocs: %v", err)
	}
	o.URL, o.Format = a.URL, a.Format
	content := o.body
	if !o.isText {
		title, md := htmlToMarkdown(o.body, o.FinalURL)
		if o.Title = cmp.Or(o.Title, title); a.Format != "html" {
			content = md
		}
	}
	runes := []rune(content)
	end := min(len(runes), a.StartIndex+a.MaxLength)
	o.TotalLength, o.Truncated = len(runes), end < len(runes)
	var b strings.Builder
	b.WriteString(cmp.Or(o.Title, "(no title)") + "\n" + o.FinalURL + "\n")
	if o.Status >= 400 {
		fmt.Fprintf(&b, "HTTP status %d\n", o.Status)
	}
	for _, n := range o.Notes {
		b.WriteString("Note: " + n + "\n")
	}
	if a.StartIndex > 0 && a.StartIndex >= o.TotalLength {
		b.WriteString("\n<error>No more content available.</error>")
	} else {
		o.Content = string(runes[a.StartIndex:end])
		b.WriteString("\n" + o.Content)
		if o.Truncated {
			o.NextStartIndex = end
			fmt.Fprintf(&b, "\n\n<error>Content truncated. Call the ReadDocs tool with a start_index of %d to get more content.</error>", o.NextStartIndex)
		}
	}
	res := textResult(b.String())
	res.structured = o
	return res
}

// readPage reads the page through Chromium, or over plain HTTP when there is no browser.
func (srv *server) readPage(ctx context.Context, a readDocsArgs) (*readDocsOut, error) {
	u, err := url.Parse(a.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("only http and https URLs can be read, not %q", a.URL)
	}
	timeout := time.Duration(srv.cfg.int("READDOCS_TIMEOUT_MS")+a.WaitMS) * time.Millisecond
	b, err := srv.startedBrowser(ctx)
	if errors.Is(err, errNoBrowser) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		why := strings.TrimPrefix(err.Error(), errNoBrowser.Error()+": ")
		pg, err := fetchPlain(ctx, u.String())
		if err == nil {
			pg.Notes = append([]string{"Read without a browser (" + why + "): content that scripts build may be missing."}, pg.Notes...)
		}
		return pg, err
	} else if err != nil {
		return nil, err
	}
	pg, err := srv.readInBrowser(ctx, b, u.String(), a, timeout)
	// The browser died under us: once more with a new one.
	if err != nil && b.dead() && ctx.Err() == nil {
		if b, err = srv.startedBrowser(ctx); err == nil {
			pg, err = srv.readInBrowser(ctx, b, u.String(), a, timeout)
		}
	}
	return pg, err
}

// startedBrowser returns the browser, started if need be (not counted in a page's time).
func (srv *server) startedBrowser(ctx context.Context) (*browser, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return srv.browser.get(ctx, srv)
}

// readInBrowser reads the page in a tab of b, within timeout.
func (srv *server) readInBrowser(ctx context.Context, b *browser, pageURL string, a readDocsArgs,
	timeout time.Duration) (*readDocsOut, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case srv.browser.tabs <- struct{}{}:
		defer func() { <-srv.browser.tabs }()
	case <-ctx.Done():
		return nil, fmt.Errorf("no free browser tab within %s", timeout)
	}
	idle := time.Duration(srv.cfg.int("READDOCS_IDLE_MS")) * time.Millisecond
	return b.read(ctx, pageURL, a.Format, idle, time.Duration(a.WaitMS)*time.Millisecond, timeout)
}

// Reading waits for DOMContentLoaded, then for readSettle without requests
// to the page's own site (at most READDOCS_IDLE_MS): the content is there by
// then, and what other hosts load (ads, trackers, widgets) never holds it.
const readSettle = 100 * time.Millisecond

// readBlockedHosts are ad, tracker and cookie-banner hosts: a reader never needs them.
var readBlockedHosts = []string{"doubleclick.net", "googlesyndication.com", "googletagmanager.com",
	"googletagservices.com", "google-analytics.com", "adservice.google.", "amazon-adsystem.com",
	"facebook.net", "scorecardresearch.com", "hotjar.com", "taboola.com", "outbrain.com", "criteo.",
	"adnxs.com", "chartbeat.", "quantserve.com", "cookielaw.org", "cookiebot.com"}

// readPaused is what the browser pauses (to refuse it, or let it through):
// every document, what a reader never needs, and stylesheets.
func readPaused() []map[string]string {
	var patterns []map[string]string
	for _, t := range []string{"Document", "Image", "Font", "Media", "Stylesheet"} {
		patterns = append(patterns, map[string]string{"resourceType": t})
	}
	for _, h := range readBlockedHosts {
		patterns = append(patterns, map[string]string{"urlPattern": "*" + h + "*"})
	}
	return patterns
}

// siteOf returns a URL's origin and site (its host's last two labels): the
// page may move only within its origin, and only its site holds the read.
func siteOf(rawURL string) (origin, site string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", ""
	}
	labels := strings.Split(u.Hostname(), ".")
	return u.Scheme + "://" + u.Host, strings.Join(labels[max(0, len(labels)-2):], ".")
}

// tabState is what a tab's events have said; the reader goroutine writes it.
type tabState struct {
	changed chan struct{} // a token after every change
	frame   string        // the main frame's id (the target's)
	site    string        // the site of the URL asked for
	styles  bool          // stylesheets are let through: format "text" reads the layout

	mu        sync.Mutex           // guards the fields below
	loader    string               // the main frame's current document
	dcl       map[string]time.Time // by navigation (loader id): when DOMContentLoaded fired
	inflight  map[string]bool      // request ids that hold the read
	lastNet   time.Time            // when one of them last started or ended
	docID     string               // request id of the page's own response
	docOrigin string               // and its origin
	moved     string               // where the page's scripts tried to go, refused
}

// tabEvent is the part of a tab's events that tabState reads.
type tabEvent struct {
	Name, LoaderID, RequestID, FrameID string
	Type, ResourceType                 string
	Request, Response                  struct{ URL string }
}

// event records what a tab's event says and returns the command that
// answers it, if any: dialogs are dismissed, paused requests refused or let through.
func (ts *tabState) event(method string, params json.RawMessage) (string, map[string]any) {
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
		if ts.blocks(e) {
			reply = "Fetch.failRequest"
			args["errorReason"] = "Aborted"
		}
	case "Page.lifecycleEvent":
		ts.lifecycle(e)
	case "Network.requestWillBeSent":
		ts.requestStarted(e)
	case "Network.responseReceived":
		if e.Type == "Document" && e.FrameID == ts.frame && ts.docID == "" {
			ts.docID = e.RequestID
			ts.docOrigin, _ = siteOf(e.Response.URL)
		}
	case "Network.loadingFinished", "Network.loadingFailed":
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
	return reply, args
}

func (ts *tabState) lifecycle(e tabEvent) {
	if e.FrameID != ts.frame {
		return
	}
	_, isNav := ts.dcl[e.LoaderID] // not the first about:blank
	switch {
	case e.Name == "init":
		ts.loader = e.LoaderID
	case e.Name == "DOMContentLoaded" && isNav:
		ts.dcl[e.LoaderID] = time.Now()
	case e.Name == "load":
		ts.lastNet = time.Now() // scripts often fetch content on load: a settle from it too
	}
}

func (ts *tabState) requestStarted(e tabEvent) {
	if e.Type == "Document" && e.FrameID == ts.frame {
		ts.dcl[e.LoaderID] = time.Time{}
	}
	_, site := siteOf(e.Request.URL)
	longLived := e.Type == "EventSource" || e.Type == "WebSocket"
	if !longLived && site == ts.site {
		ts.inflight[e.RequestID] = true
		ts.lastNet = time.Now()
	}
}

// blocks says whether a request the browser paused is refused: all but the
// page itself (and stylesheets when wanted), and moves of the page to another
// origin once it has come.
func (ts *tabState) blocks(e tabEvent) bool {
	switch {
	case e.ResourceType == "Stylesheet" && ts.styles:
		return false
	case e.ResourceType != "Document" || e.FrameID != ts.frame:
		return true
	case ts.docOrigin == "" || strings.HasPrefix(e.Request.URL, ts.docOrigin+"/"):
		return false
	}
	ts.moved = e.Request.URL
	return true
}

// ready says whether the page can be read, and how soon to look again without an event.
func (ts *tabState) ready(idleCap time.Duration) (bool, time.Duration) {
	dcl := ts.dcl[ts.loader]
	if dcl.IsZero() {
		// The HTML has all come but a script from another site holds the parser.
		quiet := time.Since(ts.lastNet)
		return ts.docID != "" && len(ts.inflight) == 0 && quiet >= idleCap, idleCap - quiet
	}
	left := idleCap - time.Since(dcl)
	quiet := time.Since(dcl)
	if ts.lastNet.After(dcl) {
		quiet = time.Since(ts.lastNet)
	}
	if len(ts.inflight) > 0 {
		return left <= 0, left
	}
	return quiet >= readSettle || left <= 0, min(readSettle-quiet, left)
}

// wait waits until cond holds (false when ctx ends first); cond runs under
// ts.mu and says how soon to look again without a new event (0: at the next).
func (ts *tabState) wait(ctx context.Context, cond func() (bool, time.Duration)) bool {
	for {
		ts.mu.Lock()
		ok, again := cond()
		ts.mu.Unlock()
		if ok {
			return true
		}
		t := time.NewTimer(cmp.Or(max(again, 0), time.Hour)) // 0: until the next event
		select {
		case <-ts.changed:
		case <-t.C:
		case <-ctx.Done():
			return false
		}
		t.Stop()
	}
}

// browserTab is an open tab and its DevTools session.
type browserTab struct{ targetID, sid string }

// newTab opens a tab with the events and pauses a read needs; nobody hears its events yet.
func (b *browser) newTab(ctx context.Context) (browserTab, error) {
	var t struct{ TargetID, SessionID string }
	err := b.cdp.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &t)
	if err != nil {
		return browserTab{}, err
	}
	attach := map[string]any{"targetId": t.TargetID, "flatten": true}
	err = b.cdp.call(ctx, "", "Target.attachToTarget", attach, &t)
	tab := browserTab{t.TargetID, t.SessionID}
	if err != nil {
		b.closeTab(tab)
		return browserTab{}, err
	}
	setup := map[string]any{
		"Page.enable":                    nil,
		"Page.setLifecycleEventsEnabled": map[string]any{"enabled": true},
		"Network.enable":                 nil,
		"Fetch.enable":                   map[string]any{"patterns": readPaused()},
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
		b.closeTab(tab)
		return browserTab{}, err
	}
	return tab, nil
}

// tab returns the tab opened ahead, or a new one.
func (b *browser) tab(ctx context.Context) (browserTab, error) {
	select {
	case t := <-b.spare:
		return t, nil
	default:
	}
	return b.newTab(ctx)
}

// openSpare opens a tab for the next read; it returns when the tab is open or failed.
func (b *browser) openSpare() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := b.newTab(ctx)
	if err != nil {
		return
	}
	select {
	case b.spare <- t:
	default:
		b.closeTab(t) // another read opened one first
	}
}

// closeTab closes a tab without waiting for it.
func (b *browser) closeTab(t browserTab) {
	b.cdp.subscribe(t.sid, nil)
	go func() { // exits when Chrome answers or after two seconds
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		b.cdp.call(ctx, "", "Target.closeTarget", map[string]any{"targetId": t.targetID}, nil)
	}()
}

// read loads pageURL in a new tab and reads it once its content is there (see readSettle).
func (b *browser) read(ctx context.Context, pageURL, format string,
	idleCap, settle, timeout time.Duration) (*readDocsOut, error) {
	t0 := time.Now()
	tab, err := b.tab(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		b.closeTab(tab)
		go b.openSpare() // for the next read
	}()
	sid := tab.sid
	_, site := siteOf(pageURL)
	ts := &tabState{changed: make(chan struct{}, 1), frame: tab.targetID, site: site,
		styles: format == "text", dcl: map[string]time.Time{}, inflight: map[string]bool{}}
	b.cdp.subscribe(sid, func(method string, params json.RawMessage) {
		if reply, args := ts.event(method, params); reply != "" {
			// The goroutine exits when Chrome answers or the connection drops.
			go b.cdp.call(context.Background(), sid, reply, args, nil)
		}
	})
	// The waits end early enough to leave time to read what the page shows.
	dl, _ := ctx.Deadline()
	waitCtx, cancel := context.WithDeadline(ctx, dl.Add(-min(5*time.Second, timeout/4)))
	defer cancel()
	var nav struct {
		ErrorText  string
		IsDownload bool
	}
	err = b.cdp.call(waitCtx, sid, "Page.navigate", map[string]any{"url": pageURL}, &nav)
	switch {
	case err != nil && waitCtx.Err() != nil:
		took := time.Since(t0).Round(time.Millisecond)
		return nil, fmt.Errorf("%s sent no response within %s", pageURL, took)
	case err != nil:
		return nil, err
	case nav.IsDownload:
		return nil, fmt.Errorf("%s is a download, not a page", pageURL)
	case nav.ErrorText != "":
		return nil, fmt.Errorf("loading %s failed: %s", pageURL, nav.ErrorText)
	}
	pg := &readDocsOut{Via: "chromium"}
	// A page without scripts (or a refresh) is read as soon as it is parsed.
	ts.wait(waitCtx, func() (bool, time.Duration) {
		ok, again := ts.ready(idleCap)
		return ok || !ts.dcl[ts.loader].IsZero(), again
	})
	var scripts struct{ Result struct{ Value int } }
	count := `document.querySelectorAll('script, meta[http-equiv="refresh" i]').length`
	params := map[string]any{"expression": count, "returnByValue": true}
	b.cdp.call(waitCtx, sid, "Runtime.evaluate", params, &scripts)
	if scripts.Result.Value > 0 {
		ts.wait(waitCtx, func() (bool, time.Duration) { return ts.ready(idleCap) })
	}
	ts.mu.Lock()
	loading := ts.dcl[ts.loader].IsZero()
	ts.mu.Unlock()
	if loading {
		took := time.Since(t0).Round(time.Millisecond)
		pg.Notes = append(pg.Notes, fmt.Sprintf("The page had not finished loading after %s; "+
			"this is what it showed then.", took))
	}
	until := time.Now().Add(settle)
	ts.wait(ctx, func() (bool, time.Duration) { return time.Until(until) <= 0, time.Until(until) })
	contentType, err := b.evaluate(ctx, sid, pg, format)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%s did not answer within %s (a script may be busy)",
			pageURL, timeout)
	} else if err != nil {
		return nil, err
	} else if !readableType.MatchString(contentType) {
		return nil, fmt.Errorf("%s is %s, not a page ReadDocs can read", pageURL, contentType)
	}
	ts.mu.Lock()
	moved := ts.moved
	ts.mu.Unlock()
	if moved != "" {
		note := "The page tried to go on to " + moved + "; this is the page itself."
		pg.Notes = append(pg.Notes, note)
	}
	pg.source = b.source(ctx, sid, ts)
	return pg, nil
}

// source returns the page's HTML as the server sent it, up to pageCap ("" when unknown).
func (b *browser) source(ctx context.Context, sid string, ts *tabState) string {
	ts.mu.Lock()
	docID := ts.docID
	arriving := ts.inflight[docID]
	ts.mu.Unlock()
	var src struct {
		Body          string
		Base64Encoded bool
	}
	if docID == "" || arriving {
		return ""
	}
	err := b.cdp.call(ctx, sid, "Network.getResponseBody", map[string]any{"requestId": docID}, &src)
	if err != nil || src.Base64Encoded {
		return ""
	}
	return strings.ToValidUTF8(src.Body[:min(len(src.Body), pageCap)], "")
}

// evaluate reads the page's DOM (its text for format "text", or when it is
// not HTML) into pg and returns the page's content type.
func (b *browser) evaluate(ctx context.Context, sid string, pg *readDocsOut,
	format string) (string, error) {
	expr := fmt.Sprintf(`(() => {
		const h = document.documentElement, b = document.body, type = document.contentType;
		const text = %t || !type.includes('html');
		const s = text ? (b ? b.innerText : '') : (h ? h.outerHTML : '');
		const nav = performance.getEntriesByType('navigation')[0];
		return {body: s.slice(0, %d), full: s.length, title: document.title, url: location.href,
			type, text, status: nav ? nav.responseStatus : 0}; })()`, format == "text", pageCap)
	var ev struct {
		Result struct {
			Value struct {
				Body, Title, URL, Type string
				Full, Status           int
				Text                   bool
			}
		}
		ExceptionDetails *struct{ Text string }
	}
	params := map[string]any{"expression": expr, "returnByValue": true}
	err := b.cdp.call(ctx, sid, "Runtime.evaluate", params, &ev)
	if err != nil {
		return "", err
	} else if ev.ExceptionDetails != nil {
		return "", fmt.Errorf("reading the page: %s", ev.ExceptionDetails.Text)
	}
	v := ev.Result.Value
	pg.body = v.Body
	pg.Title = v.Title
	pg.FinalURL = v.URL
	pg.Status = v.Status
	pg.isText = v.Text
	if v.Full > pageCap {
		pg.Notes = append(pg.Notes, fmt.Sprintf("Only the first %d of %d characters of the page "+
			"were read.", pageCap, v.Full))
	}
	return v.Type, nil
}

// readableType matches a content type that reads as text.
var readableType = regexp.MustCompile(`(?i)^text/|html|xml|json|javascript`)

// windows1252 maps bytes 0x80-0x9f; latin-1 labels mean this encoding on the web.
var windows1252 = []rune("€\u0081‚ƒ„…†‡ˆ‰Š‹Œ\u008dŽ\u008f\u0090‘’“”•–—˜™š›œ\u009džŸ")

var metaCharset = regexp.MustCompile(`(?i)<meta[^>]+charset=["']?\s*([a-z0-9_-]+)`)

// fetchPlain GETs the page: 10 redirects, pageCap bytes, UTF-8 or Latin-1/Windows-1252.
func fetchPlain(ctx context.Context, pageURL string) (*readDocsOut, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", pageURL, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	ua := "Mozilla/5.0 (compatible; telson; +https://github.com/telsonhq/telson)"
	req.Header.Set("User-Agent", ua)
	resp, err := http.DefaultClient.Do(req) // the default client stops after 10 redirects
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, pageCap+1))
	if err != nil {
		return nil, fmt.Errorf("fetch %s: reading the body: %w", pageURL, err)
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
	_, params, _ := mime.ParseMediaType(ct)
	charset, isHTML := strings.ToLower(params["charset"]), strings.Contains(strings.ToLower(ct), "html")
	if m := metaCharset.FindSubmatch(raw[:min(len(raw), 2048)]); charset == "" && isHTML && m != nil {
		charset = strings.ToLower(string(m[1]))
	}
	pg.body, pg.isText = strings.ToValidUTF8(strings.TrimPrefix(string(raw), "\ufeff"), "\ufffd"), !isHTML
	switch charset {
	case "", "utf-8", "utf8", "us-ascii", "ascii":
	case "iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "windows-1252", "cp1252", "x-cp1252":
		rs := make([]rune, len(raw))
		for i, c := range raw {
			rs[i] = rune(c)
			if c >= 0x80 && c < 0xa0 {
				rs[i] = windows1252[c-0x80]
			}
		}
		pg.body = string(rs)
	default:
		pg.Notes = append(pg.Notes, "The page's charset "+charset+" is not supported; it was read as UTF-8.")
	}
	return pg, nil
}

// ---- WebSearch ------------------------------------------------------------
//
// Many search engines asked at once, every answer classified, parsed,
// cleaned, merged and ranked, and every engine's fate reported. Rules:
//   - an engine is one row of searchEngines: a request template and a parser;
//     the HTML engines' parsers are recipes of selectors;
//   - every answer is classified (status, captcha and consent markers) before
//     it is parsed; an engine that was rate-limited, blocked or shown a captcha
//     rests for SEARCH_BACKOFF_MS, for every session, instead of being asked;
//   - all engines run at once, each under SEARCH_TIMEOUT_MS, all under one
//     overall deadline; cancelling the call stops every request;
//   - bodies are capped at searchMaxBody; titles and snippets are plain text.

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
