package models

import "time"

// PushActivityTimeout is the StartToCloseTimeout of a push activity. It is also how
// long Temporal takes to notice a worker that died with a push in flight and give
// the push to another, so it is kept short: the channel call (config.MaxHTTPTimeout at
// most), a wait of at most a couple of seconds for the request's slot, and the
// records around the call.
const PushActivityTimeout = 30 * time.Second
