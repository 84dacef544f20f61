"""What a node gives a container: fake device IDs, which waiting container a kubelet request is for, GPU env,
MPS, GPU labels, CDI specs and DRA slices and shares. May import placement, specs and wire."""
