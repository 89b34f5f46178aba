package limiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A push talks to the limiter twice: once for its decision (Dispatch) and once with
// the channel's answer (Settle). Each is one round trip, whatever it carries: the
// methods below send the script calls the single-purpose methods (Reserve, Release,
// Adapt, Outcome, Backoff, GateEpoch) make, together, on one pipeline.
//
// They do so without a second copy of any call's keys, arguments or reply parsing:
// each method runs once against a recorder that keeps its script call instead of
// sending it, the recorded calls go out on one pipeline, and each method runs again
// against the replies, parsing them as it always does.

// pipeliner is the part of a go-redis client that sends several commands in one
// round trip; *redis.Client, *redis.ClusterClient and redis.UniversalClient have it.
type pipeliner interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// errRecorded is what a recorded call answers while it is only being recorded.
var errRecorded = errors.New("script call recorded, not sent")

// scriptCall is one script call of a Limiter method (or, with fn, one call of a
// function of the library), and its reply once it came.
type scriptCall struct {
	sha   string
	fn    string
	keys  []string
	args  []any
	reply *redis.Cmd
}

// recorder is a Client that never talks to Redis: recording, it keeps each
// script call and answers errRecorded; replaying, it answers each call, in order,
// with the reply the pipeline brought back.
type recorder struct {
	calls  []*scriptCall
	next   int
	replay bool
}

func (r *recorder) call(sha string, keys []string, args []any) *redis.Cmd {
	if !r.replay {
		r.calls = append(r.calls, &scriptCall{sha: sha, keys: keys, args: args})
		return redis.NewCmdResult(nil, errRecorded)
	}
	if r.next >= len(r.calls) {
		return redis.NewCmdResult(nil, errors.New("limiter: replay made more calls than it recorded"))
	}
	c := r.calls[r.next]
	r.next++
	return c.reply
}

// A script's source is recorded by its SHA1: the limiter's scripts are known by it.
func (r *recorder) Eval(_ context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return r.call(redis.NewScript(src).Hash(), keys, args)
}

func (r *recorder) EvalSha(_ context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return r.call(sha, keys, args)
}

func (r *recorder) EvalRO(_ context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return r.call(redis.NewScript(src).Hash(), keys, args)
}

func (r *recorder) EvalShaRO(_ context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return r.call(sha, keys, args)
}

func (r *recorder) FCall(_ context.Context, fn string, keys []string, args ...any) *redis.Cmd {
	if !r.replay {
		r.calls = append(r.calls, &scriptCall{fn: fn, keys: keys, args: args})
		return redis.NewCmdResult(nil, errRecorded)
	}
	return r.call("", keys, args)
}

func (r *recorder) FunctionLoad(ctx context.Context, _ string) *redis.StringCmd {
	c := redis.NewStringCmd(ctx)
	c.SetErr(errors.New("limiter: recorder runs no script commands"))
	return c
}

func (r *recorder) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	c := redis.NewBoolSliceCmd(ctx)
	c.SetErr(errors.New("limiter: recorder runs no script commands"))
	return c
}

func (r *recorder) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	c := redis.NewStringCmd(ctx)
	c.SetErr(errors.New("limiter: recorder runs no script commands"))
	return c
}

// batch runs the limiter calls fn makes in one round trip (in MULTI/EXEC when tx,
// so that they see one state of Redis), with extra commands appended by more after
// them. fn runs twice — recording, then reading the replies — so it must make the
// same calls both times and act only on the second run's results (its second
// argument is true then).
func (l *Limiter) batch(ctx context.Context, tx bool, fn func(l *Limiter, replay bool),
	more func(redis.Pipeliner)) error {
	rec := &recorder{}
	lr := *l
	lr.rdb = rec
	fn(&lr, false)
	if err := l.send(ctx, tx, rec.calls, more); err != nil {
		for _, c := range rec.calls {
			if c.reply == nil {
				c.reply = redis.NewCmdResult(nil, err)
			}
		}
	}
	rec.replay = true
	fn(&lr, true)
	return nil
}

// send sends calls, and more, on one pipeline, loading the scripts and the library
// first when the server does not know them (after a restart). A client that cannot
// pipeline gets the calls one by one: still correct for Settle, not atomic for
// Dispatch.
func (l *Limiter) send(ctx context.Context, tx bool, calls []*scriptCall, more func(redis.Pipeliner)) error {
	p, ok := l.rdb.(pipeliner)
	if !ok {
		for _, c := range calls {
			if c.fn != "" {
				c.reply = l.fcall(ctx, c.fn, c.keys, c.args...)
			} else {
				c.reply = scripts[c.sha].Run(ctx, l.rdb, c.keys, c.args...)
			}
		}
		return nil
	}
	run := p.Pipelined
	if tx {
		run = p.TxPipelined
	}
	todo := calls
	for attempt := 0; ; attempt++ {
		_, err := run(ctx, func(pipe redis.Pipeliner) error {
			for _, c := range todo {
				if c.fn != "" {
					c.reply = pipe.FCall(ctx, c.fn, c.keys, c.args...)
				} else {
					c.reply = scripts[c.sha].EvalSha(ctx, pipe, c.keys, c.args...)
				}
			}
			if more != nil && (tx || attempt == 0) {
				more(pipe)
			}
			return nil
		})
		if attempt > 0 || !(unknown(err) || slices.ContainsFunc(todo, unknownCall)) {
			// Each reply carries its own error; a call that failed shows it to its
			// method as a direct call would.
			return nil
		}
		loaded := false
		for _, c := range todo {
			if c.fn == "" {
				if err := scripts[c.sha].Load(ctx, l.rdb).Err(); err != nil {
					return fmt.Errorf("load limiter script: %w", err)
				}
			} else if !loaded {
				if err := loadLibrary(ctx, l.rdb); err != nil {
					return err
				}
				loaded = true
			}
		}
		// A transaction goes again whole: the call the server did not know changed
		// nothing, and the others (Dispatch's: the gate's epoch, the slot's score and
		// the clock) only read, so they run again in the same atomic step as the
		// decision. Outside one, only the calls it did not know go again: the others
		// took effect, and must not twice (a breaker's failure counted twice, say).
		if !tx {
			todo = slices.DeleteFunc(slices.Clone(todo), func(c *scriptCall) bool { return !unknownCall(c) })
		}
	}
}

// unknown reports whether the server did not know a script or the library: a call
// after a Redis restart (EXECABORT: a transaction that held such a call).
func unknown(err error) bool {
	return err != nil && (strings.HasPrefix(err.Error(), "NOSCRIPT") ||
		strings.HasPrefix(err.Error(), "EXECABORT") || noFunction(err))
}

func unknownCall(c *scriptCall) bool { return c.reply != nil && unknown(c.reply.Err()) }

// Dispatched is a Reserve's decision with what the caller needs to act on it safely.
type Dispatched struct {
	Decision
	// Epoch is the ordering gate's epoch read in the same atomic step as the decision:
	// "" means Redis lost the gate and the decision cannot be trusted (rebuild the
	// gate, give back a Send's lease and ask again).
	Epoch string
	// Late is how far past its slot a Send already is at the decision (a holder that
	// came back after its slot): the call must start within Margin - Late.
	Late time.Duration
}

// Dispatch is Reserve with the gate's epoch and the slot's lateness read in the same
// MULTI/EXEC, so one round trip tells whether the gate that decided was whole and
// how much of the margin is left for the call to start.
func (l *Limiter) Dispatch(ctx context.Context, r Request) (Dispatched, error) {
	ck, err := l.channel(r.Channel)
	if err != nil {
		return Dispatched{}, fmt.Errorf("reserve %s: %w", r.Channel, err)
	}
	var out Dispatched
	var derr, eerr error
	var slot *redis.FloatCmd
	var clock *redis.TimeCmd
	_ = l.batch(ctx, true, func(lr *Limiter, replay bool) {
		epoch, e1 := lr.GateEpoch(ctx, r.Channel)
		d, e2 := lr.Reserve(ctx, r)
		if replay {
			out.Epoch, out.Decision, eerr, derr = epoch, d, e1, e2
		}
	}, func(pipe redis.Pipeliner) {
		// A Send's slot stays in the schedule under the request's id, scored by its
		// slot time: with the server's clock it gives the lateness.
		slot = pipe.ZScore(ctx, ck.base+"sched:"+ck.scope(r.Property, r.Family), r.ID)
		clock = pipe.Time(ctx)
	})
	if derr != nil {
		return Dispatched{}, derr
	}
	if eerr != nil {
		return Dispatched{}, eerr
	}
	if out.State == Send && slot.Err() == nil && clock.Err() == nil {
		at := time.UnixMilli(0).Add(time.Duration(slot.Val() * float64(time.Millisecond)))
		out.Late = max(0, clock.Val().Sub(at))
	}
	return out, nil
}

// Margin is how late after its slot a request may reach its channel (Options.Margin).
func (l *Limiter) Margin() time.Duration { return l.opts.Margin }

// RateLimit is what a channel's rate-limit headers said (see Adapt).
type RateLimit struct {
	Limit, Remaining int
	Reset            time.Duration
}

// Settlement is what one push's answer tells the limiter.
type Settlement struct {
	// Request was pushed: its lease is released, unless Unsettled.
	Request Request
	// Unsettled says the answer does not tell whether the channel applied the
	// request (a timeout, a lost connection, a 5xx): the lease is kept until it
	// expires, so no newer version of its nights goes out while the channel may
	// still apply this one. A retry of the request (same ID) is not held by it.
	Unsettled bool
	// Backoff, when positive, holds every worker off the scope the answer came
	// from (a 429's Retry-After): the request's property on a channel that limits
	// per property, else the channel (BackoffScope).
	Backoff time.Duration
	// RateLimit, when set, adapts the rate to the channel's headers.
	RateLimit *RateLimit
	// Healthy, when set, feeds the circuit breaker: false for a 5xx or a timeout.
	Healthy *bool
	// Next, when set, holds the slot of the lane's next request (Hold is implied).
	Next *Request
}

// Settled is what Settle changed.
type Settled struct {
	// Breaker is the circuit breaker's state and BreakerChanged whether this answer
	// opened or closed it; empty when Healthy was not set.
	Breaker        string
	BreakerChanged bool
	// Next is the decision for the held next request (State Wait when held).
	Next Decision
}

// Settle tells the limiter, in one round trip, what a push's answer came to: the
// back-off, the rate-limit headers, the breaker's feed, the lease's release (unless
// Unsettled) and the hold of the lane's next slot, in that order. Each part fails on
// its own; the error joins those that did, and a failed part changes nothing the
// others did.
func (l *Limiter) Settle(ctx context.Context, s Settlement) (Settled, error) {
	var out Settled
	var errs []error
	_ = l.batch(ctx, false, func(lr *Limiter, replay bool) {
		var got Settled
		var es []error
		if s.Backoff > 0 {
			es = append(es, lr.BackoffScope(ctx, s.Request.Channel, s.Request.Property, s.Request.Family, s.Backoff))
		}
		if rl := s.RateLimit; rl != nil {
			es = append(es, lr.Adapt(ctx, s.Request.Channel, s.Request.Property, s.Request.Family,
				rl.Limit, rl.Remaining, rl.Reset))
		}
		if s.Healthy != nil {
			var err error
			got.Breaker, got.BreakerChanged, err = lr.Outcome(ctx, s.Request.Channel, *s.Healthy)
			es = append(es, err)
		}
		if !s.Unsettled {
			es = append(es, lr.Release(ctx, s.Request))
		}
		if s.Next != nil {
			next := *s.Next
			next.Hold = true
			var err error
			got.Next, err = lr.Reserve(ctx, next)
			es = append(es, err)
		}
		if replay {
			out, errs = got, es
		}
	}, nil)
	return out, errors.Join(errs...)
}
