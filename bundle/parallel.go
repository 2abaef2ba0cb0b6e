package bundle

import (
	"fmt"
	"runtime"

	"github.com/pyrula/caseworker/canonjson"
)

// Reading a long history or results array on several goroutines: the
// reader's goroutine copies runs of whole elements out of the input
// (canonjson's RawElements, which only finds where each element ends),
// goroutines of their own canonicalise each run into a buffer of its own,
// and the reader's goroutine takes the runs back in input order, appending
// the canonical elements to its buffer and validating them one by one as
// the sequential path does: the same bytes, and the same first error (but
// for a bundle that passes the size limit within a run and is also invalid
// later in that run: the sequential read stops at the limit, bundle_too_large,
// where this one may find the invalid input first, bundle_corrupt).

// parallelFrom is the canonical size from which Read canonicalises long
// arrays on several goroutines (below it, the hand-offs cost more than
// they save); chunkBytes is about how much input one run holds.
const (
	parallelFrom = 8 << 20
	chunkBytes   = 256 << 10
)

// chunk is one run of elements and what its goroutine made of it.
type chunk struct {
	els  canonjson.Elements
	out  []byte // the canonical elements, one after another
	ends []int  // where each element ends in out
	hist []historyVisitor
	res  []resultFields
	keys []byte // the results' decoded keys
	// err is the error of element len(ends); notObject says that element
	// is valid JSON but not an object.
	err       error
	notObject bool
	done      chan struct{}
}

// canonicalise reads the run's elements as objects.
func (c *chunk) canonicalise(history bool) {
	defer close(c.done)
	d := c.els.Decoder()
	var kinds kindTable
	for range c.els.N {
		if d.PeekKind() != '{' {
			if _, err := d.AppendValue(nil); err != nil {
				c.err = err
			} else {
				c.notObject = true
			}
			return
		}
		var err error
		if history {
			var v historyVisitor
			c.out, err = d.AppendObject(c.out, v.member)
			c.hist = append(c.hist, v)
		} else {
			v := resultVisitor{kinds: &kinds, keys: &c.keys}
			c.out, err = d.AppendObject(c.out, v.member)
			c.res = append(c.res, v.f)
		}
		if err != nil {
			c.err = err
			return
		}
		c.ends = append(c.ends, len(c.out))
	}
	if end := c.els.Offset + int64(len(c.els.Raw)); d.InputOffset() != end {
		// Cannot happen: an object's end is where its brackets close.
		c.err = fmt.Errorf("%w: elements end at byte %d, not %d", canonjson.ErrInvalid, d.InputOffset(), end)
	}
}

// readParallel reads the elements of the array under what from its start
// until the first one RawElements leaves to the sequential path, and
// returns how many it read.
func (r *reader) readParallel(what string) (int, error) {
	history := what == "history"
	inFlight := 2 * runtime.GOMAXPROCS(0) // runs canonicalised at once
	var window []*chunk
	var free []*chunk // runs taken back, their buffers reused
	n := 0
	take := func(c *chunk) error {
		<-c.done
		free = append(free, c)
		keysAt := uint32(len(r.keys))
		r.keys = append(r.keys, c.keys...)
		startOut := 0
		for j, end := range c.ends {
			sep := 0
			if n > 0 {
				sep = 1
			}
			if err := r.room(sep + end - startOut); err != nil {
				return err
			}
			if sep > 0 {
				r.buf = append(r.buf, ',')
			}
			start := len(r.buf)
			r.buf = append(r.buf, c.out[startOut:end]...)
			startOut = end
			if history {
				r.addHistory(start, &c.hist[j])
			} else {
				f := &c.res[j]
				f.keyOff += keysAt // its key is in r.keys now
				if err := r.addResult(start, len(r.buf), f); err != nil {
					return err
				}
			}
			n++
			r.stream(false)
		}
		switch {
		case c.notObject:
			return corrupt(fmt.Sprintf("%s[%d] is not an object", what, n), nil)
		case c.err != nil:
			return c.err
		}
		return nil
	}
	defer func() {
		for _, c := range window {
			<-c.done
		}
	}()
	ahead := 0 // input bytes of the runs in window
	for {
		// The runs in flight are taken back first once their input would
		// take the buffer past the limit (as canonical bytes, about): a
		// bundle over it is refused before more input is read.
		for len(window) > 0 && (len(window) >= inFlight || int64(len(r.buf)+ahead) > r.maxBuf()) {
			ahead -= len(window[0].els.Raw)
			if err := take(window[0]); err != nil {
				return n, err
			}
			window = window[1:]
		}
		var c *chunk
		if len(free) > 0 {
			c, free = free[len(free)-1], free[:len(free)-1]
		} else {
			c = &chunk{}
		}
		els := r.dec.RawElements(c.els.Raw, r.split)
		if els.N == 0 {
			break
		}
		*c = chunk{els: els, out: c.out[:0], ends: c.ends[:0], hist: c.hist[:0], res: c.res[:0], keys: c.keys[:0], done: make(chan struct{})}
		go c.canonicalise(history)
		window = append(window, c)
		ahead += len(els.Raw)
	}
	for len(window) > 0 {
		if err := take(window[0]); err != nil {
			return n, err
		}
		window = window[1:]
	}
	return n, nil
}
