package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadDocsExtractRules: one case per extraction rule, on small pages.
func TestReadDocsExtractRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, file string
		want, drop []string
	}{
		// The article (or main) around the text comes whole: headline, deck, lead photo.
		{"article whole", "deck", []string{"# Harbour seals return to the estuary", "After forty years away"}, nil},
		// So does a parent holding only the article and its header.
		{"header beside the article", "header", []string{"# Nobel laureate warns",
			"## The journalist said it would mean the end", "as long as he could."},
			[]string{"Most read", "Home"}},
		// A long heading before furniture is a deck, not the furniture's title.
		{"long heading kept", "deck", []string{"## After forty years away"}, []string{"Share", "Tweet"}},
		// A long caption is text; a short one (a photo credit) is not, nor the
		// description of an image beside a caption.
		{"captions", "deck", []string{"The whole story began"}, []string{"A pup resting", "A seal on a sandbank"}},
		// A paragraph that is an e-mail address is text, not a teaser link.
		{"mailto", "deck", []string{"[wardens@coast.example](mailto:wardens@coast.example)"}, nil},
		// Class words compound with a tail: licenceInfo names furniture.
		{"info tail", "deck", nil, []string{"protected by copyright"}},
		// Headings with nothing under them go.
		{"empty headings", "deck", []string{"by the end of the year."}, []string{"Tags", "Latest"}},
		// Blocks named as comments that hold nearly all the page are its text.
		{"live commentary", "live", []string{"Full time at the Moustoir", "The corner comes to nothing",
			"Kick-off!"}, []string{"All rights reserved", "Home"}},
		// Furniture-named blocks beside an article still go.
		{"comments beside an article", "article", []string{"For the first time in forty years"},
			[]string{"wonderful news"}},
	}
	for _, tc := range cases {
		src, err := os.ReadFile("testdata/readdocs/extract/" + tc.file + ".html")
		if err != nil {
			t.Fatal(err)
		}
		md := htmlToMarkdown(string(src), "https://example.com/page", 1<<20, false).text
		for _, w := range tc.want {
			if !strings.Contains(md, w) {
				t.Errorf("%s: lacks %q:\n%s", tc.name, w, md)
			}
		}
		for _, d := range tc.drop {
			if strings.Contains(md, d) {
				t.Errorf("%s: keeps %q:\n%s", tc.name, d, md)
			}
		}
	}
}

// TestReadDocsHeadingEnd: a heading's end tag ends any open heading, as in browsers.
func TestReadDocsHeadingEnd(t *testing.T) {
	t.Parallel()
	src := `<h1>Title</h1><h2>The deck of the story, closed by the wrong end tag</h3>` +
		`<p>The first paragraph of the story follows the deck.</p>`
	md := htmlToMarkdown(src, "https://example.com/", 1<<20, false).text
	want := "# Title\n\n## The deck of the story, closed by the wrong end tag\n\n" +
		"The first paragraph of the story follows the deck."
	if md != want {
		t.Errorf("got:\n%s\nwant:\n%s", md, want)
	}
}

// TestReadDocsEmptyHeadingsCode: lines in code blocks are not headings, and a
// page of headings only keeps them.
func TestReadDocsEmptyHeadingsCode(t *testing.T) {
	t.Parallel()
	code := "## Setup\n\n```sh\n# install\n\n## done\n```"
	if got := mdDropEmptyHeadings(code); got != code {
		t.Errorf("code block changed:\n%s", got)
	}
	if got := mdDropEmptyHeadings("# Not found"); got != "# Not found" {
		t.Errorf("lone heading: %q", got)
	}
	if got := mdDropEmptyHeadings("# A\n\ntext\n\n## Share\n\n# B\n\nmore"); got != "# A\n\ntext\n\n# B\n\nmore" {
		t.Errorf("empty heading kept: %q", got)
	}
}
