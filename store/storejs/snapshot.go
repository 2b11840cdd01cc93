package storejs

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trellis-dev/trellis/store/storesqlite"
)

// Snapshots keep a replica's rebuild bounded. The writer copies its replica
// (storesqlite's SnapshotTo: a consistent copy holding the log position it
// reached) every SnapshotEvery records or SnapshotInterval, whichever comes
// first, into the object store bucket TRELLIS_<name>_SNAPSHOTS, one object
// per snapshot named by its log sequence, with the position (sequence, epoch,
// hash of the last record) and the copy's SHA-256 in its metadata. The
// newest keepSnapshots are kept. Then the log is compacted: its messages up
// to the older kept snapshot, and no closer than CompactMargin records to the
// newest, are purged, so that either kept snapshot can be restored and
// followed by the log after it.
//
// A server whose replica is missing, or whose position the compacted log no
// longer continues from, restores the newest snapshot that checks out
// (its SHA-256, the position inside the copy, the log's next record naming
// its hash as the previous one) into the replica's place before it applies
// the log. A follower that finds the log compacted past its position while
// running stops (Ready reports why): a restart restores.

// Defaults of Config's snapshot settings.
const (
	// DefaultSnapshotEvery is how many records the writer appends between
	// snapshots. A record is one group-commit batch: one write when the
	// store is quiet, dozens of runs' writes under load (110,000 three-step
	// runs of `trellis bench --workload w1` make 1,750 records, whose
	// replay takes 18 s on a 2-core machine).
	DefaultSnapshotEvery = 10_000
	// DefaultSnapshotInterval is the longest time between snapshots while the
	// log moves.
	DefaultSnapshotInterval = time.Hour
	// DefaultCompactMargin is how many records before the newest snapshot a
	// compaction keeps at least: a follower that far behind goes on from the
	// log without a restore.
	DefaultCompactMargin = 1_000
)

const (
	// keepSnapshots is how many snapshots the bucket keeps.
	keepSnapshots = 2
	// snapshotRetry is how long the writer waits after a snapshot failed.
	snapshotRetry = time.Minute
	// compactTimeout bounds the compaction after a snapshot.
	compactTimeout = 10 * time.Second
	// uploadTimeout bounds a snapshot's upload, which a Close waits for.
	uploadTimeout = time.Minute
	// metadata keys of a snapshot object
	metaSeq    = "trellis-seq"
	metaEpoch  = "trellis-epoch"
	metaHash   = "trellis-hash"
	metaSHA256 = "trellis-sha256"
)

// errSnapshot marks a snapshot that cannot be restored.
var errSnapshot = errors.New("unusable snapshot")

func snapshotBucket(name string) string { return "TRELLIS_" + name + "_SNAPSHOTS" }

func snapshotName(seq uint64) string { return fmt.Sprintf("seq-%020d", seq) }

// bucket returns the snapshot bucket; nil when it does not exist and create
// is false. It is created with the first snapshot, so that a store that
// never takes one adds no stream to the cluster.
func (s *Store) bucket(ctx context.Context, create bool) (jetstream.ObjectStore, error) {
	s.bucketMu.Lock()
	defer s.bucketMu.Unlock()
	if s.snaps != nil {
		return s.snaps, nil
	}
	obj, err := openSnapshots(ctx, s.js, s.cfg.Name, s.cfg.Replicas, create)
	if err == nil {
		s.snaps = obj
	}
	return obj, err
}

func openSnapshots(ctx context.Context, js jetstream.JetStream, name string, replicas int, create bool) (jetstream.ObjectStore, error) {
	obj, err := js.ObjectStore(ctx, snapshotBucket(name))
	if errors.Is(err, jetstream.ErrBucketNotFound) && !create {
		return nil, nil
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obj, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: snapshotBucket(name), Description: "Trellis replica snapshots of cluster " + name,
			Storage: jetstream.FileStorage, Replicas: replicas,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("opening the snapshot bucket %s: %w", snapshotBucket(name), err)
	}
	return obj, nil
}

// snapshot is one snapshot object's description.
type snapshot struct {
	name  string
	seq   uint64
	state replicaState
	sum   [32]byte
	size  uint64
	taken time.Time
}

func (sn *snapshot) metadata() map[string]string {
	return map[string]string{
		metaSeq:    strconv.FormatUint(sn.seq, 10),
		metaEpoch:  strconv.FormatUint(sn.state.epoch, 10),
		metaHash:   hex.EncodeToString(sn.state.hash[:]),
		metaSHA256: hex.EncodeToString(sn.sum[:]),
	}
}

func parseSnapshot(info *jetstream.ObjectInfo) (snapshot, error) {
	sn := snapshot{name: info.Name, size: info.Size, taken: info.ModTime}
	m := info.Metadata
	var errs []error
	var err error
	if sn.seq, err = strconv.ParseUint(m[metaSeq], 10, 64); err != nil {
		errs = append(errs, fmt.Errorf("sequence %q", m[metaSeq]))
	}
	if sn.state.epoch, err = strconv.ParseUint(m[metaEpoch], 10, 64); err != nil {
		errs = append(errs, fmt.Errorf("epoch %q", m[metaEpoch]))
	}
	for key, dst := range map[string]*[32]byte{metaHash: &sn.state.hash, metaSHA256: &sn.sum} {
		if b, err := hex.DecodeString(m[key]); err != nil || len(b) != 32 {
			errs = append(errs, fmt.Errorf("%s %q", key, m[key]))
		} else {
			copy(dst[:], b)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return sn, fmt.Errorf("%w %s: its metadata: %w", errSnapshot, info.Name, err)
	}
	return sn, nil
}

// snapshots lists the bucket's snapshots, newest first. An object whose
// metadata cannot be read is logged and left out.
func (s *Store) snapshots(ctx context.Context) ([]snapshot, error) {
	b, err := s.bucket(ctx, false)
	if err != nil || b == nil {
		return nil, err
	}
	infos, err := b.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the snapshots: %w", err)
	}
	var out []snapshot
	for _, info := range infos {
		sn, err := parseSnapshot(info)
		if err != nil {
			s.log.Warn("storejs: a snapshot object is not usable", "bucket", snapshotBucket(s.cfg.Name), "err", err)
			continue
		}
		out = append(out, sn)
	}
	slices.SortFunc(out, func(a, b snapshot) int { return cmp.Compare(b.seq, a.seq) })
	return out, nil
}

// Snapshot takes a snapshot of this server's replica now, uploads it, keeps
// the newest two and compacts the log (see Config.CompactMargin). It returns
// the log sequence the snapshot holds. The writer takes them by itself (see
// Config.SnapshotEvery); any server may take one.
func (s *Store) Snapshot(ctx context.Context) (uint64, error) {
	if err := s.read(ctx); err != nil {
		return 0, err
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	sn, err := s.takeSnapshot(ctx)
	if err != nil {
		return 0, fmt.Errorf("taking a snapshot: %w", err)
	}
	// Not cut short by a Close once the snapshot is in: the bucket would keep
	// one more than keepSnapshots until the next.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compactTimeout)
	defer cancel()
	if err := s.compact(cctx); err != nil {
		return sn.seq, err
	}
	return sn.seq, nil
}

func (s *Store) takeSnapshot(ctx context.Context) (snapshot, error) {
	tmp := s.cfg.replicaPath() + ".snapshot"
	removeDB(tmp)
	defer removeDB(tmp)
	pos, err := s.rep.SnapshotTo(ctx, tmp)
	if err != nil {
		return snapshot{}, err
	}
	if pos.Seq == 0 {
		return snapshot{}, errors.New("the replica has applied no log record yet")
	}
	st, err := decodeState(pos.State)
	if err != nil {
		return snapshot{}, err
	}
	sn := snapshot{name: snapshotName(pos.Seq), seq: pos.Seq, state: st}
	// The bucket's creation is not cut short by a Close: a stream create
	// abandoned by its caller goes on in the NATS server, and one the
	// embedded server's shutdown met half made was never stopped (a leaked
	// stream goroutine CI's leak check found).
	bctx, bcancel := context.WithTimeout(context.WithoutCancel(ctx), uploadTimeout)
	_, err = s.bucket(bctx, true)
	bcancel()
	if err != nil {
		return snapshot{}, err
	}
	if info, err := s.snaps.GetInfo(ctx, sn.name); err == nil {
		if had, err := parseSnapshot(info); err == nil && had.state == st {
			return had, nil // taken at this position already
		}
	}
	f, err := os.Open(tmp)
	if err != nil {
		return snapshot{}, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return snapshot{}, fmt.Errorf("reading the copy: %w", err)
	}
	copy(sn.sum[:], h.Sum(nil))
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return snapshot{}, err
	}
	// The upload is not cut short by a Close either: an object store's Put
	// cancelled between its chunks and its metadata can leave an object
	// listed whose compaction never ran (a third snapshot, CI saw it).
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadTimeout)
	defer cancel()
	info, err := s.snaps.Put(uctx, jetstream.ObjectMeta{Name: sn.name, Metadata: sn.metadata(),
		Description: fmt.Sprintf("replica of cluster %s at log sequence %d", s.cfg.Name, sn.seq)}, f)
	if err != nil {
		return snapshot{}, fmt.Errorf("uploading it to %s: %w", snapshotBucket(s.cfg.Name), err)
	}
	sn.size = info.Size
	s.log.Info("storejs: took a snapshot", "cluster", s.cfg.Name, "sequence", sn.seq, "bytes", sn.size)
	return sn, nil
}

// compact deletes all but the newest keepSnapshots snapshots and purges the
// log up to the oldest kept one, but no closer than CompactMargin records to
// the newest. Snapshots past the log's end are of a log that was replaced:
// they are deleted.
func (s *Store) compact(ctx context.Context) error {
	first, last, err := s.jl.bounds(ctx)
	if err != nil {
		return err
	}
	all, err := s.snapshots(ctx)
	if err != nil {
		return err
	}
	var snaps, drop []snapshot
	for _, sn := range all {
		switch {
		case sn.seq > last:
			s.log.Warn("storejs: deleting a snapshot past the log's end (of a replaced log)", "snapshot", sn.name, "log_end", last)
			drop = append(drop, sn)
		case len(snaps) < keepSnapshots:
			snaps = append(snaps, sn)
		default:
			drop = append(drop, sn)
		}
	}
	for _, old := range drop {
		if err := s.snaps.Delete(ctx, old.name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("deleting snapshot %s: %w", old.name, err)
		}
	}
	if s.cfg.CompactMargin < 0 || len(snaps) == 0 || snaps[0].seq <= uint64(s.cfg.CompactMargin) {
		return nil
	}
	through := min(snaps[len(snaps)-1].seq, snaps[0].seq-uint64(s.cfg.CompactMargin))
	if through < first {
		return nil // compacted already
	}
	if err := s.jl.purgeThrough(ctx, through); err != nil {
		return err
	}
	s.log.Info("storejs: compacted the log", "cluster", s.cfg.Name, "through", through)
	return nil
}

// snapshotLoop takes the writer's snapshots (see Config.SnapshotEvery and
// SnapshotInterval) until ctx ends. It belongs to run.
func (s *Store) snapshotLoop(ctx context.Context) {
	every, interval := s.cfg.SnapshotEvery, s.cfg.SnapshotInterval
	if every < 0 && interval < 0 {
		return
	}
	poll := time.Second
	if interval > 0 {
		poll = min(poll, interval)
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var (
		known  bool      // last and at are read from the bucket
		last   uint64    // the newest snapshot's sequence
		at     time.Time // when it was taken (or when this server began writing)
		notYet time.Time // no attempt before (after a failure)
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !s.isLeading() {
			known = false
			continue
		}
		now := s.cfg.Now()
		if !known {
			snaps, err := s.snapshots(ctx)
			if err != nil {
				s.log.Warn("storejs: reading the snapshots", "err", err)
				continue
			}
			known, last, at = true, 0, now
			if len(snaps) > 0 && snaps[0].seq <= s.appliedSeq() { // else of a replaced log
				last, at = snaps[0].seq, snaps[0].taken
			}
		}
		head := s.appliedSeq()
		due := (every > 0 && head >= last+uint64(every)) || (interval > 0 && head > last && now.Sub(at) >= interval)
		if !due || now.Before(notYet) {
			continue
		}
		seq, err := s.Snapshot(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Error("storejs: taking a snapshot", "err", err)
			notYet = now.Add(snapshotRetry)
		case seq > 0:
			last, at = seq, now
		}
	}
}

// openReplica opens the replica, first restoring the newest usable snapshot
// in its place when the file is missing or the compacted log no longer
// continues from its position.
func (s *Store) openReplica(ctx context.Context) error {
	type bounds struct{ first, last uint64 }
	b, err := retryOpen(ctx, func() (bounds, error) {
		first, last, err := s.jl.bounds(ctx)
		return bounds{first, last}, err
	})
	if err != nil {
		return err
	}
	first, last := b.first, b.last
	path := s.cfg.replicaPath()
	// An empty log has nothing a snapshot could hold (one of another log is
	// refused anyway): a new cluster's servers skip the bucket.
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && last > 0 {
		if err := s.restore(ctx, 0, first, last); err != nil {
			return err
		}
	}
	if err := s.openSQLite(ctx); err != nil {
		return err
	}
	pos, err := s.rep.LogPosition(ctx)
	if err != nil {
		return err
	}
	if first <= pos.Seq+1 || s.restored > 0 {
		return nil
	}
	if err := s.rep.Close(); err != nil {
		return err
	}
	s.rep = nil
	if err := s.restore(ctx, pos.Seq, first, last); err != nil {
		return err
	}
	return s.openSQLite(ctx)
}

func (s *Store) openSQLite(ctx context.Context) (err error) {
	s.rep, err = storesqlite.Open(ctx, storesqlite.Config{Path: s.cfg.replicaPath(), Now: s.cfg.Now,
		Durability: storesqlite.DurabilityRelaxed, Logger: s.cfg.Logger, DiskReserve: -1})
	return err
}

// restore puts the newest snapshot past sequence at that checks out in the
// replica's place, trying older ones when it does not. When none does, it is
// an error if the log no longer holds the records after at.
func (s *Store) restore(ctx context.Context, at, first, last uint64) error {
	// A server opening while its cluster elects a meta leader finds no
	// answer for the bucket for a while, as for the log (retryOpen).
	snaps, err := retryOpen(ctx, func() ([]snapshot, error) { return s.snapshots(ctx) })
	if err != nil {
		return err
	}
	var errs []error
	for _, sn := range snaps {
		switch {
		case sn.seq <= at:
			continue
		case sn.seq+1 < first:
			errs = append(errs, fmt.Errorf("%w %s: the log was compacted past it (it starts at %d)", errSnapshot, sn.name, first))
			continue
		case sn.seq > last:
			errs = append(errs, fmt.Errorf("%w %s: past the log's end %d (a snapshot of another log?)", errSnapshot, sn.name, last))
			continue
		}
		err := s.restoreOne(ctx, sn, last)
		if err == nil {
			s.restored = sn.seq
			s.log.Info("storejs: restored the replica from a snapshot", "cluster", s.cfg.Name, "sequence", sn.seq)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Error("storejs: refused a snapshot", "err", err)
		errs = append(errs, err)
	}
	if first <= at+1 {
		if len(errs) > 0 {
			s.log.Warn("storejs: no snapshot restored; applying the whole log", "err", errors.Join(errs...))
		}
		return nil
	}
	where := fmt.Sprintf("is at log sequence %d", at)
	if at == 0 {
		where = "is missing"
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("there is none"))
	}
	return fmt.Errorf("the replica %s %s but stream %s was compacted to start at %d, and no snapshot of %s could be restored: %w",
		s.cfg.replicaPath(), where, streamName(s.cfg.Name), first, snapshotBucket(s.cfg.Name), errors.Join(errs...))
}

// restoreOne downloads sn beside the replica, checks it, and moves it into
// the replica's place.
func (s *Store) restoreOne(ctx context.Context, sn snapshot, last uint64) error {
	path := s.cfg.replicaPath()
	tmp := path + ".restore"
	removeDB(tmp)
	defer removeDB(tmp)
	if err := s.download(ctx, sn, tmp); err != nil {
		return err
	}
	pos, err := storesqlite.SnapshotPosition(ctx, tmp)
	if err != nil {
		return fmt.Errorf("%w %s: %w", errSnapshot, sn.name, err)
	}
	if pos.Seq != sn.seq || !bytes.Equal(pos.State, sn.state.encode()) {
		return fmt.Errorf("%w %s: the copy holds log sequence %d, its metadata says %d (or the hashes differ)", errSnapshot, sn.name, pos.Seq, sn.seq)
	}
	if err := s.checkLink(ctx, sn, last); err != nil {
		return err
	}
	removeDB(path)
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("restoring snapshot %s: %w", sn.name, err)
	}
	return syncDir(filepath.Dir(path))
}

// download writes sn's bytes to path, checking its SHA-256.
func (s *Store) download(ctx context.Context, sn snapshot, path string) error {
	r, err := s.snaps.Get(ctx, sn.name)
	if err != nil {
		return fmt.Errorf("reading snapshot %s: %w", sn.name, err)
	}
	defer r.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("restoring snapshot %s: %w", sn.name, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), r); err != nil {
		return fmt.Errorf("%w %s: reading it: %w", errSnapshot, sn.name, err)
	}
	if sum := h.Sum(nil); !bytes.Equal(sum, sn.sum[:]) {
		return fmt.Errorf("%w %s: its content's SHA-256 %x is not the %x recorded when it was taken (altered or damaged)",
			errSnapshot, sn.name, sum[:8], sn.sum[:8])
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// checkLink checks that the log's first whole record after sn names sn's
// last record as its previous one (nothing to check when the log ends at sn).
func (s *Store) checkLink(ctx context.Context, sn snapshot, last uint64) error {
	if last <= sn.seq {
		return nil
	}
	r, err := s.jl.readFrom(ctx, sn.seq+1)
	if err != nil {
		return err
	}
	defer r.stop()
	e, err := r.nextRecord(ctx, last)
	if errors.Is(err, errTail) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking snapshot %s against the log: %w", sn.name, err)
	}
	rec, err := decodeRecord(e.data)
	if err != nil {
		return fmt.Errorf("checking snapshot %s against the log: the record at %d: %w", sn.name, e.seq, err)
	}
	if rec.prev != sn.state.hash {
		return fmt.Errorf("%w %s: the log's record at %d does not follow it (a snapshot of another log, or its metadata was altered)", errSnapshot, sn.name, e.seq)
	}
	return nil
}

// removeDB removes a SQLite file and its WAL and shared-memory files.
func removeDB(path string) {
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		os.Remove(path + suffix)
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// behind is the error of a follower that finds the log compacted past its
// position while running.
func (s *Store) behind(err error) error {
	return s.fail(fmt.Errorf("replica %s at sequence %d: %w; restart the server to restore the newest snapshot of %s",
		s.cfg.replicaPath(), s.appliedSeq(), err, snapshotBucket(s.cfg.Name)))
}
