package worker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"
)

// groupPos is one of the worker's consumer groups (on the message stream
// or the runs stream) and the newest entry id this worker knows the group
// delivered: the group's last-delivered-id read at Start and at each
// maintenance pass, and every entry the worker reads as new. When the group
// or its stream is deleted under the worker (XGROUP DESTROY, DEL), the
// group is created again at that id (restoreGroup).
type groupPos struct {
	label, stream, group string // label: streamCase or streamRuns

	mu   sync.Mutex
	last string // "" until known
}

// saw notes that the group delivered entry id (or an entry after it).
func (p *groupPos) saw(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == "" || entryIDLess(p.last, id) {
		p.last = id
	}
}

// position is the id to create the group at again: the newest one known
// delivered, "0" when none is known.
func (p *groupPos) position() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == "" {
		return "0"
	}
	return p.last
}

// entryIDLess reports whether stream entry id a ("<ms>-<seq>") is before
// b. An id that does not parse sorts first.
func entryIDLess(a, b string) bool {
	am, as := splitEntryID(a)
	bm, bs := splitEntryID(b)
	if am != bm {
		return am < bm
	}
	return as < bs
}

func splitEntryID(id string) (uint64, uint64) {
	ms, seq, _ := strings.Cut(id, "-")
	m, _ := strconv.ParseUint(ms, 10, 64)
	s, _ := strconv.ParseUint(seq, 10, 64)
	return m, s
}

// isNoGroup reports whether err is Valkey's NOGROUP error: the consumer
// group, or its stream, does not exist.
func isNoGroup(err error) bool {
	ve, ok := valkey.IsValkeyErr(err)
	return ok && strings.HasPrefix(ve.Error(), "NOGROUP")
}

// observeGroup reads the group's last-delivered-id (XINFO GROUPS) into p.
// It reports found false when the stream or the group does not exist.
func (w *Worker) observeGroup(ctx context.Context, p *groupPos) (found bool, err error) {
	groups, err := w.client.Do(ctx, w.client.B().XinfoGroups().Key(p.stream).Build()).ToArray()
	if ve, ok := valkey.IsValkeyErr(err); ok && strings.Contains(strings.ToLower(ve.Error()), "no such key") {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("XINFO GROUPS %s: %w", p.stream, err)
	}
	for _, raw := range groups {
		m, err := raw.AsMap()
		if err != nil {
			return false, fmt.Errorf("XINFO GROUPS %s: %w", p.stream, err)
		}
		v := m["name"]
		if name, _ := v.ToString(); name != p.group {
			continue
		}
		v = m["last-delivered-id"]
		if id, err := v.ToString(); err == nil && id != "" {
			p.saw(id)
		}
		return true, nil
	}
	return false, nil
}

// restoreGroup creates the consumer group of p again (and its stream,
// MKSTREAM), after a command failed with NOGROUP (cause) or a maintenance
// pass found it missing. The group is created at the newest entry id this
// worker knows it delivered (p.position), not at "$" (which would skip the
// entries added and not yet delivered, so that they would never be
// answered) nor at "0" (which would deliver again every entry still in the
// stream, acked ones included). When another worker created it first
// (BUSYGROUP) there is nothing to do. Each creation is logged and counted
// in pyrula_worker_group_recreated_total.
func (w *Worker) restoreGroup(ctx context.Context, p *groupPos, cause error) error {
	at := p.position()
	err := w.client.Do(ctx, w.client.B().XgroupCreate().Key(p.stream).Group(p.group).Id(at).Mkstream().Build()).Error()
	if valkey.IsValkeyBusyGroup(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create consumer group %s on %s again: %w", p.group, p.stream, err)
	}
	w.metrics.groupRecreated.WithLabelValues(p.label).Inc()
	fields := []zap.Field{zap.String("stream", p.stream), zap.String("group", p.group), zap.String("at_id", at)}
	if cause != nil {
		fields = append(fields, zap.NamedError("cause", cause))
	}
	w.log.Warn("consumer group missing (its stream or group was deleted): created it again after the last entry known delivered; entries pending in the lost group are no longer tracked", fields...)
	return nil
}

// streamFailed is told of a failed command of the consumer loop of the
// stream of group p (a read, a reclaim pass): a deleted group (NOGROUP) is
// created again at once (restoreGroup) and nil returned, so that the loop
// reads on; another failure marks the worker unhealthy and is returned,
// for the loop to log and wait out.
func (w *Worker) streamFailed(ctx context.Context, p *groupPos, err error) error {
	if isNoGroup(err) {
		// The group or the stream was deleted: create it again and read
		// on at once.
		rerr := w.restoreGroup(ctx, p, err)
		if rerr == nil {
			return nil
		}
		err = rerr
	}
	w.healthy.Store(false)
	return err
}
