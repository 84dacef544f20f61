"""The device plugin's GPU usage: the node's pod shares, the poll, over-share actions, the usage series on
/metrics and the /usage route, built from the plugin's settings (`wiring.build`)."""
