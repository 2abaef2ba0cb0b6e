package bundle

import (
	"github.com/klauspost/compress/zstd"
)

// pipeline hashes and compresses canonical bytes on a second goroutine while
// Read is still producing them. It only works while the input arrives in
// canonical order (top-level keys history, manifest, results; results
// sorted), which is what this project and Python tooling write; the first
// piece out of order aborts it and Read falls back to hashing and
// compressing after the whole bundle is read.
type pipeline struct {
	spill   *spill // the reader's, if any: the chunks are counted in it
	ch      chan []byte
	done    chan struct{}
	aborted bool

	// Written by the goroutine, read after done is closed.
	hash Hash
	blob pieces
	err  error
}

// flushEvery is how many finished bytes Read collects before handing them on.
const flushEvery = 256 << 10

func startPipeline(s *spill) *pipeline {
	p := &pipeline{spill: s, ch: make(chan []byte, 64), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *pipeline) run() {
	defer close(p.done)
	h := newHasher()
	enc, err := zstd.NewWriter(&p.blob,
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderCRC(true),
		zstd.WithEncoderConcurrency(1),
	)
	if err != nil {
		p.err = err
		for range p.ch {
		}
		return
	}
	for chunk := range p.ch {
		if p.err != nil {
			continue
		}
		h.Write(chunk)
		if _, err := enc.Write(chunk); err != nil {
			p.err = err
		}
		p.spill.touch(len(chunk))
	}
	if err := enc.Close(); err != nil && p.err == nil {
		p.err = err
	}
	p.hash = hashOf(h)
}

// send hands finished canonical bytes on; they must never change again.
func (p *pipeline) send(b []byte) {
	if len(b) > 0 {
		p.ch <- b
	}
}

// close ends the input and waits for the hash and blob.
func (p *pipeline) close() {
	close(p.ch)
	<-p.done
}

// abort stops the pipeline and drops what it made.
func (p *pipeline) abort() {
	p.aborted = true
	p.close()
	p.blob = nil
}
