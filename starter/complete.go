package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/paritysync/paritysync/config"
)

// Dynamic shell completion: the output formats, the channels of the channel
// configuration the command would read (PARITYSYNC_CHANNELS_FILE, or the built-in
// channels), and the ids of recent batches, from Temporal.

// outputFormats are the values of --output.
var outputFormats = []string{"table", "json"}

// completeOutput completes --output.
func completeOutput(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return outputFormats, cobra.ShellCompDirectiveNoFileComp
}

// channelNames are the configured channels' slugs, or none when the configuration
// cannot be read (completion never fails loudly).
func (c *cli) channelNames() []string {
	s, err := config.LoadSettings(c.getenv)
	if err != nil {
		return nil
	}
	chs, err := config.LoadChannels(s.ChannelsFile, c.getenv)
	if err != nil {
		return nil
	}
	names := make([]string, len(chs))
	for i, ch := range chs {
		names[i] = ch.Slug
	}
	return names
}

// everyChannel is the --channel usage of a command that, without it, acts on every
// configured channel.
const everyChannel = "one channel (default: every configured channel)"

// channelFlag declares cmd's --channel (-c) into dst, completed with the configured
// channels.
func (c *cli) channelFlag(cmd *cobra.Command, dst *string, usage string) {
	cmd.Flags().StringVarP(dst, "channel", "c", "", usage)
	err := cmd.RegisterFlagCompletionFunc("channel", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return c.channelNames(), cobra.ShellCompDirectiveNoFileComp
	})
	if err != nil {
		panic(err) // the flag was declared just above
	}
}

// channelArgs completes a command's one CHANNEL argument.
func (c *cli) channelArgs(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return c.channelNames(), cobra.ShellCompDirectiveNoFileComp
}

// completionTimeout bounds a completion that asks Temporal: a shell waits on it.
const completionTimeout = 2 * time.Second

// maxCompletedBatches is how many of the most recent batches completion offers.
const maxCompletedBatches = 50

// batchArgs completes a command's one BATCH_ID argument with the most recent
// batches whose id starts with what was typed; nothing when Temporal does not
// answer in time.
func (c *cli) batchArgs(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	d, err := c.open(ctx, useTemporal)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer d.close()
	resp, err := d.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: "WorkflowType = 'BatchSync'", PageSize: maxCompletedBatches,
	})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var ids []string
	for _, e := range resp.GetExecutions() {
		id, _ := batchWorkflowID(e.GetExecution().GetWorkflowId())
		if strings.HasPrefix(id, toComplete) {
			ids = append(ids, id)
		}
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}
