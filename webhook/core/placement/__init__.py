"""Where a pod's GPU memory goes: its ask, node ledgers, the GPU choice and ranking (binpack, spread),
whole cards, node modes and the placement annotations. May import specs and wire, never admission or node."""
