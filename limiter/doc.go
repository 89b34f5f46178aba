// Package limiter is paritysync's distributed rate governor and ordering gate: every
// worker asks it, through one Redis round trip, when a channel request may go out and
// which of its nights may go at all.
//
// All state lives in Redis and every decision runs in one atomic Lua call
// (lua/reserve.lua, a function of the limiter's library: FCALL, with the library
// loaded once per server, again when a server has lost it). Each other operation has a
// script of its own in lua/, run with EVALSHA, EVAL when the script cache is cold.
// Time comes only from Redis TIME, so workers with skewed clocks share one budget.
// Reserve checks, in order:
//
//  1. the channel's operator pause, then a back-off written after a 429 or by rate-
//     limit headers reporting nothing left that our own traffic does not explain —
//     channel-wide (Backoff), or only one property's window on a channel that
//     limits per property (BackoffScope). When a back-off ends, the pace restarts
//     from its end without a burst, so the requests that waited leave one interval
//     apart, not together — a slot held before the back-off and come due during it
//     is given back, and its holder queues behind the end with the others;
//  2. the daily quota: a request that would take usage past 100 % waits for the next
//     UTC midnight, and so does priority ≥ 4 work that would reach 95 % (where the
//     window's limit also halves); so does a family the channel stopped with
//     quota_exhausted (StopFamily), while its other families go on;
//  3. a slot in the channel's schedule — per channel, or per property and family on
//     a channel that limits per property. A slot is granted only where the window
//     (slot − window − margin, slot] holds fewer than the declared limit, at a pace
//     of one per (window + margin) / limit after at most burst back to back — the
//     window is the channel's ChannelConfig.Window, 60 s unless the channel declares
//     another; bulk work
//     (priority 4 and 5) never takes the burst, so a window it saturates stays evenly
//     paced and urgent work finds a slot within one interval. Families and
//     properties share the one schedule: their shares are weights, not partitions.
//     The slot is held for the request's id, so a request costs one decision and at
//     most one wait, and waiters are spread over distinct slots instead of waking
//     together. A new request may take the earliest future slot held by lower-
//     priority work, or the earliest held by the equal-priority property and family
//     furthest over its weighted turn, if that one holds more than the requester's
//     turn; the holder moves to the tail. Work that has waited Options.MaxAge is
//     never moved again. An index of the held slots (below) answers both in
//     O(log n) of the slots held: no decision reads the schedule.
//  4. once the slot is due, the ordering gate of (channel, property, family): nights
//     already sent with a newer version are dropped (superseded) and the rest are
//     recorded, on every attempt; a request touching nights another in-flight request
//     holds is blocked until that one's Release or its lease expires. A push whose
//     answer never came is not released: the channel may still apply it.
//
// A request that is not sent consumes nothing: a blocked or superseded answer gives
// its slot back, and a slot due at once moves the pace only when it is sent, so the
// burst stays whole; a slot held earlier gives its pace back too when nothing was
// reserved behind it since (what was keeps its slot). Paused, back-off, breaker and
// quota answers change no state. A Redis error is returned as an error
// and means "no send": callers fail closed.
//
// # Keys
//
// Every key starts with Options.Prefix ("paritysync:" by default) followed by the
// channel slug in a hash tag, so one channel's keys share a hash slot and the script
// runs on Redis Cluster. Every key a script touches is passed in KEYS and has a TTL.
// <scope> is "all", or <property>:<family> on a per-property channel.
//
//	<prefix>{<channel>}:pause                 operator pause reason; TTL Options.PauseTTL (7 days)
//	<prefix>{<channel>}:paused_until          back-off end, Unix ms; expires a window after it
//	<prefix>{<channel>}:paused_until:<scope>  the same for one scope (BackoffScope)
//	<prefix>{<channel>}:backoffs              sorted set of the scopes backed off, by end (Unix
//	                                          ms), for Status and BackoffsOf; an ended one
//	                                          leaves at the next BackoffScope; TTL a window
//	                                          after the last end
//	<prefix>{<channel>}:daily                 quota used today; expires at the next UTC midnight
//	<prefix>{<channel>}:quota_stop:<family>   end of the family's stop (StopFamily), Unix ms;
//	                                          expires a window after it
//	<prefix>{<channel>}:adaptive:<scope>      requests per window others use, from headers;
//	                                          TTL the server's reset time, at least 2 s
//	<prefix>{<channel>}:sched:<scope>         sorted set of slots (Unix ms): the last window's
//	                                          and every held future one; TTL one to two
//	                                          windows (and a second) after its last slot
//	<prefix>{<channel>}:tat:<scope>           the pace's next theoretical slot; TTL past it
//	<prefix>{<channel>}:res                   reservations by id (slot, state, priority,
//	                                          group, weight, first ask); pruned with their
//	                                          slots, TTL one to two windows (and a second)
//	                                          after the channel's last slot
//	<prefix>{<channel>}:index4:<scope>        the held index (lua/prelude.lua says how): the
//	<prefix>{<channel>}:turn4:<scope>         movable held slots by priority and by priority
//	                                          and group; per group its held and movable
//	                                          counts; per priority the groups' turn scores,
//	                                          and every held slot's due time and age limit.
//	                                          Emptied as slots come due; TTL one to two
//	                                          windows (and a second) after the last slot.
//	                                          (index2, pending2 and turn2, and index,
//	                                          pending and turn, earlier layouts, are no
//	                                          longer read: they expire with their slots)
//	<prefix>{<channel>}:alive:<scope>         a time (Unix ms) that the scope's sched, index4
//	                                          and turn4 (and on a channel-wide scope res)
//	                                          outlive if they exist, so that a decision
//	                                          reads one value where it read four TTLs
//	                                          (lua/reserve.lua, keep_alive); expires then
//	<prefix>{<channel>}:budget                rate, burst, scope and window in force (CheckConfig);
//	                                          TTL 10 min, renewed by decisions every 30 s
//	<prefix>{<channel>}:budget_renewed        the mark of the budget's last renewal; TTL 30 s
//	<prefix>{<channel>}:gate:<property>:<family>   newest version sent, per room|plan the
//	                                          ranges of nights sent at one version (16 B
//	                                          each, lua/gate.lua says how); nights before the
//	                                          property's today leave it (Options.Zones);
//	                                          TTL Options.GateTTL (30 days) after the last send
//	<prefix>{<channel>}:lease:<property>:<family>  in-flight requests' nights; each lease ends
//	                                          with Release or after Options.Lease (30 s)
//	                                          plus the channel's max_apply_delay
//
// Losing these keys costs a conservative restart (an empty schedule grants at most
// one burst, and headers that report less room than ours lower the limit) and the
// gate's memory, which its owner rebuilds from the system of record.
//
// The channel configuration lives in Go and travels in ARGV, so a config change
// takes effect on the next decision without touching Redis. Workers must agree on
// it: CheckConfig, called at a worker's start, compares the channel's budget (rate,
// burst, scope, window) with the one the first worker recorded and names every
// field that differs. A different key prefix puts a worker's keys elsewhere, which
// Redis alone cannot see: the prefix must be the same on every worker of a task
// queue, and the worker refuses to start on a task queue polled under another one
// (worker/prefix.go).
package limiter
