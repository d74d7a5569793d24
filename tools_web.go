// tools_web.go holds the web tools: ReadDocs (a page read through headless
// Chromium over the DevTools protocol and our own RFC 6455 websocket client,
// with a net/http fallback) and WebSearch (many engines at once, merged), and
// the HTML handling both share: a small tokenizer and tree builder.
//
// Rules:
//   - ReadDocs reads http and https URLs only;
//   - every page and every engine reply is untrusted: sizes are capped,
//     nesting is bounded, nothing panics on malformed markup;
//   - the browser is one process group, started lazily, reused, and killed
//     with the server.
package main

import (
	"html"
	"strings"
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

// maxHTMLDepth bounds nesting: deeper elements become children of the deepest kept one.
const maxHTMLDepth = 256

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

// parseHTML builds a tree from src the forgiving way browsers do, in
// simplified form: implied end tags for p, li, dt, dd, tr, td, th and option;
// stray end tags are ignored; unclosed elements end with their parent.
func parseHTML(src string) *htmlNode {
	root := &htmlNode{tag: "#root"}
	stack := []*htmlNode{root}
	cur := func() *htmlNode { return stack[len(stack)-1] }
	appendText := func(t string) {
		if t == "" {
			return
		}
		p := cur()
		if n := len(p.children); n > 0 && p.children[n-1].tag == "" {
			p.children[n-1].text += t
			return
		}
		p.children = append(p.children, &htmlNode{text: t, parent: p})
	}
	// closeTo pops up to and including the nearest open element named one of
	// names, unless an element named in stop comes first.
	closeTo := func(names, stop string) {
		for i := len(stack) - 1; i > 0; i-- {
			t := stack[i].tag
			if strings.Contains(stop, " "+t+" ") {
				return
			}
			if strings.Contains(names, " "+t+" ") {
				stack = stack[:i]
				return
			}
		}
	}
	z := htmlTokenizer{s: src}
	for {
		tok, ok := z.next()
		if !ok {
			break
		}
		switch tok.kind {
		case tokText:
			appendText(tok.text)
		case tokStart:
			switch {
			case tok.name == "li":
				closeTo(" li ", " ul ol menu table ")
			case tok.name == "dt" || tok.name == "dd":
				closeTo(" dt dd ", " dl table ")
			case tok.name == "tr":
				closeTo(" tr ", " table ")
			case tok.name == "td" || tok.name == "th":
				closeTo(" td th ", " tr table ")
			case tok.name == "option":
				closeTo(" option ", " select ")
			}
			if htmlClosesP[tok.name] {
				closeTo(" p ", " div section article main table ul ol li blockquote td th button ")
			}
			n := &htmlNode{tag: tok.name, attrs: tok.attrs, parent: cur()}
			cur().children = append(cur().children, n)
			if tok.raw != "" {
				n.children = []*htmlNode{{text: tok.raw, parent: n}}
			}
			if !htmlVoid[tok.name] && !tok.selfClosing && !htmlRawText[tok.name] && len(stack) < maxHTMLDepth {
				stack = append(stack, n)
			}
		case tokEnd:
			for i := len(stack) - 1; i > 0; i-- {
				if stack[i].tag == tok.name {
					stack = stack[:i]
					break
				}
			}
		}
	}
	return root
}

type htmlTokenKind int

const (
	tokText htmlTokenKind = iota
	tokStart
	tokEnd
)

type htmlToken struct {
	kind        htmlTokenKind
	name        string // lowercase tag name
	attrs       []htmlAttr
	selfClosing bool
	text        string // decoded text
	raw         string // a raw-text element's content (decoded for title and textarea)
}

// htmlTokenizer splits HTML into text, start tags and end tags; comments,
// doctypes and processing instructions are dropped.
type htmlTokenizer struct {
	s   string
	pos int
}

func (z *htmlTokenizer) next() (htmlToken, bool) {
	s := z.s
	for z.pos < len(s) {
		if s[z.pos] != '<' {
			end := strings.IndexByte(s[z.pos:], '<')
			if end < 0 {
				end = len(s) - z.pos
			}
			t := s[z.pos : z.pos+end]
			z.pos += end
			return htmlToken{kind: tokText, text: html.UnescapeString(t)}, true
		}
		rest := s[z.pos:]
		switch {
		case strings.HasPrefix(rest, "<!--"):
			end := strings.Index(rest[4:], "-->")
			if end < 0 {
				z.pos = len(s)
			} else {
				z.pos += 4 + end + 3
			}
		case strings.HasPrefix(rest, "<![CDATA["):
			end := strings.Index(rest, "]]>")
			if end < 0 {
				end = len(rest)
			}
			z.pos += min(end+3, len(rest))
			return htmlToken{kind: tokText, text: rest[9:end]}, true
		case strings.HasPrefix(rest, "<!") || strings.HasPrefix(rest, "<?"):
			end := strings.IndexByte(rest, '>')
			if end < 0 {
				z.pos = len(s)
			} else {
				z.pos += end + 1
			}
		case len(rest) > 2 && rest[1] == '/' && isASCIILetter(rest[2]):
			end := strings.IndexByte(rest, '>')
			if end < 0 {
				z.pos = len(s)
				return htmlToken{}, false
			}
			name := rest[2:end]
			if i := strings.IndexAny(name, " \t\r\n\f/"); i >= 0 {
				name = name[:i]
			}
			z.pos += end + 1
			return htmlToken{kind: tokEnd, name: strings.ToLower(name)}, true
		case len(rest) > 1 && isASCIILetter(rest[1]):
			return z.startTag(), true
		default: // a lone '<' is text
			z.pos++
			return htmlToken{kind: tokText, text: "<"}, true
		}
	}
	return htmlToken{}, false
}

func isASCIILetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }

// startTag reads a start tag at z.pos, its attributes and, for raw-text
// elements, everything up to the matching end tag.
func (z *htmlTokenizer) startTag() htmlToken {
	s := z.s
	i := z.pos + 1
	j := i
	for j < len(s) && !strings.ContainsRune(" \t\r\n\f/>", rune(s[j])) {
		j++
	}
	tok := htmlToken{kind: tokStart, name: strings.ToLower(s[i:j])}
	i = j
	for i < len(s) {
		for i < len(s) && strings.ContainsRune(" \t\r\n\f", rune(s[i])) {
			i++
		}
		if i >= len(s) {
			break
		}
		if s[i] == '>' {
			i++
			break
		}
		if s[i] == '/' {
			if i+1 < len(s) && s[i+1] == '>' {
				tok.selfClosing = true
				i += 2
				break
			}
			i++
			continue
		}
		k := i
		for k < len(s) && !strings.ContainsRune(" \t\r\n\f/>=", rune(s[k])) {
			k++
		}
		if k == i { // a stray '=': skip it
			k++
		}
		key := strings.ToLower(s[i:k])
		i = k
		for i < len(s) && strings.ContainsRune(" \t\r\n\f", rune(s[i])) {
			i++
		}
		val := ""
		if i < len(s) && s[i] == '=' {
			i++
			for i < len(s) && strings.ContainsRune(" \t\r\n\f", rune(s[i])) {
				i++
			}
			if i < len(s) && (s[i] == '"' || s[i] == '\'') {
				q := s[i]
				end := strings.IndexByte(s[i+1:], q)
				if end < 0 {
					end = len(s) - i - 1
				}
				val = s[i+1 : i+1+end]
				i = min(i+1+end+1, len(s))
			} else {
				k = i
				for k < len(s) && !strings.ContainsRune(" \t\r\n\f>", rune(s[k])) {
					k++
				}
				val = s[i:k]
				i = k
			}
		}
		if len(tok.attrs) < 64 {
			tok.attrs = append(tok.attrs, htmlAttr{key, html.UnescapeString(val)})
		}
	}
	z.pos = i
	if htmlRawText[tok.name] && !tok.selfClosing {
		end := indexFold(s[z.pos:], "</"+tok.name)
		if end < 0 {
			end = len(s) - z.pos
		}
		tok.raw = s[z.pos : z.pos+end]
		if tok.name == "title" || tok.name == "textarea" {
			tok.raw = html.UnescapeString(tok.raw)
		}
		z.pos += end
		if gt := strings.IndexByte(s[z.pos:], '>'); gt >= 0 {
			z.pos += gt + 1
		} else {
			z.pos = len(s)
		}
	}
	return tok
}

// indexFold is strings.Index for an ASCII needle, ignoring case.
func indexFold(s, needle string) int {
	n := len(needle)
	for i := 0; i+n <= len(s); i++ {
		if strings.EqualFold(s[i:i+n], needle) {
			return i
		}
	}
	return -1
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
	for _, c := range strings.Fields(n.attr("class")) {
		if c == class {
			return true
		}
	}
	return false
}

// find returns the first node below n (depth first) that match accepts, or nil.
func (n *htmlNode) find(match func(*htmlNode) bool) *htmlNode {
	for _, c := range n.children {
		if match(c) {
			return c
		}
		if f := c.find(match); f != nil {
			return f
		}
	}
	return nil
}

// findAll returns every node below n that match accepts, in document order;
// it does not look inside a node it returns.
func (n *htmlNode) findAll(match func(*htmlNode) bool) []*htmlNode {
	var out []*htmlNode
	var walk func(*htmlNode)
	walk = func(p *htmlNode) {
		for _, c := range p.children {
			if match(c) {
				out = append(out, c)
				continue
			}
			walk(c)
		}
	}
	walk(n)
	return out
}

// textContent is the text below n with runs of white space folded to one space.
func (n *htmlNode) textContent() string {
	var b strings.Builder
	var walk func(*htmlNode)
	walk = func(p *htmlNode) {
		if p.tag == "" {
			b.WriteString(p.text)
			return
		}
		if p.tag == "script" || p.tag == "style" {
			return
		}
		for _, c := range p.children {
			walk(c)
		}
		if p.tag == "br" || p.tag == "p" || p.tag == "div" || p.tag == "li" {
			b.WriteByte(' ')
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}
