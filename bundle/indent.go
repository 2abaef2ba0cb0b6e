package bundle

import (
	"bufio"
	"io"
)

// WriteIndented writes the readable form that `case export --json` writes:
// the canonical JSON indented by two spaces with ": " after names, as
// Python's json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False)
// writes it, and a final newline. Read turns it back into the same hash.
func (c *Canonical) WriteIndented(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	ind := &indenter{w: bw}
	for s := range c.segments() {
		ind.write(s)
	}
	bw.WriteByte('\n')
	return bw.Flush()
}

// indenter re-indents canonical (compact) JSON as it streams past. It keeps
// only the state of the byte before: whether it is inside a string, after
// a backslash, or just after an opening bracket.
type indenter struct {
	w        *bufio.Writer
	depth    int
	inString bool
	escaped  bool
	opened   bool // the byte before was '{' or '['
}

func (in *indenter) newline() {
	in.w.WriteByte('\n')
	for range in.depth {
		in.w.WriteString("  ")
	}
}

func (in *indenter) write(p []byte) {
	for len(p) > 0 {
		if in.inString {
			// Copy the run up to the closing quote in one write.
			i := 0
			for ; i < len(p); i++ {
				c := p[i]
				if in.escaped {
					in.escaped = false
					continue
				}
				if c == '\\' {
					in.escaped = true
				} else if c == '"' {
					in.inString = false
					i++
					break
				}
			}
			in.w.Write(p[:i])
			p = p[i:]
			continue
		}
		c := p[0]
		p = p[1:]
		if in.opened {
			in.opened = false
			if c == '}' || c == ']' {
				in.depth--
				in.w.WriteByte(c)
				continue
			}
			in.newline()
		}
		switch c {
		case '{', '[':
			in.w.WriteByte(c)
			in.depth++
			in.opened = true
		case '}', ']':
			in.depth--
			in.newline()
			in.w.WriteByte(c)
		case ',':
			in.w.WriteByte(',')
			in.newline()
		case ':':
			in.w.WriteString(": ")
		case '"':
			in.w.WriteByte('"')
			in.inString = true
		default:
			in.w.WriteByte(c)
		}
	}
}
