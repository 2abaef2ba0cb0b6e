package docscheck

import (
	"bufio"
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// link is one link of a Markdown file.
type link struct {
	line   int
	target string
}

var (
	inlineLink    = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	referenceLink = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
	codeSpan      = regexp.MustCompile("`+[^`]*`+")
	heading       = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor    = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// scan returns the links of a Markdown file and the anchors of its
// headings, leaving out fenced code blocks and code spans.
func scan(src []byte) (links []link, anchors map[string]bool) {
	anchors = map[string]bool{}
	seen := map[string]int{}
	fence := ""
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			id := slug(m[2])
			if k := seen[id]; k > 0 {
				anchors[id+"-"+strconv.Itoa(k)] = true
			} else {
				anchors[id] = true
			}
			seen[id]++
		}
		text := codeSpan.ReplaceAllString(line, "``")
		if m := referenceLink.FindStringSubmatch(text); m != nil {
			links = append(links, link{n, m[1]})
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			links = append(links, link{n, m[1]})
		}
	}
	return links, anchors
}

// headingLink is a link inside a heading's text.
var headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slug is the anchor GitHub gives a heading: its text lower-cased, links
// replaced by their text, every character but letters, digits, '-' and '_'
// dropped, and each space made a '-'.
func slug(text string) string {
	text = headingLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
