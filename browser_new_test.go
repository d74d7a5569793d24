// browser_new_test.go tests how ReadDocs drives Chromium: a page is read as
// soon as its content is there whatever its subresources do, scripts cannot
// move the reader to another page, nothing is written to disk, and a
// CHROME_PATH that is not there is an error.
package main

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// browserSites serves the test pages on 127.0.0.1 and a third-party host on
// localhost whose resources never answer (but /elsewhere, a page).
func browserSites(t *testing.T) (site, other *httptest.Server) {
	t.Helper()
	stop := make(chan struct{})
	hang := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}
	otherMux := http.NewServeMux()
	otherMux.HandleFunc("/", hang)
	otherMux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<html><head><title>Elsewhere</title></head><body><p>Another page.</p></body></html>")
	})
	other = httptest.NewServer(otherMux)
	other.URL = strings.Replace(other.URL, "127.0.0.1", "localhost", 1) // another site
	mux := http.NewServeMux()
	page := func(title, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, "<html><head><title>"+title+"</title></head><body>"+body+"</body></html>")
		}
	}
	mux.HandleFunc("/never", hang)
	mux.HandleFunc("/stalls", page("Stalls", `<p>Article text.</p><img src="/never"><img src="`+other.URL+`/ad.png">
<script async src="`+other.URL+`/tracker.js"></script><iframe src="`+other.URL+`/frame"></iframe>
<script>fetch('`+other.URL+`/beacon'); new Image().src = '/never?pixel'</script>`))
	mux.HandleFunc("/endless", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<html><head><title>Endless</title></head><body><p>First part.</p>"+strings.Repeat(" ", 2048))
		w.(http.Flusher).Flush()
		hang(w, r)
	})
	mux.HandleFunc("/moves", page("Moves", `<p>Original article.</p><script>location.href = '`+other.URL+`/elsewhere'</script>`))
	mux.HandleFunc("/upgrades", page("Upgrades", `<p>Plain article.</p><script>location.protocol = 'https:'</script>`))
	mux.HandleFunc("/rewrites", page("Rewrites", `<p>Served text.</p><script>document.body.innerHTML = '<p>Built text.</p>'</script>`))
	mux.HandleFunc("/download", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Disposition", `attachment; filename="../../.bashrc"`)
		io.WriteString(w, "echo pwned")
	})
	mux.HandleFunc("/file.bin", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(make([]byte, 100))
	})
	mux.HandleFunc("/clicks", page("Clicks", `<p>A page that downloads.</p><a id="a" href="/download" download="x.sh">get</a>
<script>document.getElementById('a').click(); location.href = '/file.bin'</script>`))
	site = httptest.NewServer(mux)
	t.Cleanup(func() {
		close(stop)
		site.Close()
		other.Close()
	})
	return site, other
}

// browserRead calls ReadDocs and returns its text, its structured content and how long it took.
func browserRead(t *testing.T, c *testClient, args map[string]any, wantErr bool) (string, map[string]any, time.Duration) {
	t.Helper()
	t0 := time.Now()
	text, sc, isErr := readdocsCall(t, c, args)
	if isErr != wantErr {
		t.Errorf("ReadDocs %v: isError %v, want %v: %s", args, isErr, wantErr, text)
	}
	return text, sc, time.Since(t0)
}

func TestBrowserReadsWhenContentIsThere(t *testing.T) {
	readdocsNeedBrowser(t)
	site, other := browserSites(t)
	c := startServer(t, "-readdocs-timeout-ms", "8000")
	c.initialize("2025-06-18")
	browserRead(t, c, map[string]any{"url": site.URL + "/rewrites"}, false) // starts the browser
	for _, format := range []string{"markdown", "text"} {
		text, _, took := browserRead(t, c, map[string]any{"url": site.URL + "/stalls", "format": format}, false)
		if !strings.Contains(text, "Article text.") || strings.Contains(text, "Note:") || took > 3*time.Second {
			t.Errorf("stalled subresources (%s): read in %s:\n%s", format, took, text)
		}
	}
	// A page that never ends is read at the deadline (8 s less a quarter).
	text, _, took := browserRead(t, c, map[string]any{"url": site.URL + "/endless"}, false)
	if !strings.Contains(text, "First part.") || !strings.Contains(text, "had not finished loading") || took < 5*time.Second {
		t.Errorf("endless page: read in %s:\n%s", took, text)
	}
	// Scripts that move to another site or to https leave the page as it came.
	for _, path := range []string{"/moves", "/upgrades"} {
		text, sc, _ := browserRead(t, c, map[string]any{"url": site.URL + path}, false)
		if !strings.Contains(text, "article.") || !strings.Contains(text, "tried to go on to") ||
			sc["final_url"] != site.URL+path {
			t.Errorf("%s: final_url %v:\n%s", path, sc["final_url"], text)
		}
	}
	if text, _, _ := browserRead(t, c, map[string]any{"url": site.URL + "/moves"}, false); strings.Contains(text, "Another page") {
		t.Errorf("moved to %s/elsewhere:\n%s", other.URL, text)
	}
}

// The page as the server sent it comes with the page as its scripts left it.
func TestBrowserSource(t *testing.T) {
	readdocsNeedBrowser(t)
	site, _ := browserSites(t)
	srv := newServer(loadConfig(map[string]string{}), io.Discard)
	defer srv.close()
	pg, err := srv.readPage(context.Background(), readDocsArgs{URL: site.URL + "/rewrites", Format: "markdown"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pg.body, "Built text.") || strings.Contains(pg.body, "Served text.") {
		t.Errorf("body is not the DOM: %s", pg.body)
	}
	if !strings.Contains(pg.source, "<p>Served text.</p><script>") {
		t.Errorf("source is not the HTML served: %q", pg.source)
	}
}

// browserFiles lists what is under dir.
func browserFiles(dir string) []string {
	var files []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if path != dir {
			files = append(files, path)
		}
		return nil
	})
	return files
}

// ReadDocs is read-only: downloads are refused, and Chromium writes nothing
// outside its profile, which is gone once telson has stopped.
func TestBrowserWritesNothing(t *testing.T) {
	readdocsNeedBrowser(t)
	site, _ := browserSites(t)
	home := t.TempDir()
	tmp := t.TempDir()
	env := []string{"HOME=" + home, "TMPDIR=" + tmp, "TELSON_STATE_DIR=" + t.TempDir()}
	c := startBinary(t, env)
	c.initialize("2025-06-18")
	browserRead(t, c, map[string]any{"url": site.URL + "/download"}, true)
	browserRead(t, c, map[string]any{"url": site.URL + "/file.bin"}, true)
	browserRead(t, c, map[string]any{"url": site.URL + "/clicks"}, false)
	if files := browserFiles(home); len(files) > 0 {
		t.Errorf("written to HOME: %v", files)
	}
	c.in.Close()
	if err := <-c.done; err != nil {
		t.Errorf("telson: %v\n%s", err, c.stderr.String())
	}
	c.done <- nil // for the cleanup
	if files := browserFiles(tmp); len(files) > 0 {
		t.Errorf("left in TMPDIR: %v", files)
	}
	if files := browserFiles(home); len(files) > 0 {
		t.Errorf("written to HOME: %v", files)
	}
}

func TestBrowserChromePathMissing(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-chrome-path", "/nonexistent/chromium")
	c.initialize("2025-06-18")
	text, _, _ := browserRead(t, c, map[string]any{"url": "http://127.0.0.1:1/"}, true)
	if !strings.Contains(text, "CHROME_PATH /nonexistent/chromium") {
		t.Errorf("reply: %s", text)
	}
}

// readdocsGone says whether path no longer exists.
func readdocsGone(path string) bool {
	_, err := os.Stat(path)
	return os.IsNotExist(err)
}
