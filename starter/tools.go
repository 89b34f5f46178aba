package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

func (c *cli) retryAfterCmd() *cobra.Command {
	var maxWait time.Duration
	var channel, now string
	cmd := &cobra.Command{
		Use:   "retry-after VALUE [--max DURATION | --channel CHANNEL] [--now TIME]",
		Short: "Print the wait a Retry-After value parses to, as the worker reads it",
		Long: `Parse VALUE as the worker parses a channel's Retry-After header: delta-seconds
("30") or an HTTP-date (IMF-fixdate "Wed, 09 May 2026 17:05:00 GMT", RFC 850 or
asctime). A date in the past means "now"; the wait is capped at --max, or at the
channel's max_retry_after with --channel. A negative or malformed value is not
usable: the worker then falls back to its own backoff, and this command exits 65.`,
		Example: `  starter retry-after 30
  starter retry-after "Wed, 09 May 2026 17:05:00 GMT" --output json`,
		Args: exactArgs(1, "one Retry-After value (quote an HTTP-date)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			at := time.Now()
			if now != "" {
				t, err := time.Parse(time.RFC3339, now)
				if err != nil {
					return usageError(fmt.Sprintf("--now %q: want an RFC 3339 time like 2026-05-09T17:00:00Z", now))
				}
				at = t
			}
			if channel != "" {
				if flagSet(cmd.Flags(), "max") {
					return usageError("retry-after: give --max or --channel, not both")
				}
				d, err := c.deps()
				if err != nil {
					return err
				}
				ch, ok := d.channel(channel)
				if !ok {
					return usageError(fmt.Sprintf("--channel %q: not a configured channel", channel))
				}
				maxWait = ch.MaxRetryAfter
			}
			return c.retryAfter(args[0], at, maxWait)
		},
	}
	cmd.Flags().DurationVar(&maxWait, "max", 120*time.Second, "cap on the wait (0: no cap)")
	cmd.Flags().StringVarP(&channel, "channel", "c", "", "cap at this channel's max_retry_after instead")
	cmd.Flags().StringVar(&now, "now", "", "the time the response arrived, RFC 3339 (default: now)")
	return cmd
}

// retryAfterResult is what retry-after prints.
type retryAfterResult struct {
	Value       string    `json:"value"`
	Usable      bool      `json:"usable"`
	WaitSeconds float64   `json:"wait_seconds"`
	WakeUp      time.Time `json:"absolute_wakeup_utc"`
	Capped      bool      `json:"capped"`
	MaxSeconds  float64   `json:"max_seconds,omitempty"`
}

func (c *cli) retryAfter(value string, now time.Time, maxWait time.Duration) error {
	wait, ok := channels.ParseRetryAfter(value, now, maxWait)
	uncapped, _ := channels.ParseRetryAfter(value, now, 0)
	r := retryAfterResult{Value: value, Usable: ok, MaxSeconds: maxWait.Seconds()}
	if ok {
		r.WaitSeconds = wait.Seconds()
		r.WakeUp = now.Add(wait).UTC().Truncate(time.Millisecond)
		r.Capped = uncapped > wait
	}
	if c.json() {
		if err := c.writeJSON(r); err != nil {
			return err
		}
	} else if ok {
		t := newTable(c.stdout, "value\twait\twake up (UTC)\tcapped", 0)
		t.row("%s\t%s\t%s\t%v", value, wait, r.WakeUp.Format(time.RFC3339), r.Capped)
		if err := t.flush(); err != nil {
			return err
		}
	}
	if !ok {
		return dataError(fmt.Errorf("retry-after %q: not delta-seconds or an HTTP-date; the worker falls back to its own backoff", value))
	}
	return nil
}

func (c *cli) smoothCmd() *cobra.Command {
	var file string
	var window time.Duration
	var used, speed int
	cmd := &cobra.Command{
		Use:   "smooth --csv FILE [--window DURATION] [--used N] [--speed N]",
		Short: "Print the send plan the burst smoother would make for a CSV of changes",
		Long: `Plan a CSV of changes as paritysync would send them, without sending anything:
the channel's smoother gathers them into batches of at most ` + strconv.Itoa(models.MaxInlineMutations) + ` mutations;
each batch is validated (rejections are listed), merged into channel requests
(models.Coalesce, the code the worker runs) and timed by replaying them through the
limiter the workers run, as 'simulate' does (on REDIS_URL under a key prefix of its
own, --speed times faster than real time): urgent first within a batch, all asking
at once, or spread evenly over --window. The plan assumes the channel is otherwise
idle; the quota columns add the plan to --used.

The CSV has a header row naming mutation fields, as in the JSON form: id,
property_id, room_type_code, rate_plan_code, channel, stay_date, amount, currency,
inventory, stop_sell, min_los, max_los, cta, ctd, version, priority, correlation_id.
Empty cells are "not changed".`,
		Example: `  starter smooth --csv changes.csv
  starter smooth --csv changes.csv --window 2m --output json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if window < 0 || used < 0 {
				return usageError("smooth: --window and --used must not be negative")
			}
			if speed < 1 {
				return usageError(fmt.Sprintf("--speed %d: want >= 1", speed))
			}
			return c.smooth(cmd.Context(), file, window, used, speed)
		},
	}
	cmd.Flags().StringVar(&file, "csv", "", "the changes, one mutation per row, with a header row (required)")
	cmd.Flags().DurationVar(&window, "window", 0, "spread each channel's sends over at least this long (0: as fast as the budget allows)")
	cmd.Flags().IntVar(&used, "used", 0, "daily quota already used, to show the tier the plan reaches")
	speedFlag(cmd, &speed)
	required(cmd, "csv")
	return cmd
}

// plannedSend is one channel request in the plan.
type plannedSend struct {
	AtSeconds float64       `json:"at_seconds"`
	Batch     int           `json:"batch"`
	Priority  int           `json:"priority"`
	Family    models.Family `json:"family"`
	Property  string        `json:"property_id"`
	Lines     int           `json:"lines"`
	Mutations int           `json:"mutations"`
	Cost      int           `json:"cost"`
	// Refused is true for a request the daily quota refused in the replay: it has
	// no send time.
	Refused bool `json:"refused,omitempty"`
}

// channelPlan is one channel's part of the plan.
type channelPlan struct {
	Channel         string             `json:"channel"`
	Mutations       int                `json:"mutations"`
	Rejected        []models.Rejection `json:"rejected,omitempty"`
	Superseded      int                `json:"superseded"`
	Batches         int                `json:"batches"`
	Requests        int                `json:"requests"`
	Cost            int                `json:"cost"`
	DailyQuota      int                `json:"daily_quota"`
	QuotaAfterPct   float64            `json:"quota_after_percent"`
	FinishesSeconds float64            `json:"finishes_after_seconds"`
	Sends           []plannedSend      `json:"sends"`
}

func (c *cli) smooth(ctx context.Context, file string, window time.Duration, used, speed int) error {
	ms, err := readChangesCSV(file)
	if err != nil {
		return dataError(err)
	}
	d, err := c.deps()
	if err != nil {
		return err
	}
	v, err := ops.NewValidator(d.settings, d.channels)
	if err != nil {
		return configError(err)
	}
	defer d.close()
	rdb, err := d.redis(ctx)
	if err != nil {
		return err
	}
	plans, err := planSends(ctx, rdb, ms, d.channels, v, window, used, speed)
	if err != nil {
		return err
	}
	if c.json() {
		return c.writeJSON(plans)
	}
	for _, p := range plans {
		fmt.Fprintf(c.stdout, "%s: %d mutations in %d batches -> %d requests (%d rejected, %d superseded), done after %s; "+
			"quota %d/%d (%.1f%%)\n", p.Channel, p.Mutations, p.Batches, p.Requests, len(p.Rejected), p.Superseded,
			seconds(p.FinishesSeconds).Round(100*time.Millisecond), used+p.Cost, p.DailyQuota, p.QuotaAfterPct)
		t := newTable(c.stdout, "  at\tbatch\tpriority\tfamily\tproperty\tlines\tmutations\tcost", 0)
		for _, s := range p.Sends {
			at := "+" + seconds(s.AtSeconds).Round(100*time.Millisecond).String()
			if s.Refused {
				at = "refused"
			}
			t.row("  %s\t%d\t%d\t%s\t%s\t%d\t%d\t%d", at, s.Batch, s.Priority,
				s.Family, s.Property, s.Lines, s.Mutations, s.Cost)
		}
		if err := t.flush(); err != nil {
			return err
		}
		for _, r := range p.Rejected {
			fmt.Fprintf(c.stdout, "  rejected %s: %s\n", r.MutationID, models.ValidationError(r.Problems).Error())
		}
	}
	return nil
}

// planSends is the send plan per channel, in configuration order: the requests the
// smoother's batches coalesce into, timed by replaying them through the limiter on
// rdb (simulateTrace), all arriving at once or spread evenly over window.
func planSends(ctx context.Context, rdb redis.UniversalClient, ms []models.Mutation, channels []models.ChannelConfig,
	v *models.Validator, window time.Duration, used, speed int) ([]channelPlan, error) {
	byChannel := map[string][]models.Mutation{}
	var unknown []models.Rejection
	for _, m := range ms {
		byChannel[m.Channel] = append(byChannel[m.Channel], m)
	}
	cfgs := models.ChannelMap(channels)
	var plans []channelPlan
	var trace []traceRequest
	// first is the index in trace of each plan's first request.
	var first []int
	for _, ch := range channels {
		list := byChannel[ch.Slug]
		delete(byChannel, ch.Slug)
		if len(list) == 0 {
			continue
		}
		p := channelPlan{Channel: ch.Slug, Mutations: len(list), DailyQuota: ch.DailyQuota, Sends: []plannedSend{}}
		var reqs []models.ChannelRequest
		var batchOf []int
		// The smoother flushes at most MaxInlineMutations per batch, in arrival order.
		for start := 0; start < len(list); start += models.MaxInlineMutations {
			p.Batches++
			var valid []models.Mutation
			for _, m := range list[start:min(start+models.MaxInlineMutations, len(list))] {
				m.ApplyDefaults(uuid.NewString)
				if problems := v.Validate(m); len(problems) > 0 {
					p.Rejected = append(p.Rejected, models.Rejection{MutationID: m.ID, Channel: m.Channel, Problems: problems})
					continue
				}
				valid = append(valid, v.Expand(m).Nights...) // a range as its nights
			}
			co := models.Coalesce(valid, cfgs)
			p.Superseded += len(co.Superseded)
			// Urgent first within a batch, as the limiter serves priorities.
			slices.SortStableFunc(co.Requests, func(a, b models.ChannelRequest) int { return a.Priority - b.Priority })
			for _, r := range co.Requests {
				reqs = append(reqs, r)
				batchOf = append(batchOf, p.Batches)
			}
		}
		var spacing time.Duration
		if window > 0 && len(reqs) > 0 {
			spacing = window / time.Duration(len(reqs))
		}
		first = append(first, len(trace))
		for i, r := range reqs {
			cost := ch.Cost(r)
			p.Cost += cost
			p.Sends = append(p.Sends, plannedSend{Batch: batchOf[i], Priority: r.Priority,
				Family: r.Family, Property: r.PropertyID, Lines: len(r.Lines), Mutations: len(r.Refs), Cost: cost})
			trace = append(trace, traceRequest{At: time.Duration(i) * spacing, Channel: ch.Slug, Family: r.Family,
				Property: r.PropertyID, Priority: r.Priority, Cost: cost})
		}
		p.Requests = len(reqs)
		if ch.DailyQuota > 0 {
			p.QuotaAfterPct = float64(used+p.Cost) * 100 / float64(ch.DailyQuota)
		}
		plans = append(plans, p)
	}
	if len(trace) > 0 {
		sims, err := simulateTrace(ctx, rdb, channels, trace, speed)
		if err != nil {
			return nil, err
		}
		sendAt := map[string]map[int]time.Duration{}
		for _, sc := range sims {
			sendAt[sc.Channel] = sc.sendAt
		}
		for n := range plans {
			p := &plans[n]
			for i := range p.Sends {
				at, ok := sendAt[p.Channel][first[n]+i]
				if !ok {
					p.Sends[i].Refused = true
					continue
				}
				p.Sends[i].AtSeconds = at.Seconds()
				p.FinishesSeconds = max(p.FinishesSeconds, at.Seconds())
			}
		}
	}
	for _, m := range ms {
		if _, ok := byChannel[m.Channel]; ok {
			unknown = append(unknown, models.Rejection{MutationID: m.ID, Channel: m.Channel,
				Problems: []models.FieldError{{Field: "channel", Rule: models.RuleChannelUnknown}}})
		}
	}
	if len(unknown) > 0 {
		plans = append(plans, channelPlan{Channel: "(unknown)", Mutations: len(unknown), Rejected: unknown, Sends: []plannedSend{}})
	}
	return plans, nil
}

// csvInts and csvBools are the CSV columns that are not strings in the JSON form.
var (
	csvInts  = []string{"inventory", "min_los", "max_los", "version", "priority"}
	csvBools = []string{"stop_sell", "cta", "ctd", "full_sync"}
)

// readChangesCSV reads mutations from a CSV with a header row of mutation field
// names; each row goes through the JSON decoding of models.Mutation, so a CSV
// means what the same JSON line means. Errors name the file, line and column.
func readChangesCSV(path string) ([]models.Mutation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.TrimLeadingSpace = true
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: no header row and no changes", path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range header {
		header[i] = strings.TrimSpace(strings.ToLower(header[i]))
	}
	var ms []models.Mutation
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		line, _ := r.FieldPos(0)
		obj := map[string]json.RawMessage{}
		for i, col := range header {
			val := strings.TrimSpace(rec[i])
			if val == "" {
				continue
			}
			switch {
			case slices.Contains(csvInts, col):
				if _, err := strconv.ParseInt(val, 10, 64); err != nil {
					return nil, fmt.Errorf("%s line %d: column %s: want an integer, got %q", path, line, col, val)
				}
				obj[col] = json.RawMessage(val)
			case slices.Contains(csvBools, col):
				b, err := strconv.ParseBool(val)
				if err != nil {
					return nil, fmt.Errorf("%s line %d: column %s: want true or false, got %q", path, line, col, val)
				}
				obj[col] = json.RawMessage(strconv.FormatBool(b))
			default:
				q, _ := json.Marshal(val)
				obj[col] = q
			}
		}
		raw, _ := json.Marshal(obj)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		var m models.Mutation
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("%s line %d: %s", path, line, strings.Replace(jsonProblem(err), "field", "column", 1))
		}
		ms = append(ms, m)
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("%s: no changes after the header row", path)
	}
	return ms, nil
}
