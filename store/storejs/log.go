package storejs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The log of a Trellis cluster is one JetStream stream, TRELLIS_<name>, with
// one subject, trellis.<name>.log. Every message is a record, or a fragment
// of one (header Trellis-Frag: "i/n"); a writer appends each with
// Nats-Expected-Last-Sequence set to the stream's last sequence as it knows
// it, so that a second writer's message makes every later append of the
// first fail. Its Nats-Msg-Id, "<epoch>.<sequence>", lets a writer whose
// acknowledgement was lost send the same message again: JetStream answers a
// duplicate within the stream's duplicate window with the first one's
// sequence instead of storing it twice.

const (
	// fragmentSize is the largest message a record is split into: below the
	// default max_payload of a NATS server (1 MiB) with room for headers.
	fragmentSize = 512 << 10
	hdrFrag      = "Trellis-Frag"
	// publishAttempts is how many times an append whose outcome is unknown is
	// sent again before the writer gives up and steps down.
	publishAttempts = 4
	// duplicateWindow is how long JetStream remembers message IDs.
	duplicateWindow = 2 * time.Minute
)

// publishTimeout bounds one attempt of an append (a variable for tests).
var publishTimeout = 5 * time.Second

// appendRetryWait is the pause before an append is sent again when the
// stream had no leader to take it (an election: a few seconds).
const appendRetryWait = 100 * time.Millisecond

// readHeartbeat is how often the server holding a reader's consumer says it
// is alive while the log is idle. A reader that misses two ends with an
// error, and its follower reads on with a new consumer from where it
// stopped (readFrom): when the server holding the consumer is killed, a
// follower goes on applying the log after about two heartbeats. nats.go's
// default (5 s) made such a follower apply nothing for 10 s after a
// SIGKILL, and so answer nothing it forwarded (it waits to read its own
// writes) for as long.
var readHeartbeat = time.Second

var (
	// errFenced: another writer appended to the log since this one's last
	// record (the expected last sequence did not match).
	errFenced = errors.New("storejs: another server took over writing the log")
	// errUnknownOutcome: an append was not acknowledged; it may be in the log.
	errUnknownOutcome = errors.New("storejs: the log did not acknowledge a write in time; it may or may not have been recorded")
	// errStaleEpoch: a server's lease is of an epoch the log already holds
	// (or a lower one); it does not write.
	errStaleEpoch = errors.New("storejs: the writer lease's epoch is behind the log's")
	// errBehind: the log was compacted past what a replica applied; it needs
	// a snapshot.
	errBehind = errors.New("storejs: the log was compacted past the replica's position")
)

func streamName(name string) string { return "TRELLIS_" + name }
func logSubject(name string) string { return "trellis." + name + ".log" }

// jsLog is the stream of one cluster.
type jsLog struct {
	log     *slog.Logger
	js      jetstream.JetStream
	stream  jetstream.Stream
	name    string
	subject string
}

// openLog creates the cluster's stream when missing (with replicas copies)
// and checks the settings the log depends on when it exists.
func openLog(ctx context.Context, js jetstream.JetStream, name string, replicas int, log *slog.Logger) (*jsLog, error) {
	cfg := jetstream.StreamConfig{
		Name:        streamName(name),
		Description: "Trellis commit log of cluster " + name,
		Subjects:    []string{logSubject(name)},
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		Duplicates:  duplicateWindow,
		DenyDelete:  true,
	}
	st, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("opening stream %s: %w", cfg.Name, err)
	}
	info := st.CachedInfo()
	switch {
	case info.Config.Storage != jetstream.FileStorage:
		return nil, fmt.Errorf("stream %s keeps its messages in memory: the log needs file storage", cfg.Name)
	case info.Config.MaxMsgs > 0 || info.Config.MaxBytes > 0 || info.Config.MaxAge > 0:
		return nil, fmt.Errorf("stream %s has limits (max_msgs, max_bytes or max_age) that would drop log records", cfg.Name)
	case info.Config.Replicas != replicas:
		return nil, fmt.Errorf("stream %s has %d replicas, the store URL asks for %d", cfg.Name, info.Config.Replicas, replicas)
	}
	return &jsLog{log: log, js: js, stream: st, name: name, subject: cfg.Subjects[0]}, nil
}

// last returns the stream's last sequence (0: empty).
func (l *jsLog) last(ctx context.Context) (uint64, error) {
	info, err := l.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the log's last sequence: %w", err)
	}
	return info.State.LastSeq, nil
}

// bounds returns the stream's first and last sequences: the log holds the
// messages from first to last (first is last+1 when compaction removed them
// all, and 0 when the log is empty).
func (l *jsLog) bounds(ctx context.Context) (first, last uint64, err error) {
	info, err := l.stream.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("reading the log's first and last sequences: %w", err)
	}
	return info.State.FirstSeq, info.State.LastSeq, nil
}

// compacted reports whether the log no longer holds the message at seq
// because compaction removed it.
func (l *jsLog) compacted(ctx context.Context, seq uint64) (bool, error) {
	first, _, err := l.bounds(ctx)
	return err == nil && first > seq, err
}

// purgeThrough removes the log's messages up to seq (compaction).
func (l *jsLog) purgeThrough(ctx context.Context, seq uint64) error {
	if err := l.stream.Purge(ctx, jetstream.WithPurgeSequence(seq+1)); err != nil {
		return fmt.Errorf("compacting the log through sequence %d: %w", seq, err)
	}
	return nil
}

// appendRecord appends data after sequence after, in fragments when large,
// and returns the sequence of its last message. epoch names the writer in
// the messages' IDs.
func (l *jsLog) appendRecord(ctx context.Context, data []byte, after, epoch uint64) (uint64, error) {
	n := max(1, (len(data)+fragmentSize-1)/fragmentSize)
	seq := after
	for i := range n {
		part := data[i*len(data)/n : (i+1)*len(data)/n]
		msg := &nats.Msg{Subject: l.subject, Data: part}
		if n > 1 {
			msg.Header = nats.Header{hdrFrag: []string{strconv.Itoa(i+1) + "/" + strconv.Itoa(n)}}
		}
		var err error
		if seq, err = l.publish(ctx, msg, seq, epoch); err != nil {
			return 0, err
		}
	}
	return seq, nil
}

// publish appends one message after sequence after. An attempt that is not
// answered is sent again with the same message ID; when a later attempt is
// refused because the stream moved, the message at after+1 tells whether the
// earlier attempt was stored after all. A stream electing its leader has no
// server to take the message: such attempts (nothing stored) are sent again
// every appendRetryWait. It gives up after publishAttempts attempts left
// unanswered, after publishAttempts times publishTimeout, or when ctx ends.
func (l *jsLog) publish(ctx context.Context, msg *nats.Msg, after, epoch uint64) (uint64, error) {
	id := strconv.FormatUint(epoch, 10) + "." + strconv.FormatUint(after+1, 10)
	unanswered := 0
	var lastErr error
	giveUp := time.Now().Add(publishAttempts * publishTimeout)
	for unanswered < publishAttempts && time.Now().Before(giveUp) {
		actx, cancel := context.WithTimeout(ctx, publishTimeout)
		ack, err := l.js.PublishMsg(actx, msg, jetstream.WithExpectLastSequence(after), jetstream.WithMsgID(id),
			jetstream.WithRetryWait(appendRetryWait))
		cancel()
		if err == nil {
			return ack.Sequence, nil
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			switch apiErr.ErrorCode {
			case jetstream.JSErrCodeStreamWrongLastSequence:
				if unanswered > 0 && l.storedAs(ctx, after+1, id) {
					return after + 1, nil
				}
				return 0, errFenced
			case jetstream.JSErrCodeStreamWrongLastSequenceConstant:
				// R>1: another write to the subject was in flight; try again.
				lastErr = err
				time.Sleep(time.Millisecond)
				continue
			}
			return 0, fmt.Errorf("appending to the log: %w", err)
		}
		lastErr = err
		if !errors.Is(err, jetstream.ErrNoStreamResponse) {
			unanswered++ // sent, and maybe stored
			l.log.Warn("storejs: an append to the log was not answered; sending it again", "sequence", after+1, "attempt", unanswered, "err", err)
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(appendRetryWait):
		}
	}
	switch {
	case unanswered == 0:
		// Nothing reached a server of the stream: not stored.
		return 0, fmt.Errorf("appending to the log: %w", lastErr)
	case ctx.Err() != nil:
		return 0, errUnknownOutcome
	}
	if l.storedAs(ctx, after+1, id) {
		return after + 1, nil
	}
	return 0, errUnknownOutcome
}

// storedAs reports whether the message at seq carries message ID id.
func (l *jsLog) storedAs(ctx context.Context, seq uint64, id string) bool {
	gctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	m, err := l.stream.GetMsg(gctx, seq)
	return err == nil && m.Header.Get(jetstream.MsgIDHeader) == id
}

// logReader reads the log's records in order from a sequence on,
// reassembling fragments.
type logReader struct {
	l    *jsLog
	src  msgSource
	next uint64 // the sequence expected next
}

// logMsg is one message of the log: its sequence, fragment header and data.
type logMsg struct {
	seq  uint64
	frag string
	data []byte
}

// msgSource gives a reader the log's messages in order.
type msgSource interface {
	next(ctx context.Context) (logMsg, error)
	stop()
}

// consumerSource reads through an ordered consumer: a follower's way, which
// waits for new records.
type consumerSource struct{ it jetstream.MessagesContext }

func (c consumerSource) next(ctx context.Context) (logMsg, error) {
	m, err := c.it.Next(jetstream.NextContext(ctx))
	if err != nil {
		return logMsg{}, err
	}
	meta, err := m.Metadata()
	if err != nil {
		return logMsg{}, fmt.Errorf("reading the log: %w", err)
	}
	return logMsg{seq: meta.Sequence.Stream, frag: m.Headers().Get(hdrFrag), data: m.Data()}, nil
}

func (c consumerSource) stop() { c.it.Stop() }

// getSource asks the stream's leader for each message by its sequence. It
// needs no consumer, whose creation goes through JetStream's meta leader: a
// server taking the writing over after its predecessor's SIGKILL waited out
// the meta group's election (5-7 s in the three-process test) when the
// killed server had led it too. It reads only what the log holds.
type getSource struct {
	stream jetstream.Stream
	seq    uint64
}

// errNoMessage: a getSource found no message at a sequence (compacted away,
// or not on the replica answering); the caller reads with a consumer instead.
var errNoMessage = errors.New("no message at the sequence")

func (g *getSource) next(ctx context.Context) (logMsg, error) {
	m, err := g.stream.GetMsg(ctx, g.seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return logMsg{}, fmt.Errorf("reading the log at %d: %w", g.seq, errNoMessage)
	}
	if err != nil {
		return logMsg{}, fmt.Errorf("reading the log at %d: %w", g.seq, err)
	}
	g.seq++
	return logMsg{seq: m.Sequence, frag: m.Header.Get(hdrFrag), data: m.Data}, nil
}

func (g *getSource) stop() {}

// readByGets reads from seq by a getSource (records up to a known sequence:
// nextRecord's limit).
func (l *jsLog) readByGets(seq uint64) *logReader {
	return &logReader{l: l, src: &getSource{stream: l.stream, seq: seq}, next: seq}
}

// readFrom starts reading at seq, through a consumer of its own: an
// ephemeral pull consumer in memory, with one replica, that JetStream deletes
// once it has been idle for readerIdle (a reader stopped, or its process
// killed). It is not nats.go's ordered consumer, which makes a new consumer
// by itself when the one it reads from stops answering (its server killed),
// retrying with a backoff that grows to 10 s, each attempt waiting up to
// 10 s, none of which its reader's context can cut short: while JetStream's
// meta group elected a leader after a SIGKILL, a follower applied nothing for
// 12 s and more, and answered no write forwarded through it (it waits to read
// its own writes). Here a reader's consumer that stops answering (two missed
// heartbeats), or that the server deletes, ends the read with an error; the
// follower catches up meanwhile by asking the stream's leader for each record
// (followGets) and makes a new consumer, within its own deadline.
func (l *jsLog) readFrom(ctx context.Context, seq uint64) (*logReader, error) {
	cctx, cancel := context.WithTimeout(ctx, consumerTimeout)
	defer cancel()
	c, err := l.stream.CreateConsumer(cctx, jetstream.ConsumerConfig{
		FilterSubject:     l.subject,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       seq,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: readerIdle,
		Replicas:          1,
		MemoryStorage:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("reading the log from %d: %w", seq, err)
	}
	it, err := c.Messages(jetstream.PullMaxMessages(512), jetstream.PullHeartbeat(readHeartbeat),
		jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		return nil, fmt.Errorf("reading the log from %d: %w", seq, err)
	}
	return &logReader{l: l, src: consumerSource{it}, next: seq}, nil
}

// consumerTimeout bounds the creation of a reader's consumer (a variable
// for tests).
var consumerTimeout = 2 * time.Second

// readerIdle is how long a reader's consumer outlives its last pull.
const readerIdle = 30 * time.Second

func (r *logReader) stop() { r.src.stop() }

// entry is a whole record read from the log: its bytes and the sequence of
// its last message.
type entry struct {
	seq  uint64
	data []byte
}

// errTail: the log holds no whole record up to the limit given.
var errTail = errors.New("no whole record up to the limit")

// nextRecord returns the next whole record, waiting for one until ctx ends.
// With limit > 0 it reads no message past that sequence, and returns errTail
// when it reached it without a whole record. A record whose fragments stop
// short (its writer was deposed in the middle of it) is skipped: it was never
// acknowledged.
func (r *logReader) nextRecord(ctx context.Context, limit uint64) (entry, error) {
	var parts [][]byte
	want := 0
	for {
		if limit > 0 && r.next > limit {
			return entry{}, errTail
		}
		m, err := r.src.next(ctx)
		if err != nil {
			return entry{}, err
		}
		seq := m.seq
		if seq != r.next {
			return entry{}, r.gap(ctx, seq)
		}
		r.next = seq + 1
		i, n, err := fragment(m.frag)
		if err != nil {
			return entry{}, fmt.Errorf("%w at sequence %d: %v", errCorrupt, seq, err)
		}
		if i == 1 || i != len(parts)+1 || n != want {
			parts, want = nil, n // a new record; an unfinished one before it is dropped
			if i != 1 {
				continue // the rest of a record whose start was dropped
			}
		}
		parts = append(parts, m.data)
		if len(parts) == want {
			var data []byte
			if want == 1 {
				data = parts[0]
			} else {
				for _, p := range parts {
					data = append(data, p...)
				}
			}
			return entry{seq: seq, data: data}, nil
		}
	}
}

// gap is the error of a message at seq where r.next was expected: the log
// was compacted past the reader's position (errBehind), a delivery was lost
// on the way while the log holds the message (errDelivery: read again), or
// the log lost messages (errCorrupt).
func (r *logReader) gap(ctx context.Context, seq uint64) error {
	if seq < r.next {
		return fmt.Errorf("%w: sequence %d came again after %d", errDelivery, seq, r.next-1)
	}
	compacted, err := r.l.compacted(ctx, r.next)
	if err != nil {
		return err
	}
	if compacted {
		return fmt.Errorf("%w: the reader wanted sequence %d, the log now starts at %d", errBehind, r.next, seq)
	}
	gctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	_, err = r.l.stream.GetMsg(gctx, r.next)
	switch {
	case err == nil:
		return fmt.Errorf("%w: sequence %d came after %d, and the log holds %d", errDelivery, seq, r.next-1, r.next)
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return fmt.Errorf("reading the log at %d after a gap in its delivery: %w", r.next, err)
	}
	return fmt.Errorf("%w: the log skips from sequence %d to %d", errCorrupt, r.next-1, seq)
}

// errDelivery: a reader's consumer skipped or repeated a message the log
// holds; the reader starts again from the replica's position.
var errDelivery = errors.New("storejs: the log's delivery skipped or repeated a message")

// fragment parses a Trellis-Frag header ("" is 1/1).
func fragment(h string) (i, n int, err error) {
	if h == "" {
		return 1, 1, nil
	}
	a, b, ok := strings.Cut(h, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || i < 1 || i > n {
		return 0, 0, fmt.Errorf("fragment header %q", h)
	}
	return i, n, nil
}
