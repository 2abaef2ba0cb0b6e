// Package journal owns run journals: the record of one run of a target as
// an ordered list of events (each with its run_seq) and a set of call result
// records keyed "kind:key", plus the run's meta (status, last_seq, lease).
//
// It defines the contract every journal backend implements (Journal), the
// meta, lease and run types (an event is runevent.Event, the runtime's
// host.Event too), the sentinel errors, and the interface of
// the cold archive that finished runs move to (Archive). The backends live in
// sub-packages, side by side:
//
//   - journal/memjournal: in memory, for the embedded default and unit tests;
//   - journal/valkeyjournal: Valkey (live runs, one atomic script per write,
//     keys of a finished run expire after completed_ttl);
//   - journal/pgarchive: the PostgreSQL archive of finished runs, with the
//     embedded migrations of schema "archive" (pyrula db migrate);
//   - journal/journaltest: the conformance suite every backend runs.
//
// A live backend given an Archive archives a run when it finishes, before
// its keys may expire, and its reads fall back to the archive: that
// composition is what callers use when PYRULA_POSTGRES_DSN is set.
//
// Writes are fenced by a lease: Create or Acquire hand out a Lease (owner and
// epoch); Append and Finish succeed only while the run's meta still holds
// that owner and epoch, checked in the same atomic step as the write, so a
// worker that lost its lease cannot append.
//
// journal imports bundle (bundle.Result is the result record), runevent
// (the event) and its own internal packages; it may import messages. It must not import flow, replay,
// worker, cli or store: the runtime and the capture build on it, not the
// other way round.
package journal
