package workflows

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/paritysync/paritysync/models"
)

func (s *unitSuite) runPaced(c models.Chunk, window int) models.ChannelCounts {
	return s.runChild(models.ChannelSyncInput{BatchID: "b1", Chunk: c, Window: window, PacedLanes: true})
}

func (s *unitSuite) TestPacedLanesEndWhileTheirSlotsNeedATimer() {
	var last []int // requests pushed without holding a next slot
	s.onPush(func(in models.PushInput) (models.PushResult, error) {
		res := models.PushResult{Committed: 1}
		if in.NextReservation != "" {
			res.Next = &models.Slot{Index: in.Next, Wait: 8 * time.Second}
		} else {
			last = append(last, in.Index)
		}
		return res, nil
	}).Times(12)

	counts := s.runPaced(chunk("expedia", 5, 0, 12, 12), 4)

	s.Equal(12, counts.Committed)
	// Four lanes start (0+1, 2+3, 4+5, 6+7); three of them find their next slot 8 s
	// away and end with it, the fourth takes the rest of the queue (8..11).
	s.Require().Len(last, 4)
	slices.Sort(last)
	s.Equal(11, last[3])
	s.Subset([]int{1, 3, 5, 7}, last[:3])
	s.Equal(last[:3], slices.Compact(slices.Clone(last[:3])), "three lanes end, each once")
	s.Len(s.timers, 8)
}

func (s *unitSuite) TestPacedLaneHandsItsPushTheRequestsWhoseSlotsAreNear() {
	var inputs []models.PushInput
	s.onPush(func(in models.PushInput) (models.PushResult, error) {
		inputs = append(inputs, in)
		res := models.PushResult{Committed: 1}
		if in.NextReservation == "" {
			return res, nil
		}
		if len(in.Then) == 0 {
			res.Next = &models.Slot{Index: in.Next, Wait: time.Second}
			return res, nil
		}
		// The attempt delivers Next too and holds the slot of Then[0], a second away.
		res.Chained = []models.PushResult{{Committed: 1}}
		res.Next = &models.Slot{Index: in.Then[0], Wait: time.Second}
		return res, nil
	}).Times(4)

	counts := s.runPaced(chunk("expedia", 5, 0, 6, 6), 1)

	s.Equal(6, counts.Committed)
	s.Equal(6, counts.Requests)
	s.Empty(s.timers, "every slot within the short wait is waited out in the activity")
	s.Require().Len(inputs, 4)
	// The first push holds 1; the second holds 2 and hands 3..5 along, delivers 2;
	// the third (3) delivers 4 and hands 5; the last pushes 5 alone.
	s.Equal([]int{0, 1, 3, 5}, []int{inputs[0].Index, inputs[1].Index, inputs[2].Index, inputs[3].Index})
	s.Empty(inputs[0].Then)
	s.Equal(2, inputs[1].Next)
	s.Equal([]int{3, 4, 5}, inputs[1].Then)
	s.Require().Len(inputs[1].ThenReservations, 3)
	for k, r := range inputs[1].ThenReservations {
		s.True(strings.HasSuffix(r, "/"+strconv.Itoa(inputs[1].Then[k])), r)
	}
	s.Equal(4, inputs[2].Next)
	s.Equal([]int{5}, inputs[2].Then)
	s.Empty(inputs[3].NextReservation)
	_ = models.DefaultShortWait
}
