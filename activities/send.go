package activities

import (
	"context"
	"errors"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/models"
)

// send makes p's channel call with the nights the gate let through; late is true
// when the call could not start within the slot's margin and nothing was written.
func (a *Activities) send(ctx context.Context, p *push) (resp channels.PushResponse, late bool, err error) {
	sent, _ := p.req.WithoutNights(p.d.Dropped)
	return a.pushWithin(ctx, sent, p.startBy)
}

// errLate is the cause a channel call is cancelled with when it could not start
// within the margin of its slot.
var errLate = errors.New("channel call could not start within the margin of its slot")

// pushWithin makes send's channel call unless it cannot start by startBy: a call
// that has not got its connection by then (the moment before the request is
// written) is cancelled with nothing written, and late is true. The channel then
// never sees a request later than the limiter's margin allows.
func (a *Activities) pushWithin(ctx context.Context, send models.ChannelRequest, startBy time.Time) (channels.PushResponse, bool, error) {
	const (
		pending int32 = iota
		started
		late
	)
	wait := time.Until(startBy)
	if wait <= 0 {
		return channels.PushResponse{}, true, nil
	}
	var state atomic.Int32
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	callCtx = httptrace.WithClientTrace(callCtx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { state.CompareAndSwap(pending, started) },
	})
	timer := time.AfterFunc(wait, func() {
		if state.CompareAndSwap(pending, late) {
			cancel(errLate)
		}
	})
	defer timer.Stop()
	resp, err := a.Client.Push(callCtx, send)
	if state.Load() == late {
		return channels.PushResponse{}, true, nil
	}
	return resp, false, err
}

// maxLateAttempts bounds how often one PushRequest asks for a new slot because its
// call could not start within the margin of the last one.
const maxLateAttempts = 3
