package models

import "time"

// PushActivityTimeout is the StartToCloseTimeout of a push activity. It is also how
// long Temporal takes to notice a worker that died with a push in flight and give
// the push to another, so it is kept short: the channel call (config.MaxHTTPTimeout at
// most), a wait of at most a couple of seconds for the request's slot, and the
// records around the call.
const PushActivityTimeout = 30 * time.Second

// PushHeartbeatTimeout is how long a push may go without a heartbeat: a push that
// outlives PushHeartbeatEvery heartbeats while it waits for its slot and the
// channel, so a worker that died with a push in flight is noticed after this,
// not after the whole PushActivityTimeout.
const PushHeartbeatTimeout = 10 * time.Second

// PushHeartbeatEvery is how often a running push heartbeats. The first beat comes
// only after it: a push that ends sooner (most do) sends none.
const PushHeartbeatEvery = 3 * time.Second
