"""What containers really use of their GPU share: NVML samples matched to pods through cgroups, the usage
report and over-share. May import node, placement, specs and wire; never admission."""
