"""Where a pod's GPU memory goes: its demand, node ledgers, the GPU choice and ranking (binpack, spread),
whole cards, node modes and the placement annotations. May import specs and wire, never admission or node."""
