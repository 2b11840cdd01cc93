package trellis

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/internal/httpc"
	"github.com/trellis-dev/trellis/internal/problem"
)

// Waits for runs' results through a server are batched, as starts are
// coalesced (remote_starts.go). While fewer than waitsAlone of a client's
// waits are in flight, each waits alone, a GET .../result long poll. Beyond
// that, a wait joins the batch that gathers for waitLinger, and the batch (up
// to maxWaitBatch runs) goes as one GET runs:wait, whose answer gives each run
// as it ends: a service waiting for many runs at once sends one request per
// batch instead of one per run (w1 through a server spent a fifth of its rate
// on them). A run that has not ended when the server's wait is over joins the
// next batch. Only Handle.Result batches: its reference is a run ID, which is
// what runs:wait takes (Client.Wait may be given a workflow ID).
//
// A batch the server refuses or cannot answer (an older server without the
// route, a token refused one run's queue, an error) sends each of its waits
// alone, so that each caller gets the answer its own long poll gets.
const (
	waitsAlone   = 4
	waitLinger   = 2 * time.Millisecond
	maxWaitBatch = 100 // the server's limit (server.maxWaitRuns)
)

// waits batches a remote client's concurrent waits (see waitsAlone). The
// goroutines that gather and send batches belong to it: close fails what is
// queued and waits for them.
type waits struct {
	r      *remote
	ctx    context.Context // of batches: no caller's, ended by close
	cancel context.CancelFunc

	mu          sync.Mutex
	alone       int
	queue       []*queuedWait
	gathering   bool // a batch gathers: its goroutine takes the queue after waitLinger
	closed      bool
	unsupported bool // the server has no runs:wait: every wait goes alone
	senders     sync.WaitGroup
}

type queuedWait struct {
	ctx   context.Context
	id    string
	done  chan struct{} // closed when run or err is set, or alone
	run   *Run
	err   error
	alone bool // the batch could not be waited for: wait alone
}

func newWaits(r *remote) *waits {
	ctx, cancel := context.WithCancel(context.Background())
	return &waits{r: r, ctx: ctx, cancel: cancel}
}

// wait waits for the run with ID runID to end: alone, or in a batch.
func (ws *waits) wait(ctx context.Context, runID string) (*Run, error) {
	ws.mu.Lock()
	if ws.alone < waitsAlone || ws.closed || ws.unsupported {
		ws.alone++
		ws.mu.Unlock()
		defer ws.aloneDone()
		return ws.r.wait(ctx, runID)
	}
	q := &queuedWait{ctx: ctx, id: runID, done: make(chan struct{})}
	ws.enqueueLocked(q)
	ws.mu.Unlock()
	select {
	case <-q.done:
		if q.alone {
			return ws.r.wait(ctx, runID)
		}
		return q.run, q.err
	case <-ctx.Done():
		return nil, ctx.Err() // the batch drops it
	}
}

func (ws *waits) aloneDone() {
	ws.mu.Lock()
	ws.alone--
	ws.mu.Unlock()
}

// enqueueLocked queues qs and starts a batch gathering when none is; ws.mu is
// held.
func (ws *waits) enqueueLocked(qs ...*queuedWait) {
	ws.queue = append(ws.queue, qs...)
	if !ws.gathering {
		ws.gathering = true
		ws.senders.Go(ws.gather)
	}
}

// gather lets waits join the queue for waitLinger, then sends the next batch
// (and starts the one after when more are queued).
func (ws *waits) gather() {
	t := time.NewTimer(waitLinger)
	select {
	case <-t.C:
	case <-ws.ctx.Done():
	}
	t.Stop()
	ws.mu.Lock()
	ws.gathering = false
	ids, byID := ws.takeLocked()
	if len(ws.queue) > 0 {
		ws.gathering = true
		ws.senders.Go(ws.gather)
	}
	ws.mu.Unlock()
	if len(ids) > 0 {
		ws.send(ids, byID)
	}
}

// takeLocked removes the next batch from the queue: up to maxWaitBatch runs,
// each once, with the callers waiting for each. Callers that have gone are
// dropped.
func (ws *waits) takeLocked() ([]string, map[string][]*queuedWait) {
	var ids []string
	byID := map[string][]*queuedWait{}
	n := 0
	for _, q := range ws.queue {
		if _, ok := byID[q.id]; !ok && len(ids) == maxWaitBatch {
			break
		}
		n++
		if q.ctx.Err() != nil {
			continue
		}
		if _, ok := byID[q.id]; !ok {
			ids = append(ids, q.id)
		}
		byID[q.id] = append(byID[q.id], q)
	}
	ws.queue = ws.queue[n:]
	return ids, byID
}

// waitLine is a line of GET runs:wait's answer (server.WaitLine).
type waitLine struct {
	Run     *Run             `json:"run"`
	Missing string           `json:"missing"`
	Done    bool             `json:"done"`
	Error   *json.RawMessage `json:"error"`
}

// send waits for a batch with one GET runs:wait and hands each caller its run
// as its line comes. Runs the answer did not report wait in the next batch
// (the wait was over, or the answer was cut after some lines), or alone when
// the server refused the batch or answered nothing.
func (ws *waits) send(ids []string, byID map[string][]*queuedWait) {
	reported := 0
	deliver := func(id string, run *Run, err error) {
		qs, ok := byID[id]
		if !ok {
			return // not asked for, or reported already
		}
		for _, q := range qs {
			q.run, q.err = run, err
			close(q.done)
		}
		delete(byID, id)
		reported++
	}
	// A server that stops answering: the wait only ever shortens.
	ctx, cancel := context.WithTimeout(ws.ctx, time.Duration(ws.r.pollWait.Load())+time.Minute)
	defer cancel()
	resp, err := ws.open(ctx, ids)
	failed := err != nil // the batch got no last line saying done
	if err == nil {
		rd := waitReaders.Get().(*bufio.Reader)
		rd.Reset(resp.Body)
		for {
			l, err := readWaitLine(rd, ws.r.maxAnswer)
			if err != nil || l.Done || l.Error != nil {
				failed = err != nil || l.Error != nil
				break
			}
			switch {
			case l.Run != nil:
				deliver(l.Run.ID, l.Run, nil)
			case l.Missing != "":
				deliver(l.Missing, nil, runNotFound(l.Missing))
			}
		}
		resp.Body.Close()
		rd.Reset(nil)
		waitReaders.Put(rd)
	} else if p, ok := httpc.IsProblem(err); ok && (p.Status == http.StatusNotFound || p.Status == http.StatusMethodNotAllowed) && p.Code != "namespace_not_found" {
		ws.mu.Lock()
		ws.unsupported = true // a server from before runs:wait
		ws.mu.Unlock()
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var again []*queuedWait
	for _, qs := range byID {
		for _, q := range qs {
			switch {
			case q.ctx.Err() != nil:
			case ws.closed:
				q.err = fmt.Errorf("waiting for run %s: %w", q.id, ErrClosed)
				close(q.done)
			case reported == 0 && failed, ws.unsupported:
				// Refused, failed or cut before any line: each caller's
				// own long poll gets its own answer (and retries).
				q.alone = true
				close(q.done)
			default:
				again = append(again, q)
			}
		}
	}
	if len(again) > 0 {
		ws.enqueueLocked(again...)
	}
}

// open sends GET runs:wait for ids. A server whose longest wait is shorter
// than the client's refuses the request (400): the wait shortens as a single
// long poll's does (remote.shortenWait), and the request goes again.
func (ws *waits) open(ctx context.Context, ids []string) (*http.Response, error) {
	for {
		wait := time.Duration(ws.r.pollWait.Load())
		call := httpc.Call{Method: http.MethodGet, Path: ws.r.ns + "/runs:wait",
			Query: url.Values{"runs": {strings.Join(ids, ",")}, "wait": {wait.String()}}}
		resp, err := ws.r.hc.Open(ctx, call, nil)
		if err == nil || !ws.r.shortenWait(wait, remoteErr(err)) {
			return resp, err
		}
	}
}

// waitReaders are the readers of runs:wait answers, reused: a batch's answer
// is read through a 64 KiB buffer (a line longer than that is gathered across
// reads, readWaitLine), which was a tenth of what a client allocated for w1.
var waitReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// readWaitLine reads one line of the answer, up to limit bytes.
func readWaitLine(rd *bufio.Reader, limit int64) (*waitLine, error) {
	var buf []byte
	for {
		chunk, err := rd.ReadSlice('\n')
		buf = append(buf, chunk...)
		if int64(len(buf)) > limit {
			return nil, fmt.Errorf("a line of runs:wait longer than %d bytes", limit)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // no last line: the answer was cut
			}
			return nil, err
		}
	}
	var l waitLine
	if err := json.Unmarshal(buf, &l); err != nil {
		return nil, fmt.Errorf("decoding a line of runs:wait: %w", err)
	}
	return &l, nil
}

// runNotFound is the error a wait for a run the namespace does not hold
// gets: the problem GET .../result answers with, through remoteErr as every
// other answer of the server.
func runNotFound(id string) error {
	e, _ := problem.For(ErrRunNotFound)
	return remoteErr(&httpc.Problem{Status: e.Status, Code: e.Code, Title: e.Title,
		Detail: fmt.Sprintf("waiting for run %s: %v", id, ErrRunNotFound)})
}

// close fails the queued waits with ErrClosed and waits for the batches in
// flight, whose requests it cancels.
func (ws *waits) close() {
	ws.mu.Lock()
	ws.closed = true
	for _, q := range ws.queue {
		q.err = fmt.Errorf("waiting for run %s: %w", q.id, ErrClosed)
		close(q.done)
	}
	ws.queue = nil
	ws.mu.Unlock()
	ws.cancel()
	ws.senders.Wait()
}
