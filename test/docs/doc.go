// Package docs checks that the repository's documentation holds together:
//
//   - every relative link of every Markdown file (README.md, docs/,
//     BENCHMARKS.md, RELIABILITY.md, the chart's README) names a file or
//     directory that exists;
//   - every #fragment, in a link within a page or to another Markdown file,
//     is the anchor GitHub gives one of that file's headings;
//   - every link to this repository's own files by URL
//     (https://github.com/etcdhook/etcd-hook/blob/main/…) in the manifests
//     and the chart (the alerts' runbook_url, the dashboard's links)
//     resolves the same way, so an alert never points at a runbook section
//     that was renamed or moved.
//
// It runs with the unit tests ("make unit", part of "make test"), and
// needs nothing but the files.
//
// Nothing but tests lives here; this file exists so that the package has a
// name outside its tests.
package docs
