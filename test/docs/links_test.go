package docs

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// ownFileURL is how files of this repository are linked from outside
// Markdown (a runbook_url, a dashboard link) or by absolute URL: the part
// after main/ is a path from the module root.
var ownFileURL = regexp.MustCompile(`https://github\.com/etcdhook/etcd-hook/(?:blob|tree)/main/([^\s"'<>()\[\]` + "`" + `]*)`)

// skippedDirs are left out of the walk: build output, caches and what test
// runs leave behind hold no documentation, and may hold a great many files.
var skippedDirs = map[string]bool{
	".git":               true,
	"bin":                true,
	"tmp":                true,
	".cache":             true,
	"test/e2e/artifacts": true,
}

// linkedFromOutsideMarkdown are the extensions of the files whose URLs to
// this repository are checked: the manifests, the chart, the dashboards and
// the alerts' unit tests.
var linkedFromOutsideMarkdown = []string{".yaml", ".yml", ".json"}

// TestMarkdownLinksResolve: every relative link and every anchor in every
// Markdown file of the repository points at something that exists.
func TestMarkdownLinksResolve(t *testing.T) {
	repo := newRepository(t)
	files := repo.files(t, func(name string) bool { return strings.HasSuffix(name, ".md") })
	for _, want := range []string{"README.md", "docs/README.md", "BENCHMARKS.md", "RELIABILITY.md"} {
		if !slices.Contains(files, want) {
			t.Errorf("%s was not found: the walk from %s misses files, so this test would prove nothing", want, repo.root)
		}
	}
	for _, file := range files {
		text := repo.read(t, file)
		for _, l := range markdownLinks(text) {
			if err := repo.resolve(file, l.target); err != nil {
				t.Errorf("%s:%d: link %q: %v", file, l.line, l.target, err)
			}
		}
	}
}

// TestOwnURLsResolve: every URL of one of this repository's files in the
// manifests and the chart (the alerts' runbook_url, the dashboard's links)
// names a file that exists and, with a #fragment, a heading of it. An
// alert's runbook_url is checked here, beside the pages it points into;
// test/monitoring checks that each alert points at its own section.
func TestOwnURLsResolve(t *testing.T) {
	repo := newRepository(t)
	files := repo.files(t, func(name string) bool {
		return slices.Contains(linkedFromOutsideMarkdown, filepath.Ext(name))
	})
	runbooks := 0
	for _, file := range files {
		text := repo.read(t, file)
		for _, m := range ownFileURL.FindAllStringIndex(text, -1) {
			url := text[m[0]:m[1]]
			if strings.HasSuffix(strings.TrimRight(text[:m[0]], ` "'`), "runbook_url:") {
				runbooks++
			}
			line := 1 + strings.Count(text[:m[0]], "\n")
			if err := repo.resolve(file, url); err != nil {
				t.Errorf("%s:%d: %s: %v", file, line, url, err)
			}
		}
	}
	if runbooks == 0 {
		t.Errorf("no runbook_url found in %s: the PrometheusRule moved, or this test's pattern no longer matches it", strings.Join(linkedFromOutsideMarkdown, ", "))
	}
}

// repository is the checkout the links are checked in: its root, and the
// anchors of each page a link pointed into, read once.
type repository struct {
	root    string
	anchors map[string]map[string]bool
}

func newRepository(t *testing.T) *repository {
	return &repository{root: testenv.ModuleRoot(t), anchors: map[string]map[string]bool{}}
}

// files lists the files under the root whose name wants says, as
// slash-separated paths from the root.
func (r *repository) files(t *testing.T, wants func(name string) bool) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(r.root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skippedDirs[rel] {
				return filepath.SkipDir
			}
			return nil
		}
		if wants(d.Name()) {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func (r *repository) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// resolve checks one link target found in the file from (a path from the
// module root): a file or directory that exists, and a fragment that is
// one of its headings' anchors. A URL of this repository's own files is
// resolved from the module root; links to other sites are not followed.
func (r *repository) resolve(from, target string) error {
	if m := ownFileURL.FindStringSubmatch(target); m != nil && m[0] == target {
		target, from = m[1], "README.md"
	} else if strings.Contains(target, ":") && !strings.HasPrefix(target, "#") {
		return nil // another site, mailto: and the like
	}
	file, fragment, _ := strings.Cut(target, "#")
	if file == "" {
		file = from // #fragment: a heading of the same page
	} else {
		file = path.Clean(path.Join(path.Dir(from), file))
	}
	if file == ".." || strings.HasPrefix(file, "../") {
		return fmt.Errorf("leads out of the repository (to %s)", file)
	}
	info, err := os.Stat(filepath.Join(r.root, filepath.FromSlash(file)))
	if err != nil {
		return fmt.Errorf("%s does not exist", file)
	}
	if fragment == "" {
		return nil
	}
	if info.IsDir() || !strings.HasSuffix(file, ".md") {
		if lineAnchor.MatchString(fragment) {
			return nil // GitHub's line anchors of a source file
		}
		return fmt.Errorf("#%s: %s is not a Markdown page, so it has no heading anchors", fragment, file)
	}
	anchors, err := r.anchorsOf(file)
	if err != nil {
		return err
	}
	if !anchors[fragment] {
		return fmt.Errorf("%s has no heading whose anchor is #%s", file, fragment)
	}
	return nil
}

// lineAnchor is GitHub's anchor of a line, or lines, of a source file.
var lineAnchor = regexp.MustCompile(`^L[0-9]+(-L[0-9]+)?$`)

// anchorsOf are the heading anchors of a Markdown page of the repository.
func (r *repository) anchorsOf(file string) (map[string]bool, error) {
	if a, ok := r.anchors[file]; ok {
		return a, nil
	}
	b, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(file)))
	if err != nil {
		return nil, err
	}
	a := headingAnchors(string(b))
	r.anchors[file] = a
	return a, nil
}

// atxHeading is a Markdown heading line: up to three spaces, one to six #,
// then the text, with an optional closing run of # that is not part of it.
var atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)

// headingAnchors are the anchors GitHub gives a Markdown file's headings:
// each heading's slug, and for the second and later headings with the
// same slug, the slug with -1, -2 and so on. Headings in fenced code
// blocks are not headings. Setext headings (text underlined with = or -)
// are not recognised: this repository writes # headings.
func headingAnchors(markdown string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	// Code spans stay: a heading's text may hold one.
	for _, line := range strings.Split(blankFencedBlocks(markdown), "\n") {
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := githubSlug(m[1])
		anchor := slug
		if n := seen[slug]; n > 0 {
			anchor = fmt.Sprintf("%s-%d", slug, n)
		}
		seen[slug]++
		anchors[anchor] = true
	}
	return anchors
}

// The parts of a heading's Markdown that are not its text.
var (
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
)

// githubSlug is the anchor GitHub gives a heading, as its slugger makes it
// from the heading's rendered text: lower case, every space a hyphen,
// letters, digits, marks, - and _ kept, every other character dropped.
func githubSlug(heading string) string {
	text := inlineLink.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// link is one link target in a Markdown file, and the line it starts on.
type link struct {
	target string
	line   int
}

var (
	// An inline link or image: [text](target) or [text](target "title");
	// the text may run over several lines. The target may be in <>.
	inlineTarget = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^\s()<>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// A link reference definition: [label]: target.
	referenceDefinition = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:[ \t]*<?([^\s<>]+)>?`)
)

// markdownLinks are the targets of a Markdown file's links, outside code
// blocks and code spans, where brackets and parentheses are only text.
func markdownLinks(markdown string) []link {
	text := blankCodeSpans(blankFencedBlocks(markdown))
	var links []link
	for _, re := range []*regexp.Regexp{inlineTarget, referenceDefinition} {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			target := text[m[2]:m[3]]
			if target == "" {
				continue
			}
			links = append(links, link{target: target, line: 1 + strings.Count(text[:m[0]], "\n")})
		}
	}
	slices.SortStableFunc(links, func(a, b link) int { return a.line - b.line })
	return links
}

// blank replaces every byte of text[from:to] but the line breaks with a
// space, so that offsets and line numbers stay those of the file.
func blank(text []byte, from, to int) {
	for i := from; i < to; i++ {
		if text[i] != '\n' {
			text[i] = ' '
		}
	}
}

// blankFencedBlocks blanks fenced code blocks: a line of three or more `
// or ~ (indented too, as in a list item) opens one, and a line of at least
// as many of the same closes it; an unclosed one runs to the end.
func blankFencedBlocks(markdown string) string {
	b := []byte(markdown)
	var fence string
	fenceStart := 0
	for offset := 0; offset < len(markdown); {
		end := strings.IndexByte(markdown[offset:], '\n')
		if end < 0 {
			end = len(markdown)
		} else {
			end += offset
		}
		line := strings.TrimLeft(markdown[offset:end], " \t")
		if fence == "" {
			if f := fenceOf(line); f != "" {
				fence, fenceStart = f, offset
			}
		} else if f := fenceOf(line); strings.HasPrefix(f, fence) && strings.TrimRight(line, " \t") == f {
			blank(b, fenceStart, end)
			fence = ""
		}
		offset = end + 1
	}
	if fence != "" {
		blank(b, fenceStart, len(b))
	}
	return string(b)
}

// blankCodeSpans blanks code spans: a run of backticks up to the next run
// of the same length. A run that is never closed is only text.
func blankCodeSpans(markdown string) string {
	b := []byte(markdown)
	for i := 0; i < len(markdown); {
		if markdown[i] != '`' {
			i++
			continue
		}
		n := runLength(markdown, i, '`')
		closing := -1
		for j := i + n; j < len(markdown); {
			if markdown[j] != '`' {
				j++
				continue
			}
			m := runLength(markdown, j, '`')
			if m == n {
				closing = j
				break
			}
			j += m
		}
		if closing < 0 {
			i += n
			continue
		}
		blank(b, i, closing+n)
		i = closing + n
	}
	return string(b)
}

// fenceOf is the fence a line opens or closes (its run of ` or ~), or "".
func fenceOf(line string) string {
	for _, c := range []byte{'`', '~'} {
		if n := runLength(line, 0, c); n >= 3 {
			return line[:n]
		}
	}
	return ""
}

func runLength(s string, i int, c byte) int {
	n := 0
	for i+n < len(s) && s[i+n] == c {
		n++
	}
	return n
}

// TestGitHubSlug pins the anchors GitHub gives headings, on the shapes this
// repository's headings take.
func TestGitHubSlug(t *testing.T) {
	cases := []struct {
		heading, want, why string
	}{
		{"Quick start", "quick-start", "lower case, a space becomes a hyphen"},
		{"Housekeeping (auto-pilot)", "housekeeping-auto-pilot", "parentheses dropped, hyphens kept"},
		{"Backups: EtcdBackup", "backups-etcdbackup", "a colon is dropped, and the space after it stays a hyphen"},
		{"etcd releases, upgrades and downgrades", "etcd-releases-upgrades-and-downgrades", "a comma is dropped"},
		{"No Events: conditions and metrics instead", "no-events-conditions-and-metrics-instead", "mixed case"},
		{"etcdMembersDown", "etcdmembersdown", "an alert's name, as its runbook_url spells it"},
		{"`spec.etcd` settings", "specetcd-settings", "code spans keep their text, and a dot is dropped"},
		{"A restore of 256 MiB into 3 members", "a-restore-of-256-mib-into-3-members", "digits kept"},
		{"Scale 3→5", "scale-35", "a symbol is dropped"},
		{"snake_case and dash-case", "snake_case-and-dash-case", "underscores and hyphens kept"},
		{"See [TLS](tls.md) first", "see-tls-first", "a link keeps its text only"},
		{"Two  spaces", "two--spaces", "each space becomes a hyphen"},
		{"Überblick", "überblick", "letters beyond ASCII kept, in lower case"},
	}
	for _, c := range cases {
		if got := githubSlug(c.heading); got != c.want {
			t.Errorf("githubSlug(%q) = %q, want %q (%s)", c.heading, got, c.want, c.why)
		}
	}
}

// TestHeadingAnchors: which lines are headings, and how repeated headings
// are told apart.
func TestHeadingAnchors(t *testing.T) {
	cases := []struct {
		name, markdown string
		want           []string
		why            string
	}{
		{"levels", "# Title\n## Section\n###### Deep\n", []string{"title", "section", "deep"},
			"every level from one to six # is a heading"},
		{"repeated", "## Status\n## Status\n## Status\n", []string{"status", "status-1", "status-2"},
			"GitHub numbers the second and later headings with the same slug"},
		{"closing hashes", "## Closed ##\n", []string{"closed"},
			"a closing run of # is not part of the text"},
		{"in a code block", "```sh\n# a shell comment\n```\n## Real\n", []string{"real"},
			"a # line in a fenced code block is not a heading"},
		{"in an indented code block of a list", "1. Step\n\n   ```sh\n   # comment\n   ```\n", nil,
			"fences inside list items are indented"},
		{"not a heading", "#hashtag\n####### seven\n", nil,
			"# needs a space after it, and seven are too many"},
	}
	for _, c := range cases {
		got := headingAnchors(c.markdown)
		want := map[string]bool{}
		for _, a := range c.want {
			want[a] = true
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: headingAnchors = %v, want %v (%s)", c.name, slices.Sorted(maps.Keys(got)), c.want, c.why)
		}
	}
}

// TestMarkdownLinks: which targets count as links, and on which line they
// are reported.
func TestMarkdownLinks(t *testing.T) {
	cases := []struct {
		name, markdown string
		want           []link
		why            string
	}{
		{"inline", "see [TLS](docs/tls.md#rotation).\n", []link{{"docs/tls.md#rotation", 1}},
			"the usual link"},
		{"text over two lines", "see [Restore and\ndisaster recovery](#restore) now\n", []link{{"#restore", 1}},
			"link text wraps with the paragraph; the line is where it starts"},
		{"title", "[a](b.md \"the title\")\n", []link{{"b.md", 1}},
			"a title is not part of the target"},
		{"angle brackets", "[a](<b.md>)\n", []link{{"b.md", 1}},
			"a target may be written in <>"},
		{"image", "\n![diagram](docs/diagram.png)\n", []link{{"docs/diagram.png", 2}},
			"an image's source must exist too"},
		{"reference definition", "[a][x]\n\n[x]: docs/x.md\n", []link{{"docs/x.md", 3}},
			"a reference-style link's target is in its definition"},
		{"code span", "`[a](not-a-link)` and [b](c.md)\n", []link{{"c.md", 1}},
			"brackets in code are text"},
		{"fenced block", "```go\nx := m[k](y)\n```\n[d](e.md)\n", []link{{"e.md", 4}},
			"brackets in a code block are text"},
		{"table cell", "| a | [b](#c) |\n", []link{{"#c", 1}},
			"links in tables count"},
	}
	for _, c := range cases {
		if got := markdownLinks(c.markdown); !slices.Equal(got, c.want) {
			t.Errorf("%s: markdownLinks = %v, want %v (%s)", c.name, got, c.want, c.why)
		}
	}
}

// TestResolve: what a broken link is. The cases link to this repository's
// own pages, as the real links do.
func TestResolve(t *testing.T) {
	cases := []struct {
		from, target string
		wantErr      string
		why          string
	}{
		{"README.md", "docs/install.md", "", "a page that exists"},
		{"README.md", "docs/install.md#serving-the-hook-over-https", "", "a heading of that page"},
		{"docs/install.md", "#serving-the-hook-over-https", "", "a heading of the same page"},
		{"docs/alerts.md", "../README.md#quick-start", "", "a path relative to the linking file"},
		{"README.md", "manifests/", "", "a directory"},
		{"README.md", "https://example.com/x#y", "", "other sites are not followed"},
		{"README.md", "https://github.com/etcdhook/etcd-hook/blob/main/docs/alerts.md#etcdmembersdown", "", "this repository's own URL is resolved like a relative link"},
		{"README.md", "docs/nope.md", "docs/nope.md does not exist", "a missing file"},
		{"README.md", "docs/install.md#nope", "docs/install.md has no heading whose anchor is #nope", "a missing heading"},
		{"docs/install.md", "install.md#Install", "has no heading whose anchor is #Install", "anchors are lower case"},
		{"README.md", "https://github.com/etcdhook/etcd-hook/blob/main/README.md#alerts-runbook", "README.md has no heading whose anchor is #alerts-runbook", "a runbook link left behind by a move"},
		{"README.md", "../outside.md", "leads out of the repository", "a link must stay in the repository"},
		{"README.md", "Makefile#test", "Makefile is not a Markdown page", "only Markdown pages have heading anchors"},
	}
	repo := newRepository(t)
	for _, c := range cases {
		err := repo.resolve(c.from, c.target)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %s: unexpected error %v (%s)", c.from, c.target, err, c.why)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: %s: error %v, want one with %q (%s)", c.from, c.target, err, c.wantErr, c.why)
		}
	}
}
