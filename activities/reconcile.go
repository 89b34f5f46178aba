package activities

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/models"
)

// DiffChannel reads a channel's state back for every property the ledger knows and
// compares it, cell by cell and family by family, with what the ledger says was
// committed. Cells that drifted (the channel lost, never applied or changed a
// value) become repair mutations at the committed version and bulk priority,
// stored for a BatchSync to load. A channel configured without read-back cannot be
// compared: every committed cell is re-sent instead, and counted as Resent.
func (a *Activities) DiffChannel(ctx context.Context, in models.DiffInput) (models.ChannelDrift, error) {
	res := models.ChannelDrift{Channel: in.Channel}
	cells, err := a.Store.LedgerCells(ctx, in.Channel, in.From, in.To)
	if err != nil {
		return res, err
	}
	var repairs []models.Mutation
	if cfg, ok := a.Channels[in.Channel]; ok && !cfg.ReadBack {
		for _, lc := range cells {
			res.Checked++
			res.Resent++
			repairs = append(repairs, repair(lc, fmt.Sprintf("%s-%d", in.BatchID, len(repairs)+1)))
		}
		cells = nil
	}
	for start := 0; start < len(cells); {
		property := cells[start].Cell.PropertyID
		end := start
		for end < len(cells) && cells[end].Cell.PropertyID == property {
			end++
		}
		st, err := a.Client.ReadBack(ctx, in.Channel, property, in.From, in.To)
		if err != nil {
			return res, fmt.Errorf("read back %s/%s: %w", in.Channel, property, err)
		}
		held := map[[3]string]models.ARICell{}
		for _, c := range st.Cells {
			held[[3]string{c.RoomTypeCode, c.RatePlanCode, c.Date.String()}] = c
		}
		for _, lc := range cells[start:end] {
			res.Checked++
			c := lc.Cell
			if holds(lc.Family, lc.Entry.Values, held[[3]string{c.RoomTypeCode, c.RatePlanCode, c.StayDate.String()}]) {
				continue
			}
			res.Drifted++
			repairs = append(repairs, repair(lc, fmt.Sprintf("%s-%d", in.BatchID, len(repairs)+1)))
		}
		activity.RecordHeartbeat(ctx, property)
		start = end
	}
	if len(repairs) > 0 {
		if res.PayloadKey, err = a.Store.SaveBatch(ctx, in.BatchID, repairs); err != nil {
			return res, err
		}
	}
	activity.GetLogger(ctx).Info("reconciled", "channel", in.Channel, "checked", res.Checked, "drifted", res.Drifted, "resent", res.Resent)
	return res, nil
}

// holds reports whether the channel's cell carries every value of family f that the
// committed line set; fields the line left unset are not the ledger's to judge.
func holds(f models.Family, want models.ARILine, got models.ARICell) bool {
	same := func(a, b *int) bool { return a == nil || (b != nil && *a == *b) }
	sameBool := func(a, b *bool) bool { return a == nil || (b != nil && *a == *b) }
	switch f {
	case models.FamilyRates:
		return want.Amount == nil || (got.Amount != nil && want.Amount.Equal(*got.Amount) && want.Currency == got.Currency)
	case models.FamilyAvailability:
		return same(want.Inventory, got.Inventory)
	case models.FamilyRestrictions:
		return sameBool(want.StopSell, got.StopSell) && same(want.MinLOS, got.MinLOS) && same(want.MaxLOS, got.MaxLOS) &&
			sameBool(want.CTA, got.CTA) && sameBool(want.CTD, got.CTD)
	}
	return true
}

// repair is the mutation that sets a drifted cell back to its committed values. It is
// a full sync, so bulk priority, except that a drifted stop-sell or zero inventory
// stays urgent: ApplyDefaults decides, as for any PMS mutation.
func repair(lc LedgerCell, id string) models.Mutation {
	m := models.MutationOf(lc.Cell, lc.Family, lc.Entry.Values)
	m.ID, m.Version, m.FullSync = id, lc.Entry.Version, true
	return m
}
