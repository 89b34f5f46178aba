package main

import (
	"github.com/spf13/cobra"

	"github.com/paritysync/paritysync/models"
)

// Dynamic shell completion: the output formats, and the channels of the channel
// configuration the command would read (PARITYSYNC_CHANNELS_FILE, or the built-in
// channels).

// outputFormats are the values of --output.
var outputFormats = []string{"table", "json"}

// completeOutput completes --output.
func completeOutput(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return outputFormats, cobra.ShellCompDirectiveNoFileComp
}

// channelNames are the configured channels' slugs, or none when the configuration
// cannot be read (completion never fails loudly).
func (c *cli) channelNames() []string {
	s, err := models.LoadSettings(c.getenv)
	if err != nil {
		return nil
	}
	chs, err := models.LoadChannels(s.ChannelsFile, c.getenv)
	if err != nil {
		return nil
	}
	names := make([]string, len(chs))
	for i, ch := range chs {
		names[i] = ch.Slug
	}
	return names
}

// completeChannels completes cmd's flag name with the configured channels.
func (c *cli) completeChannels(cmd *cobra.Command, name string) {
	err := cmd.RegisterFlagCompletionFunc(name, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return c.channelNames(), cobra.ShellCompDirectiveNoFileComp
	})
	if err != nil {
		panic(err) // a flag name typo in this package
	}
}

// channelArgs completes a command's one CHANNEL argument.
func (c *cli) channelArgs(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return c.channelNames(), cobra.ShellCompDirectiveNoFileComp
}
