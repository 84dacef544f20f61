"""A pod spec read once: pod templates inside any object, each container's GPU fields with their paths and
parsed amounts, and how a gpu-mem value is worded. May import wire only."""
