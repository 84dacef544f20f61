"""A pod read once (podread): pod templates inside any object, each container's GPU fields and parsed
amounts, the resource rules' findings and the pod's demands, and how they are worded. May import wire only."""
