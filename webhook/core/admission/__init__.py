"""Whether an object's GPU spec is admitted: the rules, the verdict, the isolation nodeSelector, look-alike
names, DRA claims and quota spellings. May import node, placement, specs and wire; never usage."""
