"""Derived configuration and the rules it must obey, each written once: `codes` (choices as array codes
and back), `layout` (degrees, micro-batches, layers per stage, group placement, tokens per rank) and
`rules` (every divisibility and shape rule, with its message). Below workload, comm and estimate; above
specs."""
