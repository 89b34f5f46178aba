// Package limiter is paritysync's distributed rate governor: every worker asks it,
// through one Redis round trip, whether a channel request may go out now.
//
// All state lives in Redis and every decision runs in one Lua script (acquire.lua,
// run with EVALSHA, EVAL when the script cache is cold). Time comes only from Redis
// TIME, so workers with skewed clocks share one budget. In order, a decision checks:
//
//  1. the channel's operator pause, then a back-off written after a 429;
//  2. the daily quota: a request that would take usage past 100 % is denied until the
//     next UTC midnight, and so is priority ≥ 4 work that would reach 95 %;
//  3. the token bucket of the request's (channel, family[, property]) with the
//     priority reserve: priority > 1 takes a token only while more than the reserve
//     stays behind, so urgent work always finds capacity.
//
// The bucket refills continuously at the family's configured rate, lowered to the
// family's share of an adaptive channel rate (90 % of what the channel's rate-limit
// headers report, see Adapt) and halved from 95 % of the daily quota on. A denied
// call writes nothing. A Redis error is returned as an error and means "no token":
// callers fail closed.
//
// # Keys
//
// Every key starts with Options.Prefix ("paritysync:" by default) followed by the
// channel slug in a hash tag, so that one channel's keys share a hash slot and the
// script runs on Redis Cluster. Every key is passed in KEYS and has a TTL:
//
//	<prefix>{<channel>}:pause                  operator pause reason; TTL Options.PauseTTL (7 days)
//	<prefix>{<channel>}:paused_until           back-off end, Unix ms; expires about then
//	<prefix>{<channel>}:daily                  quota used today; expires at the next UTC midnight
//	<prefix>{<channel>}:adaptive               adaptive channel rate per minute; TTL = the
//	                                           server's reset time, at least 2 s
//	<prefix>{<channel>}:bucket:<family>        token bucket (hash: t tokens, ts Unix ms);
//	<prefix>{<channel>}:bucket:<family>:<property>  (per-property channels)
//	                                           TTL twice its refill time, at most a day;
//	                                           an expired bucket reads as full, which
//	                                           it would be by then
//
// The daily counter is one key per channel rather than one per date so that no
// client clock picks the key; PEXPIREAT at the next UTC midnight, computed from
// Redis TIME, resets it.
//
// The channel configuration lives in Go and travels in ARGV, so a config change
// takes effect on the next decision without touching Redis.
package limiter
